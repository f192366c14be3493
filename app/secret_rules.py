"""The rules that recognise secrets: what `app.sanitize` redacts, one rule per kind.

Each kind of secret is one rule: a compiled pattern, the group holding the secret and a
check that tells a real credential from prose. `RULES` runs in priority order over the
original text (private keys, then specific token shapes, credentials in URLs, card
numbers, passphrases, then generic `name=value` assignments, then passwords told in
prose, then unlabelled AWS secret keys); a later rule never touches a span an earlier
one already claimed, so a value is redacted once, under its most specific kind.

The token shapes are those of the gitleaks and detect-secrets rule sets for services
whose credentials carry a recognisable prefix. A rule with keywords runs only when one
of them occurs in the text (case-insensitively), as gitleaks does, so seventy shapes
cost little more than one.

Every pattern runs in linear time on any input (possessive quantifiers, bounded
repeats, lookbehinds that start a match only at a word's first character), because
this runs on every stored message, including pasted megabyte logs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

__all__ = ["Finding", "PLACEHOLDER_VALUES", "PLACEHOLDER_SHAPE", "RULES", "rules_for"]


class Finding(NamedTuple):  # a tuple: megabyte logs can hold 100k of them
    start: int
    end: int
    kind: str | None  # None: a marker already in the text, kept as it is


class _Pattern:
    """A rule's regular expression, compiled when it first runs: compiling all ninety
    takes ~10 ms, which the start-up of a process that stores nothing need not pay."""

    def __init__(self, source: str, flags: int = 0) -> None:
        self.source = source
        self.flags = flags

    @cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)


@dataclass(frozen=True)
class _Rule:
    """One pattern; `classify(match, secret)` names the kind, or None to let it pass.

    With keywords (lower case), the pattern runs only on text that contains one."""

    pattern: _Pattern
    classify: Callable[[re.Match[str], str], str | None]
    keywords: tuple[str, ...] = ()

    def find(self, text: str) -> Iterator[Finding]:
        pattern = self.pattern.compiled
        # Groups named secret* hold the value; the rest of a match (a key name,
        # "Bearer", a URL's user and host) stays readable.
        secret_groups = [name for name in pattern.groupindex if name.startswith("secret")]
        for match in pattern.finditer(text):
            start, end = _secret_span(match, secret_groups)
            kind = self.classify(match, text[start:end])
            if kind is not None:
                yield Finding(start, end, kind)


def _secret_span(match: re.Match[str], secret_groups: list[str]) -> tuple[int, int]:
    for name in secret_groups:
        if match.start(name) != -1:
            return match.span(name)
    return match.span()


def _always(kind: str) -> Callable[[re.Match[str], str], str]:
    return lambda match, secret: kind


_PRIVATE_KEY = _Pattern(
    r"""
    -----BEGIN[ ](?P<label>[A-Z0-9 ]{0,40}?)PRIVATE[ ]KEY(?P<block>(?:[ ]BLOCK)?)-----
    (?:
        # Stops at the next BEGIN/END line, so a stray header never scans to the end.
        (?P<body>(?:[^-]++|-(?!----(?:BEGIN|END)[ ]))*+)
        -----END[ ](?P=label)PRIVATE[ ]KEY(?P=block)-----
      | # Cut before its END line: take the base64 lines that follow (newlines may be
        # JSON-escaped, as in tool-call arguments).
        (?P<truncated>(?:(?:\r?\n|\\r\\n|\\n|\s)[A-Za-z0-9+/=]++)*+)
    )
    """,
    re.VERBOSE,
)
# Real key material is long base64; this keeps "keys start with -----BEGIN ..." prose.
_KEY_MATERIAL = re.compile(r"[A-Za-z0-9+/]{32}")


def _classify_private_key(match: re.Match[str], secret: str) -> str | None:
    body = match.group("body") if match.group("body") is not None else match.group("truncated")
    return "private_key" if _KEY_MATERIAL.search(body) else None


_AWS_ACCESS_KEY_ID = _Pattern(
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])"
)
_AWS_SECRET_ACCESS_KEY = _Pattern(
    r"(?i:(?:aws[_-]?)?secret[_-]?access[_-]?key)[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?"
    r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
_GITHUB_TOKEN = _Pattern(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_[A-Za-z0-9_]{22,}+)"
)
_GITLAB_TOKEN = _Pattern(
    r"(?<![A-Za-z0-9_-])"
    r"(?:gl(?:pat|dt|rt|ptt|ft|soat|ffct|oas|agent|imt|cbt)-[A-Za-z0-9_-]{20,}+|GR1348941[\w-]{20})"
)
_API_KEY = _Pattern(
    r"""(?<![A-Za-z0-9_-])
    (?: sk-[A-Za-z0-9_-]{20,}+             # OpenAI sk-/sk-proj-, Anthropic sk-ant-
      | xox[abeoprs]-[A-Za-z0-9-]{10,}+    # Slack
      | xapp-\d-[A-Za-z0-9-]{10,}+         # Slack app-level
      | AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])  # Google
    )""",
    re.VERBOSE,
)
_JWT = _Pattern(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"
)
_AUTHORIZATION_HEADER = _Pattern(
    r"(?i:\bauthorization)[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?(?i:bearer|basic|token|bot)[ \t]+"
    r"(?P<secret>[^\s\"',;]++)"
)
_BEARER_IN_TEXT = _Pattern(
    r"(?i:\bbearer)[ \t]+(?P<secret>[A-Za-z0-9._~+/-]{8,}+=*+)"
)


def _classify_bearer_in_text(match: re.Match[str], secret: str) -> str | None:
    return "bearer_token" if _looks_random(secret) else None


def _looks_random(token: str) -> bool:
    # Prose words ("Bearer responsibility") are plain letters; real tokens carry
    # digits, symbols or several capitals.
    if any(c.isdigit() or c in "-._~+/=" for c in token):
        return True
    upper = sum(c.isupper() for c in token)
    return upper >= 2 and len(token) - upper >= 2 and len(token) >= 20


# Credentials in a URL: a password after its user, or a token as its user with no
# password (a Sentry DSN's key, a token in a git remote).
_URL_CREDENTIALS = _Pattern(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}+://"
    # Greedy up to the last "@" before the host, so "p@ss" stays whole.
    r"(?:[^\s:/@]*+:(?P<secret>[^\s/?#]+)|(?P<secret_user>[A-Za-z0-9_-]{16,200}+))@"
)


def _classify_url_credentials(match: re.Match[str], secret: str) -> str | None:
    if match.start("secret") != -1:
        return "connection_string"
    return "url_token" if _looks_like_key_material(secret) else None


# A payment card's number: 13 to 19 digits, bare or grouped as printed (4-4-4-4, Amex's
# 4-6-5) and not part of a longer run of groups (an IBAN); it must also start as an
# issuer's numbers do and pass the Luhn check, so order numbers and timestamps pass.
_CARD_NUMBER = _Pattern(
    # Starts with the first digit, not a lookbehind, so the search skips to digits fast.
    r"\d(?<![\w.+-]\d)(?<!\d[ -]\d)"
    r"(?:\d{12,18}+|\d{3}(?P<sep>[ -])(?:\d{4}(?P=sep)\d{4}(?P=sep)\d{4}(?:(?P=sep)\d{1,3})?"
    r"|\d{6}(?P=sep)\d{4,5})(?!(?P=sep)\d))"
    r"(?![\w-]|[.,]\d)"
)
# (first digits from, to, lengths): Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay.
_CARD_ISSUERS = (
    ("4", "4", (13, 16, 19)), ("51", "55", (16,)), ("2221", "2720", (16,)),
    ("34", "34", (15,)), ("37", "37", (15,)), ("6011", "6011", range(16, 20)),
    ("644", "649", range(16, 20)), ("65", "65", range(16, 20)), ("300", "305", range(14, 20)),
    ("36", "36", range(14, 20)), ("38", "39", range(14, 20)), ("3528", "3589", range(16, 20)),
    ("62", "62", range(16, 20)),
)


def _classify_card_number(match: re.Match[str], secret: str) -> str | None:
    digits = secret.replace(" ", "").replace("-", "")
    issued = any(low <= digits[:len(low)] <= high and len(digits) in lengths
                 for low, high, lengths in _CARD_ISSUERS)
    return "card_number" if issued and _passes_luhn(digits) else None


def _passes_luhn(digits: str) -> bool:
    total = 0
    for n, digit in enumerate(reversed(digits)):
        value = int(digit) * (2 if n % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


_TOKEN_START = r"(?<![A-Za-z0-9_])"
_TOKEN_END = r"(?![A-Za-z0-9_])"


def _shape(kind: str, pattern: str, *keywords: str) -> _Rule:
    """A credential recognised by its own shape (a service's prefix, a fixed length)."""
    return _Rule(_Pattern(f"{_TOKEN_START}(?:{pattern}){_TOKEN_END}"), _always(kind), keywords)


# From the gitleaks and detect-secrets rule sets: shapes specific enough to stand alone.
_TOKEN_SHAPES: tuple[_Rule, ...] = (
    _shape("onepassword_key", r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})"
           r"-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}", "a3-"),
    _shape("onepassword_token", r"ops_eyJ[A-Za-z0-9+/]{250,}+={0,3}", "ops_eyj"),
    _shape("adobe_secret", r"p8e-[A-Za-z0-9]{32}", "p8e-"),
    _shape("age_secret_key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
           "age-secret-key-1"),
    _shape("airtable_token", r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}", "pat"),
    _shape("alibaba_key", r"LTAI[A-Za-z0-9]{20}", "ltai"),
    _shape("artifactory_key", r"AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59}", "akcp", "cmvmd"),
    _shape("aws_bedrock_key", r"ABSK[A-Za-z0-9+/]{109,269}+={0,2}", "absk"),
    _Rule(_Pattern(r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"
                     r"(?![A-Za-z0-9_~.-])"), _always("azure_secret"), ("q~",)),
    # Storage and Cosmos DB keys (`AccountKey=`, `--account-key`), Service Bus and Event
    # Hubs keys (`SharedAccessKey=`), in a connection string, JSON or a command line.
    _Rule(_Pattern(r"(?i:(?:Account|SharedAccess)Key[\"']?[ \t]{0,8}[=:]|--account-key[ \t=])"
                   r"[ \t]{0,8}[\"']?(?P<secret>[A-Za-z0-9+/]{20,}+={0,2})"),
          _always("azure_storage_key"), ("accountkey", "account-key", "sharedaccesskey")),
    # A shared access signature's signature, URL-encoded base64, in a query string.
    _Rule(_Pattern(r"[?&]sig=(?P<secret>(?:[A-Za-z0-9+/]|%2[BbFf]){20,}+(?:=|%3[Dd]){0,2})"),
          _always("azure_sas_token"), ("sig=",)),
    _shape("atlassian_token", r"ATATT3[A-Za-z0-9_=-]{150,}+", "atatt3"),
    _shape("clickhouse_key", r"4b1d[A-Za-z0-9]{38}", "4b1d"),
    _shape("clojars_token", r"CLOJARS_[A-Za-z0-9]{60}", "clojars_"),
    _shape("cloudflare_key", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}", "v1.0-"),
    _shape("databricks_token", r"dapi[a-f0-9]{32}(?:-\d)?", "dapi"),
    _shape("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", "_v1_"),
    _shape("discord_token", r"[MNO][A-Za-z0-9]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"),
    _Rule(_Pattern(r"discord(?:app)?\.com/api/webhooks/(?P<secret>\d{17,20}/[A-Za-z0-9_-]{60,68})"),
          _always("discord_webhook"), ("/api/webhooks/",)),
    _shape("doppler_token", r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44}", "dp."),
    _shape("dropbox_token", r"sl\.[A-Za-z0-9_=-]{130,}+", "sl."),
    _shape("duffel_token", r"duffel_(?:test|live)_[A-Za-z0-9_=-]{43}", "duffel_"),
    _shape("dynatrace_token", r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}", "dt0c01."),
    _shape("easypost_key", r"EZ[AT]K[A-Za-z0-9]{54}", "ezak", "eztk"),
    _shape("facebook_token", r"EAA[MC][A-Za-z0-9]{100,}+", "eaam", "eaac"),
    _shape("figma_token", r"figd_[A-Za-z0-9_-]{40,}+", "figd_"),
    _shape("flutterwave_key", r"FLWSECK(?:_TEST)?-[a-hA-H0-9]{12,32}(?:-X)?", "flwseck"),
    _shape("flyio_token", r"fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{100,}+={0,3}",
           "fo1_", "fm1", "fm2"),
    _shape("frameio_token", r"fio-u-[A-Za-z0-9_=-]{64}", "fio-u-"),
    _shape("google_oauth_secret", r"GOCSPX-[A-Za-z0-9_-]{28}", "gocspx-"),
    _shape("google_oauth_token", r"ya29\.[A-Za-z0-9_-]{20,}+", "ya29."),
    _shape("grafana_token", r"glc_[A-Za-z0-9+/]{32,400}+={0,3}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"
           r"|eyJrIjoi[A-Za-z0-9]{70,400}+={0,3}", "glc_", "glsa_", "eyjrijoi"),
    _shape("groq_key", r"gsk_[A-Za-z0-9]{48,56}", "gsk_"),
    _shape("harness_token", r"(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}",
           "pat.", "sat."),
    _shape("heroku_key", r"HRKU-AA[A-Za-z0-9_-]{58}", "hrku-aa"),
    # Heroku's older keys are UUIDs: one is a key only when named so.
    _Rule(_Pattern(r"(?i:heroku[\w .-]{0,20}?(?:key|token)[\"']?[ \t]{0,8}[:=]?[ \t]{0,8}[\"']?)"
                   r"(?P<secret>[0-9A-Fa-f]{8}-(?:[0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12})"),
          _always("heroku_key"), ("heroku",)),
    _shape("hilo_token", r"hilo_[A-Za-z0-9_-]{32,}+", "hilo_"),
    _shape("huggingface_token", r"hf_[A-Za-z0-9]{30,}+|api_org_[A-Za-z0-9]{30,}+",
           "hf_", "api_org_"),
    _shape("infracost_token", r"ico-[A-Za-z0-9]{32}", "ico-"),
    _shape("intra_secret", r"s-s4t2(?:ud|af)-[a-f0-9]{64}", "s-s4t2"),
    _shape("linear_key", r"lin_api_[A-Za-z0-9]{40}", "lin_api_"),
    _shape("mailchimp_key", r"[a-f0-9]{32}-us\d{1,2}", "-us"),
    _shape("mailgun_key", r"key-[a-f0-9]{32}", "key-"),
    # No keyword to wait for: it starts with a hex digit, so the search skips to those.
    _Rule(_Pattern(r"[a-f0-9](?<![A-Za-z0-9_][a-f0-9])[a-f0-9]{31}-[a-f0-9]{8}-[a-f0-9]{8}"
                   r"(?![A-Za-z0-9_])"), _always("mailgun_signing_key")),
    _shape("mapbox_token", r"sk\.eyJ[A-Za-z0-9_-]{20,}+\.[A-Za-z0-9_-]{20,}+", "sk.eyj"),
    _shape("maxmind_key", r"[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk", "_mmk"),
    _shape("new_relic_key", r"NR(?:AK|II)-[A-Za-z0-9-]{27,32}", "nrak-", "nrii-"),
    _shape("notion_token", r"ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43}", "ntn_", "secret_"),
    _shape("npm_token", r"npm_[A-Za-z0-9]{36}", "npm_"),
    _shape("octopus_key", r"API-[A-Z0-9]{26}", "api-"),
    _shape("openshift_token", r"sha256~[A-Za-z0-9_-]{43}", "sha256~"),
    _shape("perplexity_key", r"pplx-[A-Za-z0-9]{48}", "pplx-"),
    _shape("planetscale_token", r"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.-]{32,64}", "pscale_"),
    _shape("postman_key", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}", "pmak-"),
    _shape("prefect_token", r"pnu_[A-Za-z0-9]{36}", "pnu_"),
    _shape("pulumi_token", r"pul-[a-f0-9]{40}", "pul-"),
    # pypi.org's tokens and test.pypi.org's.
    _shape("pypi_token", r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}+",
           "pypi-age"),
    _shape("readme_token", r"rdme_[a-z0-9]{70}", "rdme_"),
    _shape("replicate_token", r"r8_[A-Za-z0-9]{37}", "r8_"),
    _shape("rubygems_token", r"rubygems_[a-f0-9]{48}", "rubygems_"),
    _shape("scalingo_token", r"tk-us-[A-Za-z0-9_-]{48}", "tk-us-"),
    _shape("sendgrid_key", r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}", "sg."),
    _shape("sendinblue_key", r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}", "xkeysib-"),
    _shape("sentry_token", r"sntryu_[a-f0-9]{64}|sntrys_eyJ[A-Za-z0-9+/=_]{50,}+",
           "sntryu_", "sntrys_"),
    _shape("settlemint_token", r"sm_(?:aat|pat|sat)_[A-Za-z0-9]{16}", "sm_"),
    _shape("shippo_token", r"shippo_(?:live|test)_[a-fA-F0-9]{40}", "shippo_"),
    _shape("shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
           "shpat_", "shpca_", "shppa_", "shpss_"),
    _Rule(_Pattern(r"hooks\.slack\.com/(?:services|workflows|triggers)/"
                     r"(?P<secret>[A-Za-z0-9+/]{43,56}+)"), _always("slack_webhook"),
          ("hooks.slack.com",)),
    _shape("sourcegraph_token", r"sgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}", "sgp_"),
    _shape("square_token", r"(?:EAAA|sq0atp-|sq0csp-)[A-Za-z0-9_-]{22,60}",
           "eaaa", "sq0atp-", "sq0csp-"),
    _shape("stripe_key", r"(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}|whsec_[A-Za-z0-9]{32,}+",
           "sk_", "rk_", "whsec_"),
    _shape("supabase_token", r"sbp_[a-f0-9]{40}", "sbp_"),
    _shape("tailscale_key", r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}+-"
           r"[A-Za-z0-9]{16,}+", "tskey-"),
    _Rule(_Pattern(r"\.webhook\.office\.com/webhookb2/(?P<secret>[A-Za-z0-9@/_-]{40,400}+)"),
          _always("teams_webhook"), ("webhookb2",)),
    _shape("telegram_token", r"\d{8,10}:AA[A-Za-z0-9_-]{33}", ":aa"),
    _shape("terraform_token", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}", "atlasv1"),
    _shape("twilio_key", r"SK[0-9a-fA-F]{32}", "sk"),
    _shape("vault_token", r"hvs\.[A-Za-z0-9_-]{90,120}|hvb\.[A-Za-z0-9_-]{138,300}",
           "hvs.", "hvb."),
    _shape("xai_key", r"xai-[A-Za-z0-9]{70,90}", "xai-"),
    # `curl -u user:password`: the part after the colon.
    _Rule(_Pattern(r"\bcurl\b[^\n]{0,200}?[ \t](?:-u|--user)[ \t=]+[\"']?[^\s:\"']{1,100}+:"
                     r"(?P<secret>[^\s\"']{1,200}+)"), _always("password"), ("curl",)),
)

