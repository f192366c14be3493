"""A corpus of secrets and one of look-alikes, for the redaction tests and the end-to-end
leak test.

Every credential is made up at run time from a seeded generator, in the shape of a real
format (the gitleaks and detect-secrets rule sets), so no real secret is ever written
down and scanners of this repository stay quiet. `SECRETS` pairs each planted value with
the text it arrives in; `BENIGN` holds texts that look like secrets to a careless rule
(UUIDs, git SHAs, base64 images, hex colours, "password reset") and must pass unchanged.
"""

from __future__ import annotations

import base64
import random
import string
import uuid
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
URLSAFE = ALNUM + "-_"
BASE64 = ALNUM + "+/"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


class Maker:
    """Made-up values of a given shape, reproducible from the seed."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def chars(self, length: int, alphabet: str = ALNUM) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(length))

    def digits(self, length: int) -> str:
        return self.chars(length, string.digits)

    def hex(self, length: int) -> str:
        return self.chars(length, HEX)


@dataclass(frozen=True)
class Planted:
    """A secret (`value`) as it arrives in a message (`text`)."""

    name: str
    text: str
    value: str

    @property
    def pieces(self) -> tuple[str, ...]:
        """What must be gone after redaction: each word of a passphrase (redacting its
        first word alone would leave the rest in clear), else the value (a card number's
        groups of four digits are not secrets on their own)."""
        words = self.value.split()
        return tuple(words) if len(words) > 1 and all(map(str.isalpha, words)) else (self.value,)


def _pem(m: Maker, label: str) -> tuple[str, str]:
    lines = [m.chars(64, BASE64) for _ in range(6)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----", lines[2]


def _card(m: Maker, prefix: str, length: int, separator: str) -> str:
    """A card number that passes the Luhn check, grouped as printed on the card."""
    body = prefix + m.digits(length - len(prefix) - 1)
    number = body + str(luhn_check_digit(body))
    groups = (4, 6, 5) if length == 15 else (4, 4, 4, 4)
    parts, at = [], 0
    for size in groups:
        parts.append(number[at:at + size])
        at += size
    return separator.join(parts)


def luhn_check_digit(body: str) -> int:
    total = 0
    for n, digit in enumerate(reversed(body)):
        value = int(digit) * (2 if n % 2 == 0 else 1)
        total += value - 9 if value > 9 else value
    return -total % 10


def _jwt(m: Maker) -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    body = base64.urlsafe_b64encode(
        f'{{"sub":"{m.digits(10)}","name":"Ana","iat":{m.digits(10)}}}'.encode()).decode().rstrip("=")
    return f"{header}.{body}.{m.chars(43, URLSAFE)}"


def token_formats(m: Maker) -> list[tuple[str, str, str]]:
    """(format, value, the sentence it is pasted in with {} for the value)."""
    rsa, rsa_line = _pem(m, "RSA PRIVATE KEY")
    openssh, openssh_line = _pem(m, "OPENSSH PRIVATE KEY")
    formats = [
        ("aws_access_key_id", "AKIA" + m.chars(16, UPPER_ALNUM), "my key id is {}"),
        ("aws_session_key_id", "ASIA" + m.chars(16, UPPER_ALNUM), "AWS_ACCESS_KEY_ID={}"),
        ("aws_secret_labelled", m.chars(40, BASE64), "aws_secret_access_key = {}"),
        ("github_classic_pat", "ghp_" + m.chars(36), "use {} for the API"),
        ("github_oauth", "gho_" + m.chars(36), "GITHUB_TOKEN={}"),
        ("github_app_user", "ghu_" + m.chars(36), "token {} here"),
        ("github_app_server", "ghs_" + m.chars(36), "installation token: {}"),
        ("github_refresh", "ghr_" + m.chars(36), "refresh with {}"),
        ("github_fine_grained", "github_pat_" + m.chars(22) + "_" + m.chars(59), "pat {} ok"),
        ("gitlab_pat", "glpat-" + m.chars(20, URLSAFE), "my gitlab token is {}"),
        ("gitlab_deploy", "gldt-" + m.chars(20, URLSAFE), "deploy with {}"),
        ("gitlab_runner", "glrt-" + m.chars(20, URLSAFE), "runner token {}"),
        ("gitlab_oauth_secret", "gloas-" + m.chars(64, URLSAFE), "secret {}"),
        ("gitlab_runner_registration", "GR1348941" + m.chars(20, URLSAFE), "register {}"),
        ("openai_project", "sk-proj-" + m.chars(120, URLSAFE), "my key is {}."),
        ("openai_legacy", "sk-" + m.chars(48), "OPENAI_API_KEY={}"),
        ("anthropic", "sk-ant-api03-" + m.chars(93, URLSAFE) + "AA", 'Anthropic(api_key="{}")'),
        ("slack_bot", f"xoxb-{m.digits(12)}-{m.digits(13)}-{m.chars(24)}", "slack: {}"),
        ("slack_user", f"xoxp-{m.digits(12)}-{m.digits(12)}-{m.digits(12)}-{m.hex(32)}", "{}"),
        ("slack_app", f"xapp-1-A{m.chars(10, UPPER_ALNUM)}-{m.digits(13)}-{m.hex(64)}", "app {}"),
        ("slack_webhook", f"T{m.chars(8, UPPER_ALNUM)}/B{m.chars(10, UPPER_ALNUM)}/{m.chars(24)}",
         "post to https://hooks.slack.com/services/{} now"),
        ("google_api_key", "AIza" + m.chars(35, URLSAFE), "maps?key={}"),
        ("google_oauth_secret", "GOCSPX-" + m.chars(28, URLSAFE), "oauth secret {}"),
        ("google_oauth_token", "ya29." + m.chars(80, URLSAFE), "Bearer-less {}"),
        ("stripe_live_secret", "sk_live_" + m.chars(24), "Stripe key {}"),
        ("stripe_restricted", "rk_live_" + m.chars(24), "restricted key {}"),
        ("stripe_test_secret", "sk_test_" + m.chars(24), "test with {}"),
        ("stripe_webhook_secret", "whsec_" + m.chars(32), "webhook secret {}"),
        ("huggingface", "hf_" + m.chars(34, string.ascii_letters), "HF token {}"),
        ("huggingface_org", "api_org_" + m.chars(34, string.ascii_letters), "org token {}"),
        ("npm", "npm_" + m.chars(36), "//registry.npmjs.org/:_authToken={}"),
        ("sendgrid", "SG." + m.chars(22, URLSAFE) + "." + m.chars(43, URLSAFE), "sendgrid: {}"),
        ("twilio_api_key", "SK" + m.hex(32), "twilio {}"),
        ("mailgun", "key-" + m.hex(32), "mailgun {}"),
        ("mailchimp", m.hex(32) + "-us6", "mailchimp {}"),
        ("sendinblue", "xkeysib-" + m.hex(64) + "-" + m.chars(16), "brevo {}"),
        ("shopify_access", "shpat_" + m.hex(32), "shopify {}"),
        ("shopify_shared_secret", "shpss_" + m.hex(32), "shared {}"),
        ("square_access", "sq0atp-" + m.chars(22, URLSAFE), "square {}"),
        ("square_production", "EAAA" + m.chars(60, URLSAFE), "square prod {}"),
        ("facebook_page", "EAAC" + m.chars(120), "fb {}"),
        ("discord_bot", "MT" + m.chars(22, ALNUM) + "." + m.chars(6, URLSAFE) + "."
         + m.chars(27, URLSAFE), "bot.run('{}')"),
        ("discord_webhook", m.digits(18) + "/" + m.chars(68, URLSAFE),
         "https://discord.com/api/webhooks/{}"),
        ("telegram_bot", m.digits(9) + ":AA" + m.chars(33, URLSAFE), "bot {}"),
        ("teams_webhook", f"{uuid.UUID(int=m.rng.getrandbits(128))}@{uuid.UUID(int=m.rng.getrandbits(128))}"
         f"/IncomingWebhook/{m.hex(32)}/{uuid.UUID(int=m.rng.getrandbits(128))}",
         "https://acme.webhook.office.com/webhookb2/{}"),
        ("digitalocean_pat", "dop_v1_" + m.hex(64), "doctl auth init -t {}"),
        ("databricks", "dapi" + m.hex(32), "databricks {}"),
        ("doppler", "dp.pt." + m.chars(43), "doppler {}"),
        ("dynatrace", "dt0c01." + m.chars(24, UPPER_ALNUM) + "." + m.chars(64, UPPER_ALNUM), "{}"),
        ("pypi", "pypi-AgEIcHlwaS5vcmc" + m.chars(70, URLSAFE), "twine -p {}"),
        ("rubygems", "rubygems_" + m.hex(48), "gem {}"),
        ("linear", "lin_api_" + m.chars(40), "linear {}"),
        ("notion", "ntn_" + m.digits(11) + m.chars(35), "notion {}"),
        ("postman", "PMAK-" + m.hex(24) + "-" + m.hex(34), "postman {}"),
        ("pulumi", "pul-" + m.hex(40), "pulumi {}"),
        ("vault_service", "hvs." + m.chars(95, URLSAFE), "VAULT_TOKEN {}"),
        ("terraform_cloud", m.chars(14, LOWER_ALNUM) + ".atlasv1." + m.chars(67, URLSAFE), "tf {}"),
        ("heroku_v2", "HRKU-AA" + m.chars(58, URLSAFE), "heroku {}"),
        ("age_secret_key", "AGE-SECRET-KEY-1" + m.chars(58, BECH32), "{}"),
        ("onepassword_secret_key", f"A3-{m.chars(6, UPPER_ALNUM)}-{m.chars(11, UPPER_ALNUM)}-"
         f"{m.chars(5, UPPER_ALNUM)}-{m.chars(5, UPPER_ALNUM)}-{m.chars(5, UPPER_ALNUM)}", "1p {}"),
        ("alibaba", "LTAI" + m.chars(20), "aliyun {}"),
        ("artifactory", "AKCp" + m.chars(69), "jfrog {}"),
        ("atlassian", "ATATT3" + m.chars(186, URLSAFE), "jira {}"),
        ("azure_ad_client_secret", m.chars(3) + m.digits(1) + "Q~" + m.chars(34, URLSAFE), "az {}"),
        ("azure_storage_key", m.chars(86, BASE64) + "==",
         "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={};EndpointSuffix=core"),
        ("clojars", "CLOJARS_" + m.chars(60, LOWER_ALNUM), "{}"),
        ("easypost", "EZAK" + m.chars(54), "easypost {}"),
        ("flutterwave", "FLWSECK_TEST-" + m.hex(32) + "-X", "flw {}"),
        ("frameio", "fio-u-" + m.chars(64, URLSAFE), "frame {}"),
        ("grafana_service_account", "glsa_" + m.chars(32) + "_" + m.hex(8), "grafana {}"),
        ("grafana_cloud", "glc_" + m.chars(60, BASE64) + "==", "grafana cloud {}"),
        ("infracost", "ico-" + m.chars(32), "infracost {}"),
        ("perplexity", "pplx-" + m.chars(48), "pplx {}"),
        ("planetscale", "pscale_tkn_" + m.chars(43, URLSAFE), "pscale {}"),
        ("prefect", "pnu_" + m.chars(36), "prefect {}"),
        ("readme", "rdme_" + m.chars(70, LOWER_ALNUM), "readme {}"),
        ("scalingo", "tk-us-" + m.chars(48, URLSAFE), "scalingo {}"),
        ("sentry_user", "sntryu_" + m.hex(64), "sentry {}"),
        ("shippo", "shippo_live_" + m.hex(40), "shippo {}"),
        ("openshift", "sha256~" + m.chars(43, URLSAFE), "oc login --token={}"),
        ("groq", "gsk_" + m.chars(52), "GROQ {}"),
        ("xai", "xai-" + m.chars(80), "grok {}"),
        ("replicate", "r8_" + m.chars(37), "replicate {}"),
        ("supabase", "sbp_" + m.hex(40), "supabase {}"),
        ("tailscale", "tskey-auth-k" + m.chars(10) + "CNTRL-" + m.chars(33), "tailscale up --authkey {}"),
        ("figma", "figd_" + m.chars(40, URLSAFE), "figma {}"),
        ("new_relic", "NRAK-" + m.chars(27, UPPER_ALNUM), "newrelic {}"),
        ("sourcegraph", "sgp_" + m.hex(16) + "_" + m.hex(40), "src {}"),
        ("octopus", "API-" + m.chars(26, UPPER_ALNUM), "octopus {}"),
        ("maxmind", m.chars(6) + "_" + m.chars(29) + "_mmk", "geoip {}"),
        ("dropbox", "sl." + m.chars(135, URLSAFE), "dropbox {}"),
        ("mapbox_secret", "sk.eyJ" + m.chars(60, URLSAFE) + "." + m.chars(22, URLSAFE), "mapbox {}"),
        ("hilo_token", "hilo_" + m.chars(43, URLSAFE), "Authorization for hilo: {}"),
        ("jwt", _jwt(m), "my session is {}"),
        ("rsa_private_key", rsa_line, "key:\n" + rsa.replace(rsa_line, "{}")),
        ("openssh_private_key", openssh_line, openssh.replace(openssh_line, "{}")),
        ("postgres_url", m.chars(12), "postgres://app:{}@db.internal:5432/prod"),
        ("bearer_header", m.chars(40, URLSAFE), "Authorization: Bearer {}"),
        ("basic_auth_header", base64.b64encode(f"ana:{m.chars(12)}".encode()).decode(),
         "Authorization: Basic {}"),
        ("curl_user", m.chars(14), "curl -u ana:{} https://api.example.com"),
        ("datadog_app_key", m.hex(40), "DATADOG_APP_KEY={}"),
        ("client_secret_json", m.chars(32, URLSAFE), '{{"client_secret": "{}"}}'),
        ("twilio_auth_token", m.hex(32), "TWILIO_AUTH_TOKEN={}"),
    ]
    # Unlabelled AWS secret keys: nothing but the shape says what they are.
    for n in range(3):
        formats.append((f"aws_secret_unlabelled_{n}", m.chars(40, BASE64),
                        "the secret for the backup bucket: {} (don't share)"))
    return formats + more_token_formats(m)


def more_token_formats(m: Maker) -> list[tuple[str, str, str]]:
    """Formats of issue 30, after the first ones so that their values stay the same."""
    ec, ec_line = _pem(m, "EC PRIVATE KEY")
    pkcs8, pkcs8_line = _pem(m, "PRIVATE KEY")
    encrypted, encrypted_line = _pem(m, "ENCRYPTED PRIVATE KEY")
    pgp, pgp_line = _pem(m, "PGP PRIVATE KEY BLOCK")
    formats = [
        ("sentry_dsn", m.hex(32),
         f'sentry_sdk.init(dsn="https://{{}}@o{m.digits(6)}.ingest.us.sentry.io/{m.digits(7)}")'),
        ("sentry_dsn_legacy", m.hex(32), f"SENTRY_DSN=https://{m.hex(32)}:{{}}@sentry.acme.io/4"),
        ("azure_storage_key_short", m.chars(62, BASE64) + "==",
         "AccountName=acme;AccountKey={};EndpointSuffix=core.windows.net"),
        ("azure_storage_key_json", m.chars(86, BASE64) + "==", '{{"AccountKey": "{}"}}'),
        ("azure_storage_key_cli", m.chars(86, BASE64) + "==",
         "az storage blob list --account-name acme --account-key {} -c logs"),
        ("azure_service_bus", m.chars(43, BASE64) + "=",
         "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;"
         "SharedAccessKey={}"),
        ("azure_sas_signature", m.chars(43, ALNUM) + "%3D",
         "https://acme.blob.core.windows.net/logs/a.txt?sv=2022-11-02&sp=r"
         "&se=2026-01-01T00:00:00Z&sig={}"),
        ("card_visa_spaced", _card(m, "4", 16, " "), "my card is {} exp 12/29"),
        ("card_mastercard_dashed", _card(m, "2221", 16, "-"), "card: {}"),
        ("card_amex", _card(m, "37", 15, " "), "Amex {} cvv 1234"),
        ("card_discover_plain", _card(m, "6011", 16, ""), "pay with {}"),
        ("card_visa_in_json", _card(m, "4", 16, ""), '{{"number": "{}", "exp": "09/28"}}'),
        ("github_pat_in_url", "ghp_" + m.chars(36), "git clone https://{}@github.com/me/repo"),
        ("basic_auth_url", m.chars(16), "https://ana:{}@jenkins.acme.io/job/build"),
        ("gitlab_feed", "glft-" + m.chars(20, URLSAFE), "feed {}"),
        ("slack_refresh", f"xoxe-1-{m.chars(146, ALNUM)}", "refresh {}"),
        ("slack_workflow_webhook", m.chars(48, ALNUM),
         "https://hooks.slack.com/workflows/{}"),
        ("openai_service_account", "sk-svcacct-" + m.chars(100, URLSAFE), "key {}"),
        ("anthropic_admin", "sk-ant-admin01-" + m.chars(93, URLSAFE) + "AA", "admin {}"),
        ("pypi_test", "pypi-AgENdGVzdC5weXBpLm9yZw" + m.chars(70, URLSAFE), "test.pypi {}"),
        ("digitalocean_oauth", "doo_v1_" + m.hex(64), "do oauth {}"),
        ("digitalocean_refresh", "dor_v1_" + m.hex(64), "do refresh {}"),
        ("heroku_legacy_key", str(uuid.UUID(int=m.rng.getrandbits(128), version=4)),
         "heroku api key: {}"),
        ("mailgun_signing_key", f"{m.hex(32)}-{m.hex(8)}-{m.hex(8)}", "mailgun signing {}"),
        ("square_oauth_secret", "sq0csp-" + m.chars(43, URLSAFE), "square secret {}"),
        ("shopify_custom_app", "shpca_" + m.hex(32), "shopify custom {}"),
        ("stripe_live_restricted_long", "rk_live_" + m.chars(99), "stripe {}"),
        ("ec_private_key", ec_line, ec.replace(ec_line, "{}")),
        ("pkcs8_private_key", pkcs8_line, pkcs8.replace(pkcs8_line, "{}")),
        ("encrypted_private_key", encrypted_line, encrypted.replace(encrypted_line, "{}")),
        ("pgp_private_key", pgp_line, pgp.replace(pgp_line, "{}")),
        ("private_key_json_escaped", pkcs8_line,
         '{{"private_key": "' + pkcs8.replace("\n", "\\n").replace(pkcs8_line, "{}") + '"}}'),
    ]
    # Unlabelled AWS secret keys, in the places people paste them.
    for n, template in enumerate(["{}", "AWS_SK={}", "AKIA" + m.chars(16, UPPER_ALNUM) + ",{}",
                                  "keys = ['{}']", "secret\t{}\t2026-01-01",
                                  "here you go: {}.", "{} <- rotate this", "(key {})"]):
        formats.append((f"aws_secret_unlabelled_{n + 3}", m.chars(40, BASE64), template))
    return formats


PROSE = [
    # English
    ("en_my_password", "my password is {}", "hunter2"),
    ("en_plain_word", "My password is {}, don't tell anyone", "swordfish"),
    ("en_for_bank", "the password for my bank is {}", "Tr0ub4dor&3"),
    ("en_quoted", "my wifi password is '{}'", "correct horse battery staple"),
    ("en_the_wifi", "the wifi password is {}", "zebra-42"),
    ("en_your_now", "your password is now {}", "Qw3rty!x"),
    ("en_pin", "my PIN is {}", "4821"),
    ("en_contraction", "my password's {} by the way", "hunter22"),
    ("en_colon", "password is: {}", "p@ssw0rd"),
    ("en_new", "My new password is {}.", "BlueSky77"),
    ("en_was", "our old password was {}", "letmein2019"),
    ("en_passphrase", "the passphrase is {}", "Orange-Tiger-91"),
    # Spanish
    ("es_mi_contrasena", "mi contraseña es {}", "perro123"),
    ("es_plain_word", "Mi contraseña es {} y nadie lo sabe", "mariposa"),
    ("es_del_wifi", "la contraseña del wifi es {}", "Casa2024!"),
    ("es_quoted", "mi contraseña de gmail es '{}'", "luna llena"),
    ("es_clave", "mi clave es {}", "Zx9!kq"),
    ("es_pin", "mi pin es {}", "7391"),
    ("es_nueva", "mi contraseña nueva es {}", "Girasol88"),
    ("es_colon", "la contraseña es: {}", "S3gur1dad"),
    ("es_without_tilde", "Mi contrasena es {}", "gatito99"),
    ("es_clave_banco", "la clave del banco es {}", "4417-Xk"),
    # German
    ("de_colon", "Passwort: {}", "Sonnenblume7"),
    ("de_mein", "mein Passwort ist {}", "Kuckuck!42"),
    ("de_plain_word", "Mein Passwort ist {}, sag es niemandem", "schmetterling"),
    ("de_wlan_lautet", "das WLAN-Passwort lautet {}", "Brezel2024"),
    ("de_kennwort", "Kennwort: {}", "Zugspitze-88"),
    ("de_fuer", "das Passwort für die Bank ist {}", "Alpen#5"),
    # French
    ("fr_colon_space", "mot de passe : {}", "Soleil2024"),
    ("fr_mon", "mon mot de passe est {}", "grenouille"),
    ("fr_du_wifi", "le mot de passe du wifi est {}", "Baguette#9"),
    ("fr_mdp", "mdp: {}", "Chateau77"),
    ("fr_guillemets", "mon mot de passe est « {} »", "lune bleue"),
    # Passphrases of several words
    ("en_passphrase_words", "my passphrase is {}", "purple elephant juggles tangerines"),
    ("en_passphrase_colon", "Passphrase: {}", "velvet otter sings quietly"),
    ("en_seed_phrase", "my seed phrase is {}",
     "orbit claw tundra pepper vessel ginger acoustic harbor lemon zebra mosquito crane"),
    ("en_passphrase_classic", "my passphrase is {}", "correct horse battery staple"),
]


def secrets(seed: str = "hilo-corpus") -> list[Planted]:
    """Every planted secret: the token formats, then the prose."""
    m = Maker(seed)
    planted = [Planted(name, template.format(value), value)
               for name, value, template in token_formats(m)]
    planted += [Planted(name, template.format(value), value) for name, template, value in PROSE]
    return planted


def _wrapped_base64(m: Maker) -> str:
    # 57 bytes per 76-character line; 30 more bytes make a last line of exactly 40.
    encoded = base64.b64encode(bytes(m.rng.getrandbits(8) for _ in range(57 * 4 + 30))).decode()
    return "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))


def benign(seed: str = "hilo-benign") -> dict[str, str]:
    """Texts that must pass unchanged."""
    m = Maker(seed)
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(m.rng.getrandbits(8) for _ in range(600)))
    texts = {
        "uuid": f"session {uuid.UUID(int=m.rng.getrandbits(128), version=4)} started",
        "uuids_in_json": f'{{"id": "{uuid.UUID(int=m.rng.getrandbits(128), version=4)}", "parent": "{uuid.UUID(int=m.rng.getrandbits(128), version=4)}"}}',
        "git_sha": f"fixed in {m.hex(40)}",
        "git_sha_upper": f"commit {m.hex(40).upper()}",
        "git_log_line": f"{m.hex(40)} Merge branch 'main' into feature",
        "short_sha": f"see {m.hex(7)}",
        "sha256_digest": f"sha256:{m.hex(64)}",
        "docker_digest": f"python@sha256:{m.hex(64)}",
        "base64_png": f"![chart](data:image/png;base64,{png.decode()})",
        "base64_wrapped_block": _wrapped_base64(m),
        "short_base64": "aGVsbG8gd29ybGQ=",
        "hex_colour": "use #ff00aa for links",
        "css_colours": "color: #1E90FF; background: #FFF; border-color: #00ff7f80;",
        "password_reset": "password reset link sent",
        "forgot_password": "I forgot my password again",
        "contrasena_olvidada": "contraseña olvidada: pulsa el enlace",
        "olvidaste_tu_contrasena": "¿Olvidaste tu contraseña?",
        "password_wrong": "my password is wrong",
        "password_too_short": "my password is too short",
        "password_required": "the password is required",
        "password_length": "my password is 12 characters long",
        "password_stored": "Your password is stored securely.",
        "password_now_reset": "your password is now reset",
        "password_manager": "my password manager is 1Password",
        "password_same": "my password is the same as before",
        "contrasena_incorrecta": "mi contraseña es incorrecta",
        "contrasena_no_funciona": "mi contraseña no funciona",
        "contrasena_obligatoria": "la contraseña es obligatoria",
        "contrasena_importante": "la contraseña es importante",
        "contrasena_misma": "mi contraseña es la misma que la de gmail",
        "clave_paciencia": "la clave es la paciencia",
        "clave_del_exito": "la clave del éxito es la constancia",
        "clave_del_exito_verb": "la clave del éxito es trabajar",
        "pin_on_card": "The PIN is on the back of the card",
        "reset_url": "Reset your password at https://example.com/reset?user=ana",
        "passwordless": "passwordless login works",
        "llm_settings": "set max_tokens=512 and temperature=0.7",
        "primary_key": "primary_key: id",
        "foreign_key": "foreign_key=user_id",
        "token_glossary": "Token: a unit of text the model reads",
        "camel_case_identifier": "call getUserAccountSettingsForTenant2024Final now",
        "java_path": "src/main/java/com/example/service/UserServiceImplTest.java",
        "dotted_identifier": "MyApplicationConfiguration.module.someFunctionNameForTheTest",
        "timestamp": "2026-01-02T03:04:05.123456Z",
        "phone": "+34 612 345 678",
        "iban": "ES91 2100 0418 4502 0005 1332",
        "email": "ana.garcia@example.com",
        "scikit_learn": "pip install scikit-learn sk-learn",
        "sk_live_word": "set sk_live_mode to true",
        "hf_hub": "from huggingface_hub import hf_hub_download",
        "npm_config": "npm_config_cache=/tmp/npm npm_package_version=1.2.3",
        "singapore": "SG.Singapore office",
        "api_gateway": "API-GATEWAY-CONFIGURATION-V2",
        "key_value": "a key-value store, key-2f3a",
        "pattern_path": "pattern path patent",
        "twilio_account_sid": f"account AC{m.hex(32)}",
        "a3_paper": "print on A3-paper",
        "slack_channel": "post in C024BE91L",
        "lowercase_hex_token": f"etag {m.hex(40)}",
        "long_word_run": "Pneumonoultramicroscopicsilicovolcanoconiosis is a word",
        "version_string": "v1.0-beta release",
        "ssh_remote": "git clone git@github.com:me/repo.git",
        "url_with_query": "https://example.com/search?q=hello&page=2",
        "python_code": "def login(user: str, password: str) -> bool:\n    return check(password)",
        "masked": "password: ********",
        "env_reference": "password=$DB_PASSWORD",
        "bearer_of_news": "Bearer of bad news",
        "spanish_prose": "¡Qué día! ☀️ café con leche y una contraseña segura es importante",
        # Look-alikes of the formats of issue 30.
        "card_failing_luhn": f"order {_failing_luhn(m, '4', 16)} shipped",
        "card_failing_luhn_spaced": f"ref {_card_spaced(_failing_luhn(m, '5', 16))}",
        "epoch_millis": "created at 1735689600000",
        "isbn": "ISBN 978-0-306-40615-7",
        "phone_us": "call +1 415 555 0132",
        "tracking_number": f"tracking {m.digits(22)}",
        "dates_in_a_row": "2024 2025 2026 2027",
        "sentry_docs": "see https://docs.sentry.io/platforms/python/ for the DSN",
        "ssh_url": "ssh://git@github.com/me/repo.git",
        "url_user": "https://ana@example.com/profile",
        "azure_placeholder": "AccountName=acme;AccountKey=<your-account-key>;",
        "azure_sas_docs": "append a SAS token with sv=, sp= and sig= to the URL",
        "sticky_note": "password: the one on the sticky note",
        "password_colon_same": "password: same as the wifi",
        "passwort_falsch": "das Passwort ist falsch",
        "passwort_vergessen": "Passwort vergessen? Hier klicken.",
        "passwort_zettel": "Passwort: steht auf dem Zettel",
        "mein_passwort_zu_kurz": "mein Passwort ist zu kurz",
        "mot_de_passe_oublie": "mot de passe oublié ?",
        "mot_de_passe_incorrect": "mon mot de passe est incorrect",
        "mot_de_passe_obligatoire": "le mot de passe est obligatoire",
        "mot_de_passe_colon_voir": "mot de passe : voir le gestionnaire",
        "passphrase_too_long": "my passphrase is too long",
        "passphrase_hint": "my passphrase is the name of my first dog",
        "seed_phrase_advice": "your seed phrase is never asked for by support",
        "passphrase_length": "a good passphrase is several words long",
        "password_elided": "my password is … and so on",
        "password_masked": "your password is ****",
        "identifier_40": "call loadUserPreferencesFromCache2024Backup now",
        "path_40": "open docs/Guides/Setup/Install/Windows10/Tips",
        "git_sha_in_url": f"https://github.com/me/repo/commit/{m.hex(40)}",
        "uuid_upper": f"id {str(uuid.UUID(int=m.rng.getrandbits(128), version=4)).upper()}",
    }
    return texts


def _failing_luhn(m: Maker, prefix: str, length: int) -> str:
    """A number shaped like a card whose last digit fails the Luhn check."""
    body = prefix + m.digits(length - len(prefix) - 1)
    return body + str((luhn_check_digit(body) + 1) % 10)


def _card_spaced(number: str) -> str:
    return " ".join(number[i:i + 4] for i in range(0, len(number), 4))
