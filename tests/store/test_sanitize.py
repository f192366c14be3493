"""Secrets are redacted before storage; ordinary text passes through untouched."""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.sanitize import Redacted, Secret, find_secrets, redact_json, redact_secrets

_ALNUM = string.ascii_letters + string.digits
_UPPER_ALNUM = string.ascii_uppercase + string.digits
_URLSAFE = _ALNUM + "-_"
_BASE64 = _ALNUM + "+/"


def fake(prefix: str, length: int, alphabet: str = _ALNUM, seed: int = 0) -> str:
    """A made-up credential of a real shape; built at run time so scanners stay quiet."""
    rng = random.Random(f"{prefix}{length}{seed}")
    return prefix + "".join(rng.choice(alphabet) for _ in range(length))


def pem(label: str, lines: int = 4, seed: int = 0) -> tuple[str, str]:
    """(a PEM private key block, one of its body lines)."""
    body = [fake("", 64, _BASE64, seed + n) for n in range(lines)]
    block = f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----"
    return block, body[1]


@dataclass(frozen=True)
class SecretCase:
    name: str
    text: str
    secret: str  # must not survive redaction
    kinds: tuple[str, ...]
    keep: str = ""  # must survive redaction (a key name, "Bearer", a URL's user)


_RSA, _RSA_LINE = pem("RSA PRIVATE KEY")
_EC, _EC_LINE = pem("EC PRIVATE KEY", seed=1)
_OPENSSH, _OPENSSH_LINE = pem("OPENSSH PRIVATE KEY", seed=2)
_PKCS8, _PKCS8_LINE = pem("PRIVATE KEY", seed=3)
_PGP, _PGP_LINE = pem("PGP PRIVATE KEY BLOCK", seed=4)
_AKIA = fake("AKIA", 16, _UPPER_ALNUM)
_ASIA = fake("ASIA", 16, _UPPER_ALNUM)
_AWS_SECRET = fake("", 40, _BASE64)
_GHP = fake("ghp_", 36)
_GHO = fake("gho_", 36)
_GHS = fake("ghs_", 36)
_GITHUB_PAT = fake("github_pat_", 22) + "_" + fake("", 59)
_GLPAT = fake("glpat-", 20, _URLSAFE)
_GLPAT_2 = fake("glpat-", 26, _URLSAFE, seed=1)
_SK = fake("sk-", 48)
_SK_PROJ = fake("sk-proj-", 120, _URLSAFE)
_SK_ANT = fake("sk-ant-api03-", 93, _URLSAFE)
_SLACK = "-".join(["xoxb", fake("", 12, string.digits), fake("", 13, string.digits), fake("", 24)])
_GOOGLE = fake("AIza", 35, _URLSAFE)
_OPAQUE = fake("", 40, _URLSAFE)
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    + fake("eyJzdWIiOiIx", 40, _URLSAFE)
    + "."
    + fake("", 43, _URLSAFE)
)
_JWT_2 = ".".join(
    ["eyJhbGciOiJSUzI1NiJ9", fake("eyJpc3MiOi", 60, _URLSAFE, seed=1), fake("", 86, _URLSAFE)]
)
_JWT_UNSIGNED = "eyJhbGciOiJub25lIn0." + fake("eyJ1c2VyIjoi", 30, _URLSAFE) + "."