# "my passphrase is purple elephant juggles tangerines", "seed phrase: orbit claw …": a
# passphrase is several words, redacted up to the end of its clause, which a comma or a
# word like "and" or "the" also ends ("… tangerines and my PIN is 4821").
_PHRASE_WORD = r"""[^\s"'“‘«,.;:!?()]++"""
_CLAUSE_WORDS = r"(?:and|or|but|so|because|in|on|at|of|for|to|from|with|by|as|is|was|are" \
    r"|my|your|the|a|an|this|that|und|oder|et|ou|y|o)(?![\w-])"
_PASSPHRASE = _Pattern(
    rf"""
    (?i:
        (?<![\w-])(?:pass[ \t]?phrase|(?:seed|recovery|mnemonic)[ \t]+phrase|mnemonic
                    |phrase[ \t]+(?:secrète|de[ \t]+passe)
                    |frase[ \t]+(?:secreta|de[ \t]+contraseña))
        (?:[ \t]+(?:for|of|de|del|du|für|pour|para)[ \t]+[^\s,.;:!?"']{{1,30}}+)?
        [ \t]*(?:(?:is|was|es|era|ist|lautet|est|était)(?![\w-])[ \t]*:?|[:=])[ \t]*
        (?!{_CLAUSE_WORDS})
    )
    (?P<secret>{_PHRASE_WORD}(?:[ \t]+(?!(?i:{_CLAUSE_WORDS})){_PHRASE_WORD}){{1,23}})
    """,
    re.VERBOSE,
)


def _classify_passphrase(match: re.Match[str], value: str) -> str | None:
    # "my passphrase is too long", "… is never asked for", "… is several words long":
    # words that describe it. "correct horse battery staple" describes nothing.
    first, *rest = value.lower().split()
    if first in _DESCRIBING_WORDS and (len(rest) == 1
                                       or any(word in _DESCRIBING_WORDS for word in rest)):
        return None
    return "password"


# Key names end where the separator begins, so "max_tokens=512" and "passwordless:"
# are not secrets while "DB_PASSWORD=", "clientSecret:" and "x-api-key:" are.
_ASSIGNMENT = _Pattern(
    r"""
    (?<![/\\])  # "/etc/passwd: no such file" is a path, not an assignment
    (?i:
        (?P<k_password>pass(?:word|wd|phrase)|pwd|contrase[ñn]a|(?<=[_-])pass
                       |passwort|kennwort|mot[ ]de[ ]passe|mdp)
      | (?P<k_api_key>api[_-]?key)
      | (?P<k_token>token)
      | (?P<k_secret>secret(?:[_-]?(?:access[_-]?)?key)?|private[_-]?key)
      | (?P<k_key>(?<=[_-])key|access[_-]?key|credentials?|creds)
    )
    ["']?[ \t]{0,8}(?P<separator>=>|=(?![=>])|:(?![:/=]))[ \t]{0,8}
    (?: "(?P<secret_dq>(?:[^"\\\r\n]++|\\.)++)"
      | '(?P<secret_sq>(?:[^'\\\r\n]++|\\.)++)'
      | ["']?(?P<secret_bare>[^\s"',;&)}\]]++)
    )
    """,
    re.VERBOSE,
)
_ASSIGNMENT_KINDS = {
    "k_password": "password",
    "k_api_key": "api_key",
    "k_token": "token",
    "k_secret": "secret",
    "k_key": "secret",
}
# Values that name a type, a variable or a mask rather than hold a secret.
PLACEHOLDER_VALUES = frozenset(
    {"none", "null", "nil", "true", "false", "str", "string", "int", "bool", "bytes",
     "undefined", "optional[str]", "secretstr"}
)
PLACEHOLDER_SHAPE = re.compile(r"\$\{?[A-Z_][A-Z0-9_]*\}?|[*x•.…-]+", re.IGNORECASE)
# "token = tokenizer.encode(text)" is code that computes a value, not a literal one.
_CODE_EXPRESSION = re.compile(r"[A-Za-z_][\w.]*(?:\([^()\n]*\)|\[[^\[\]\n]*\])")