SECRET_CASES = [
    # private_key
    SecretCase(
        "rsa_private_key",
        f"here is my key:\n{_RSA}\nthanks",
        _RSA_LINE,
        ("private_key",),
        "thanks",
    ),
    SecretCase("ec_private_key", _EC, _EC_LINE, ("private_key",)),
    SecretCase(
        "openssh_private_key",
        f"cat ~/.ssh/id_ed25519\n{_OPENSSH}",
        _OPENSSH_LINE,
        ("private_key",),
    ),
    SecretCase("pkcs8_private_key", f"key = '''{_PKCS8}'''", _PKCS8_LINE, ("private_key",)),
    SecretCase("pgp_private_key_block", _PGP, _PGP_LINE, ("private_key",)),
    SecretCase(
        "private_key_pasted_without_end_line",
        _RSA.split("-----END")[0],
        _RSA_LINE,
        ("private_key",),
    ),
    SecretCase(
        "private_key_in_json",
        json.dumps({"key": _EC}),
        _EC_LINE,
        ("private_key",),
        '{"key": "',
    ),
    SecretCase(
        "private_key_cut_short_in_json",
        json.dumps({"key": _OPENSSH[:200]}),
        _OPENSSH_LINE[:40],
        ("private_key",),
    ),
    SecretCase(
        "private_key_cut_short_with_crlf",
        _PKCS8.replace("\n", "\r\n")[:180],
        _PKCS8_LINE[:40],
        ("private_key",),
    ),
    # aws_access_key
    SecretCase(
        "aws_access_key_id",
        f"my key id is {_AKIA}",
        _AKIA,
        ("aws_access_key",),
        "my key id is",
    ),
    SecretCase("aws_session_key_id", f"AWS_ACCESS_KEY_ID={_ASIA}", _ASIA, ("aws_access_key",)),
    SecretCase(
        "aws_secret_in_credentials_file",
        f"[default]\naws_access_key_id = {_AKIA}\naws_secret_access_key = {_AWS_SECRET}",
        _AWS_SECRET,
        ("aws_access_key", "aws_access_key"),
        "aws_secret_access_key = ",
    ),
    SecretCase(
        "aws_secret_in_json",
        f'{{"SecretAccessKey": "{_AWS_SECRET}"}}',
        _AWS_SECRET,
        ("aws_access_key",),
        '"SecretAccessKey"',
    ),
    # github_token
    SecretCase("github_classic_pat", f"use {_GHP} for the API", _GHP, ("github_token",)),
    SecretCase(
        "github_oauth_token",
        f"GITHUB_TOKEN={_GHO}",
        _GHO,
        ("github_token",),
        "GITHUB_TOKEN=",
    ),
    SecretCase("github_app_token", f"token: {_GHS}", _GHS, ("github_token",), "token: "),
    SecretCase(
        "github_fine_grained_pat",
        f"pat {_GITHUB_PAT} expires soon",
        _GITHUB_PAT,
        ("github_token",),
    ),
    # gitlab_token
    SecretCase("gitlab_pat", f"my gitlab token is {_GLPAT}", _GLPAT, ("gitlab_token",)),
    SecretCase("gitlab_pat_in_header", f"PRIVATE-TOKEN: {_GLPAT_2}", _GLPAT_2, ("gitlab_token",)),
    SecretCase(
        "gitlab_pat_in_url",
        f"git clone https://oauth2:{_GLPAT}@gitlab.com/me/repo.git",
        _GLPAT,
        ("gitlab_token",),
    ),
    # api_key
    SecretCase("openai_legacy_key", f"OPENAI_API_KEY={_SK}", _SK, ("api_key",), "OPENAI_API_KEY="),
    SecretCase("openai_project_key", f"my key is {_SK_PROJ}.", _SK_PROJ, ("api_key",)),
    SecretCase("anthropic_key", f'client = Anthropic(api_key="{_SK_ANT}")', _SK_ANT, ("api_key",)),
    SecretCase("slack_bot_token", f"slack: {_SLACK}", _SLACK, ("api_key",)),
    SecretCase(
        "google_api_key",
        f"https://maps.googleapis.com/maps/api/js?key={_GOOGLE}",
        _GOOGLE,
        ("api_key",),
    ),
    SecretCase(
        "api_key_assignment",
        "api_key=abc123def456",
        "abc123def456",
        ("api_key",),
        "api_key=",
    ),
    # bearer_token
    SecretCase(
        "authorization_header",
        f"Authorization: Bearer {_OPAQUE}",
        _OPAQUE,
        ("bearer_token",),
        "Authorization: Bearer ",
    ),
    SecretCase(
        "curl_header",
        f"curl -H 'Authorization: Bearer {_OPAQUE}' https://api.example.com",
        _OPAQUE,
        ("bearer_token",),
        "Bearer",
    ),
    SecretCase(
        "bearer_in_prose",
        f"send it with Bearer {_OPAQUE} please",
        _OPAQUE,
        ("bearer_token",),
        "Bearer ",
    ),
    SecretCase(
        "basic_auth_header",
        "Authorization: Basic dXNlcjpodW50ZXIy",
        "dXNlcjpodW50ZXIy",
        ("bearer_token",),
    ),
    # jwt
    SecretCase("jwt_alone", f"my session is {_JWT}", _JWT, ("jwt",)),
    SecretCase(
        "jwt_as_bearer",
        f"Authorization: Bearer {_JWT_2}",
        _JWT_2,
        ("jwt",),
        "Authorization: Bearer ",
    ),
    SecretCase("jwt_unsigned", f"id_token {_JWT_UNSIGNED}", _JWT_UNSIGNED, ("jwt",)),
    # password
    SecretCase("password_equals", "password=hunter2", "hunter2", ("password",), "password="),
    SecretCase(
        "password_colon",
        "Password: Tr0ub4dor&3",
        "Tr0ub4dor&3",
        ("password",),
        "Password: ",
    ),
    SecretCase(
        "password_json",
        '{"user": "ana", "password": "c0rrect horse"}',
        "c0rrect horse",
        ("password",),
        '"password": "',
    ),
    SecretCase(
        "db_password_env",
        "DB_PASSWORD='s3cr3t!'",
        "s3cr3t!",
        ("password",),
        "DB_PASSWORD=",
    ),
    SecretCase("passwd_flag", "mysql --passwd=qwerty123 -u root", "qwerty123", ("password",)),
    SecretCase("pwd_yaml", "pwd: 'p4ss w0rd'", "p4ss w0rd", ("password",)),
    SecretCase(
        "spanish_password_colon",
        "mi contraseña: hunter2",
        "hunter2",
        ("password",),
        "contraseña: ",
    ),
    SecretCase(
        "spanish_password_equals",
        "contraseña=hunter2",
        "hunter2",
        ("password",),
        "contraseña=",
    ),
    # token
    SecretCase(
        "access_token",
        "access_token=ya29.a0AfH6SMBx3k",
        "ya29.a0AfH6SMBx3k",
        ("token",),
        "access_token=",
    ),
    SecretCase(
        "refresh_token_json",
        '{"refresh_token": "1//0gRt-x9YzQ"}',
        "1//0gRt-x9YzQ",
        ("token",),
    ),
    SecretCase(
        "auth_token_camel_case",
        "authToken: a8f3kd92lx",
        "a8f3kd92lx",
        ("token",),
        "authToken: ",
    ),
    # secret
    SecretCase(
        "client_secret",
        "client_secret=GOCSPX-4fK2pQ",
        "GOCSPX-4fK2pQ",
        ("secret",),
        "client_secret=",
    ),
    SecretCase(
        "django_secret_key",
        "SECRET_KEY = 'django-insecure-9x@k'",
        "django-insecure-9x@k",
        ("secret",),
    ),
    SecretCase("secret_php_array", "'secret' => 'shh-42'", "shh-42", ("secret",)),
    # connection_string
    SecretCase(
        "postgres_url",
        "postgres://app:pg_pass_91@db.internal:5432/prod",
        "pg_pass_91",
        ("connection_string",),
        "postgres://app:",
    ),
    SecretCase(
        "mysql_url",
        "mysql://root:toor@localhost/app",
        "toor",
        ("connection_string",),
        "@localhost/app",
    ),
    SecretCase(
        "mongodb_srv_url",
        "mongodb+srv://admin:Mng0Pa55@cluster0.ab1cd.mongodb.net/test",
        "Mng0Pa55",
        ("connection_string",),
        "mongodb+srv://admin:",
    ),
    SecretCase(
        "redis_url_without_user",
        "REDIS_URL=redis://:r3d1s@cache:6379/0",
        "r3d1s",
        ("connection_string",),
    ),
    SecretCase("amqp_url", "amqp://guest:rabbit99@mq:5672/", "rabbit99", ("connection_string",)),
    SecretCase(
        "password_with_at_sign",
        "postgres://u:p@ss@host/db",
        "p@ss",
        ("connection_string",),
        "@host/db",
    ),
]