def _classify_assignment(match: re.Match[str], value: str) -> str | None:
    if value.lower() in PLACEHOLDER_VALUES or PLACEHOLDER_SHAPE.fullmatch(value):
        return None
    bare_start = match.start("secret_bare")
    if bare_start != -1 and _CODE_EXPRESSION.match(match.string, bare_start):
        return None
    kind = next(kind for group, kind in _ASSIGNMENT_KINDS.items() if match.start(group) != -1)
    # "primary_key: id", "foreign_key=user_id": a bare "key" names a secret only when its
    # value looks like one.
    if match.start("k_key") != -1 and not _looks_like_key_material(value):
        return None
    # "Token: a unit of text" is how people explain LLMs; "token=..." is never prose.
    is_glossary_style = match.group("separator") == ":" and bare_start != -1
    # "password: the one on the sticky note", "Passwort: steht auf dem Zettel".
    if is_glossary_style and value.lower() in _DESCRIBING_WORDS:
        return None
    if kind == "token" and is_glossary_style and not _looks_random(value):
        return None
    return kind


def _looks_like_key_material(value: str) -> bool:
    return len(value) >= 16 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# "my password is hunter2", "mi contraseña es perro123", "the wifi password is 'a b c'",
# "mein Passwort ist …", "das WLAN-Passwort lautet …", "mon mot de passe est « … »".
# A possessive ("my", "mi") or a qualifier ("for gmail", "del banco") makes the sentence
# about one real password: its value is redacted unless it is a word that describes a
# password ("wrong", "incorrecta"). Without either ("the password is required") the value
# must also look like a password: a digit, a symbol or an inner capital.
# The pattern starts at the noun, so that it is tried only where a noun could start
# (trying a possessive first at every character cost twice as much); the possessive is
# looked for in the few words before it. A noun may end a compound ("WLAN-Passwort").
_PROSE_PASSWORD = _Pattern(
    r"""
    (?i:
        (?<!\w)(?<![\d_\W]-)
        (?P<noun>pass(?:word|code|phrase)|passwd|pwd|pin|contrase[ñn]a|clave
                 |passwort|kennwort|mot[ \t]+de[ \t]+passe|mdp)
        (?:[ \t]+(?:nueva|nuevo|actual|anterior|temporal|antigua|secreta|nouveau|neues))?
        (?P<qualifier>[ \t]+(?:for|of|on|at|to|de|del|para|en|für|vom|von|zum|du|des|pour)
                      [ \t]+[^\s,.;:!?"']{1,30}+(?:[ \t]+[^\s,.;:!?"']{1,30}+)?)?
        [ \t]*(?:(?:is|was|es|era|sigue[ \t]+siendo|ist|lautet|war|est|était)(?![\w-])
                 |'s(?![\w-]))[ \t]*:?[ \t]*
        (?:(?:now|still|ahora|todavía|jetzt|noch|maintenant|toujours)[ \t]+)?
    )
    (?: ["'“‘„](?P<secret_quoted>[^"'”’“\n]{1,100})["'”’“]
      | «[ \t\u00a0]*(?P<secret_guillemets>[^»\n]{1,100}?)[ \t\u00a0]*»
      | (?P<secret_bare>[^\s"'“‘]{0,99}[^\s"'“‘.,;:!?)\]])(?=[.,;:!?)\]]*+(?:[\s"'”’]|\Z))
    )
    """,
    re.VERBOSE,
)
_DESCRIBING_WORDS = frozenset("""
    a an the not no never too very so really quite pretty still also just only always
    wrong incorrect invalid valid correct right expired expiring weak strong secure insecure
    safe unsafe long short same different new old required mandatory optional missing empty
    blank saved stored set changed reset locked case case-sensitive sensitive hashed
    encrypted hidden private secret important needed necessary in on at under inside
    written somewhere what something being been known unknown forgotten lost compromised
    leaked stolen shared good bad easy hard simple complex complicated default temporary
    fine ok okay done working broken my your his her their our its this that these those
    here there below above like and or but because which who how where when why if is was
    will would should must can could longer shorter stronger weaker exactly none null nil
    unset changing generated managed visible shown displayed literally actually probably
    definitely sent about for to of with several many few multiple
    incorrecta incorrecto errónea erróneo mala malo inválida inválido válida válido
    correcta correcto débil fuerte segura seguro insegura inseguro muy demasiado nunca la el
    lo los las un una unos unas misma mismo distinta distinto diferente obligatoria
    obligatorio necesaria necesario opcional nueva nuevo vieja viejo antigua antiguo larga
    largo corta corto importante secreta secreto privada privado temporal caducada caducado
    expirada expirado bloqueada bloqueado guardada guardado olvidada olvidado perdida
    perdido robada robado fácil difícil sencilla sencillo complicada complicado igual otra
    otro esta este esa ese aquella tu su que porque y o pero también sólo solo ahora
    todavía aún siempre bastante súper sensible en de con para por como tan más menos cual
    cuál qué algo nada vacía vacío requerida requerido
    falsch richtig korrekt ungültig gültig sicher unsicher geheim neu alt zu sehr nicht
    kein keine nie immer noch auch nur der die das ein eine gleich gleiche dasselbe anders
    kurz lang abgelaufen erforderlich nötig notwendig optional leer gespeichert geändert
    gesperrt vergessen verloren gestohlen gut schlecht einfach schwer stark schwach steht
    siehe hier dort unten oben und oder aber weil mein dein sein ihr unser im auf in
    incorrect incorrecte faux fausse correct correcte valide invalide oublié oubliée perdu
    perdue volé volée trop très pas jamais toujours encore aussi seulement le la les un une
    des même différent différente nouveau nouvelle ancien ancienne longue court courte
    obligatoire requis requise nécessaire facultatif vide sécurisé sécurisée secrète fort
    forte faible simple compliqué expiré expirée bloqué bloquée changé changée enregistré
    enregistrée voir dans sur sous et ou mais car ici là mon ma ton ta son sa notre votre
    leur ce cette
""".split())
# "my password is 12 characters long" gives a length, not the password.
_LENGTH_WORDS = re.compile(
    r"[ \t]+(?:characters|chars|letters|digits|symbols|caracteres|letras|dígitos|símbolos"
    r"|zeichen|buchstaben|ziffern|caractères|lettres|chiffres)\b",
    re.IGNORECASE,
)


def _looks_like_password(value: str) -> bool:
    return any(not c.isalpha() for c in value) or any(c.isupper() for c in value[1:])


_OWNER_BEFORE = re.compile(
    r"""(?i:\b(?:my|our|your|his|her|their|mi|tu|su|nuestra|nuestro|vuestra|meine?|unsere?
              |deine?|seine?|ihre?|eure?|mon|ma|notre|votre|ton|ta|son|sa|leur)
         [ \t]+(?:[^\W\d_]{2,20}(?:[ \t]+|-))?(?:[^\W\d_]{2,20}-)?)\Z""",
    re.VERBOSE,
)


def _classify_prose_password(match: re.Match[str], value: str) -> str | None:
    if value.lower() in _DESCRIBING_WORDS or _LENGTH_WORDS.match(match.string, match.end()):
        return None
    if PLACEHOLDER_SHAPE.fullmatch(value):  # "my password is …", "… is ****"
        return None
    noun = match.group("noun").lower()
    if noun == "pin":
        return "password" if value.isdigit() and 4 <= len(value) <= 12 else None
    quoted = match.start("secret_quoted") != -1 or match.start("secret_guillemets") != -1
    owned = _OWNER_BEFORE.search(match.string, max(0, match.start() - 50), match.start())
    specific = owned is not None or match.group("qualifier") is not None
    if quoted or (specific and noun != "clave") or _looks_like_password(value):
        return "password"
    return None