@pytest.mark.parametrize("case", SECRET_CASES, ids=lambda case: case.name)
def test_secret_is_replaced_by_its_marker(case: SecretCase) -> None:
    redacted = redact_secrets(case.text)

    assert case.secret not in redacted.text
    assert redacted.kinds == case.kinds
    for kind in case.kinds:
        assert f"[REDACTED:{kind}]" in redacted.text
    assert case.keep in redacted.text


@pytest.mark.parametrize("case", SECRET_CASES, ids=lambda case: case.name)
def test_redacting_twice_changes_nothing(case: SecretCase) -> None:
    once = redact_secrets(case.text).text

    assert redact_secrets(once) == Redacted(text=once, kinds=())


# Pieces of secrets and of their syntax, so random text hits the patterns' edges.
SECRET_FRAGMENTS = st.sampled_from(
    ["password", "token", "secret", "api_key", "contraseña", "_pass", ":", "=", "=>", '"', "'",
     " ", "\n", "\\", "-", ".", "/", "@", "Bearer ", "Authorization: ", "postgres://", "sk-",
     "ghp_", "xoxb-", "AKIA", "eyJ", "A" * 36, "aB3" * 8, "Q" * 16, "1234567890",
     "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "[REDACTED:password]"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(SECRET_FRAGMENTS, st.text(max_size=5)), max_size=25).map("".join))
def test_redacting_any_text_twice_changes_nothing(text: str) -> None:
    once = redact_secrets(text).text

    assert redact_secrets(once) == Redacted(text=once, kinds=())


BENIGN = {
    "sk_ate": "sk-ate",
    "skate_in_sentence": "I love to sk-ate on weekends",
    "token_of_appreciation": "the token of appreciation",
    "password_manager": "a password manager is useful",
    "password_reset": "password reset link sent",
    "secret_without_assignment": "my secret is that I love jazz",
    "bearer_of_bad_news": "Bearer of bad news",
    "bearer_bonds": "Bearer bonds were popular in the 1920s.",
    "plain_url": "https://example.com/path",
    "url_with_port": "see http://localhost:8080/docs?page=2#intro",
    "database_url_without_password": "postgres://localhost/db",
    "database_url_with_user_only": "postgres://app@db.internal:5432/prod",
    "email_address": "user@example.com",
    "ssh_remote": "git clone git@github.com:me/repo.git",
    "git_commit_hash": "fixed in 3f786850e387550fdab836ed7e6dc881de23001b",
    "short_commit_hash": "see commit a94a8fe",
    "uuid": "session 123e4567-e89b-12d3-a456-426614174000 started",
    "base64_of_short_string": "aGVsbG8gd29ybGQ=",
    "spanish_password_word": "la contraseña es importante",
    "spanish_token_word": "el token de acceso caduca",
    "llm_settings": "set max_tokens=512 and temperature=0.7",
    "token_glossary": "Token: a unit of text the model reads",
    "type_hint": "def login(user: str, password: str) -> bool:",
    "masked_password": "password: ********",
    "env_reference": "password=$DB_PASSWORD",
    "passwordless_flag": "passwordless: true",
    "etc_passwd_error": "cat: /etc/passwd: Permission denied",
    "pem_format_explained": (
        "Keys start with -----BEGIN RSA PRIVATE KEY----- and end with -----END RSA PRIVATE KEY-----"
    ),
    "time_of_day": "meet at 10:30, room 4",
    "skiing": "ask-me-anything about sk-i trips",
    "python_comparison": "if password == confirm:",
    "code_computing_a_token": "token = tokenizer.encode(text)",
    "code_reading_a_password": "password = getpass.getpass()",
    "emoji_and_accents": "¡Qué día! ☀️ café con leche",
}


@pytest.mark.parametrize("text", BENIGN.values(), ids=BENIGN.keys())
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact_secrets(text) == Redacted(text=text, kinds=())


def test_kinds_are_listed_in_text_order() -> None:
    text = f"password=hunter2 then {_GHP} then postgres://u:pw1@h/db then password=again"

    kinds = redact_secrets(text).kinds

    assert kinds == ("password", "github_token", "connection_string", "password")


def test_value_claimed_by_a_specific_rule_is_not_redacted_again() -> None:
    redacted = redact_secrets(f"token={_GHP}")

    assert redacted == Redacted(text="token=[REDACTED:github_token]", kinds=("github_token",))


def test_connection_string_keeps_user_and_host() -> None:
    redacted = redact_secrets("postgres://user:pass@host/db")

    assert redacted.text == "postgres://user:[REDACTED:connection_string]@host/db"


def test_assignment_keeps_key_name() -> None:
    assert redact_secrets("password=hunter2").text == "password=[REDACTED:password]"


def test_whole_private_key_block_becomes_one_marker() -> None:
    redacted = redact_secrets(f"before\n{_RSA}\nafter")

    assert redacted.text == "before\n[REDACTED:private_key]\nafter"


ADVERSARIAL = {
    "sk_dashes": "sk-" * 300_000,
    "assignments": "a=" * 500_000,
    "begin_headers": "-----BEGIN " * 90_000,
    "private_key_headers": "-----BEGIN PRIVATE KEY-----" * 38_000,
    "password_keys": "password: " * 100_000,
    "json_quotes": '"password": "' * 80_000,
    "url_schemes": "a://b:" * 160_000,
    "at_signs": "x://:" + "@" * 1_000_000,
    "backslashes": 'password="' + "\\" * 1_000_000,
    "open_calls": "token=f(x " * 100_000,
    "bearer_words": "Bearer " * 140_000,
    "word_run": "a" * 1_000_000,
}


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_megabyte_adversarial_input_completes(text: str) -> None:
    # Backtracking blow-ups would take hours here; linear patterns take well under 1 s.
    redacted = redact_secrets(text)

    assert isinstance(redacted.text, str)


DYNATRACE = "dt0c01." + "BM506B82369LKONCRVJL2XKH" + "." + "53CW3AW62GAOE5R0SOKJD4H3H9AU" * 2 + "Q" * 8


def test_find_secrets_names_each_secret_once_in_text_order() -> None:
    text = f"token {DYNATRACE} and ghp_{'a1B2' * 9} then {DYNATRACE} again"
    found = find_secrets(text)
    assert [s.kind for s in found] == ["dynatrace_token", "github_token"]
    assert found[0].value == DYNATRACE


def test_a_piece_of_a_known_secret_is_redacted_as_its_kind() -> None:
    """A model repeating the start of a token it was shown: no rule knows the piece."""
    (secret,) = find_secrets(f"my token is {DYNATRACE}")
    reply = f"ok: {DYNATRACE[:44]}"
    assert redact_secrets(reply).text == reply  # the shape alone does not catch it
    echoed = redact_secrets(reply, echoes_of=(secret,))
    assert echoed.text == "ok: [REDACTED:dynatrace_token]"
    assert echoed.kinds == ("dynatrace_token",)


def test_echoes_spare_text_sharing_fewer_characters_with_the_secret() -> None:
    secret = Secret("dynatrace_token", DYNATRACE)
    text = f"dt0c01 is a prefix; {DYNATRACE[7:16]} is nine characters of it"
    assert redact_secrets(text, echoes_of=(secret,)).text == text


def test_several_echoes_of_several_secrets_are_each_redacted() -> None:
    github = "ghp_" + "a1B2" * 9
    secrets = find_secrets(f"{DYNATRACE} {github}")
    text = f"a {github[5:30]} b {DYNATRACE[10:40]} c"
    assert redact_secrets(text, echoes_of=secrets).text == \
        "a [REDACTED:github_token] b [REDACTED:dynatrace_token] c"


def test_every_rule_pattern_compiles_though_each_waits_for_its_first_use() -> None:
    """Rules compile their patterns when they first run (for start-up time): a broken
    one would otherwise surface only on the first message holding its keyword."""
    from app.secret_rules import RULES

    for rule in RULES:
        assert rule.pattern.compiled.pattern == rule.pattern.source


def test_a_token_holding_another_is_redacted_whole():
    # The GitHub rule claims the token's tail first; the API-key rule's longer match
    # widens that claim instead of leaving its head in clear for the next pass to find.
    text = "key: sk-passwordpasswordxoxb-ghp_" + "A" * 36 + " ok"
    once = redact_secrets(text)
    assert once.text == "key: [REDACTED:github_token] ok"
    assert redact_secrets(once.text).text == once.text


# -- JSON values: a chat request, a tool call's arguments ----------------------------------------


def test_a_json_value_keeps_its_shape_and_loses_its_secrets():
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    value = {"command": f"curl -H 'Authorization: Bearer {token}' x", "password": "Plum-4417",
             "max_tokens": "512", "count": 3, "items": [{"token": "tok-77"}], token: True}
    assert redact_json(value) == {
        "command": "curl -H 'Authorization: Bearer [REDACTED:github_token]' x",
        "password": "[REDACTED:password]", "max_tokens": "512", "count": 3,
        "items": [{"token": "[REDACTED:token]"}], "[REDACTED:github_token]": True}


def test_json_text_inside_a_string_is_redacted_and_left_alone_without_secrets():
    arguments = '{"user":  "ana", "password": "Plum-4417"}'
    assert json.loads(redact_json({"arguments": arguments})["arguments"]) == {
        "user": "ana", "password": "[REDACTED:password]"}
    clean = '{"user":  "ana"}'  # its spacing kept: a cached prompt stays the same
    assert redact_json({"arguments": clean})["arguments"] is clean


# -- Formats of issue 30 ---------------------------------------------------------------------


def test_a_card_number_is_redacted_only_when_its_check_digit_is_right() -> None:
    card = "4539 1488 0343 6467"  # a Visa test number: passes the Luhn check
    wrong_digit = "4539 1488 0343 6468"

    assert redact_secrets(f"my card is {card} exp 12/29").text == \
        "my card is [REDACTED:card_number] exp 12/29"
    assert redact_secrets(f"order {wrong_digit} shipped").text == f"order {wrong_digit} shipped"


def test_a_passphrase_of_several_words_is_redacted_to_the_end_of_its_clause() -> None:
    text = "my passphrase is purple elephant juggles tangerines and my pin is 4821"

    assert redact_secrets(text).text == \
        "my passphrase is [REDACTED:password] and my pin is [REDACTED:password]"


def test_unlabelled_aws_secret_keys_are_redacted_whatever_their_letters() -> None:
    # Random keys now and then hold runs of letters or no digit, as identifiers do.
    keys = [fake("", 40, _BASE64, seed=n) for n in range(20_000)]
    missed = [key for key in keys if key in redact_secrets(f"here: {key} thanks").text]
    assert len(missed) <= 2, missed[:10]