# An AWS secret access key pasted with no name: 40 characters of base64, not after a dot
# (a domain's or file's name: "github.com/…"). Git SHAs (hex, one case) are not; nor are
# identifiers and paths, made of words: few changes between case and digits, or many
# letters in runs like "Account", and letters as frequent as in English (random letters
# are mostly rare ones: j, q, x, z as often as e). Measured on 100,000 random keys and
# 40,000 made-up identifiers (chat words joined in camelCase or as a path, half with a
# number inside): 0.005 % of keys pass as identifiers (1 % without the letter
# frequencies and with a digit required), 0.3 % of identifiers are redacted.
_UNLABELLED_AWS_SECRET = _Pattern(r"(?<![A-Za-z0-9/+.])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_MIN_CLASS_CHANGES = 16
_WORDLIKE = re.compile(r"[A-Z]?[a-z]{3,}")
_MAX_WORDLIKE_CHARS = 20
# log2 of a letter's frequency in English over its frequency in random text (1/26).
_ENGLISH_LETTER_SCORE = {
    letter: math.log2(26 * percent / 100) for letter, percent in zip(
        "etaoinshrdlcumwfgypbvkjxqz",
        (12.7, 9.06, 8.17, 7.51, 6.97, 6.75, 6.33, 6.09, 5.99, 4.25, 4.03, 2.78, 2.76, 2.41,
         2.36, 2.23, 2.02, 1.97, 1.93, 1.49, 0.98, 0.77, 0.15, 0.15, 0.10, 0.07), strict=False)
}
# Mean score per letter: English words score about +0.4, random letters about -0.9.
_MIN_ENGLISH_SCORE = -0.1
# A base64 line this long before it: the 40 characters end a wrapped base64 block.
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/]{60,}\r?\n\Z")


def _char_class(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def _classify_unlabelled_aws_secret(match: re.Match[str], value: str) -> str | None:
    if not (any(c.islower() for c in value) and any(c.isupper() for c in value)):
        return None
    if _looks_like_identifier(value):
        return None
    before = match.string[max(0, match.start() - 200):match.start()]
    if _BASE64_LINE.search(before):
        return None
    return "aws_secret_key"


def _looks_like_identifier(value: str) -> bool:
    changes = sum(_char_class(a) != _char_class(b) for a, b in zip(value, value[1:], strict=False))
    wordlike = sum(len(word) for word in _WORDLIKE.findall(value))
    if changes >= _MIN_CLASS_CHANGES and wordlike < _MAX_WORDLIKE_CHARS:
        return False
    letters = [c.lower() for c in value if c.isalpha()]
    score = sum(_ENGLISH_LETTER_SCORE[c] for c in letters) / len(letters)
    return score >= _MIN_ENGLISH_SCORE


# Priority order: earlier rules claim their spans first.
RULES: tuple[_Rule, ...] = (
    _Rule(_PRIVATE_KEY, _classify_private_key, ("-----begin",)),
    _Rule(_AWS_ACCESS_KEY_ID, _always("aws_access_key"), ("akia", "asia", "abia", "acca", "a3t")),
    _Rule(_AWS_SECRET_ACCESS_KEY, _always("aws_access_key"), ("secret",)),
    _Rule(_GITHUB_TOKEN, _always("github_token"), ("gh", "github_pat_")),
    _Rule(_GITLAB_TOKEN, _always("gitlab_token"), ("gl", "gr1348941")),
    _Rule(_API_KEY, _always("api_key"), ("sk-", "xox", "xapp-", "aiza")),
    *_TOKEN_SHAPES,
    _Rule(_JWT, _always("jwt"), ("eyj",)),
    _Rule(_AUTHORIZATION_HEADER, _always("bearer_token"), ("authorization",)),
    _Rule(_BEARER_IN_TEXT, _classify_bearer_in_text, ("bearer",)),
    _Rule(_URL_CREDENTIALS, _classify_url_credentials, ("://",)),
    _Rule(_CARD_NUMBER, _classify_card_number),
    _Rule(_PASSPHRASE, _classify_passphrase, ("phrase", "mnemonic")),
    _Rule(_ASSIGNMENT, _classify_assignment,
          ("pass", "pwd", "contrase", "api", "token", "secret", "private", "key", "cred",
           "wort", "mdp")),
    _Rule(_PROSE_PASSWORD, _classify_prose_password,
          ("pass", "pwd", "pin", "contrase", "clave", "wort", "mdp")),
    _Rule(_UNLABELLED_AWS_SECRET, _classify_unlabelled_aws_secret),
)


# The rules waiting for each keyword: a text is searched for each keyword once, rather
# than once per rule that waits for it (checking ninety rules' keywords one rule at a
# time cost chat messages more than running the patterns).
_RULES_BY_KEYWORD = {word: {i for i, rule in enumerate(RULES) if word in rule.keywords}
                     for word in sorted({word for rule in RULES for word in rule.keywords})}
_RULES_WITHOUT_KEYWORDS = frozenset(i for i, rule in enumerate(RULES) if not rule.keywords)


def rules_for(lowered: str) -> list[_Rule]:
    """The rules to run on a text (given in lower case), in priority order: those without
    keywords, and those with one of theirs in the text (case-insensitively)."""
    chosen = set(_RULES_WITHOUT_KEYWORDS)
    for word, indexes in _RULES_BY_KEYWORD.items():
        if word in lowered:
            chosen |= indexes
    return [RULES[i] for i in sorted(chosen)]
