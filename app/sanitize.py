"""Secrets never reach the database: every message is redacted before it is stored.

Each kind of secret is one rule: a compiled pattern, the group holding the secret and a
check that tells a real credential from prose. Rules run in priority order over the
original text (private keys, then specific token shapes, then generic `name=value`
assignments); a later rule never touches a span an earlier one already claimed, so a
value is redacted once, under its most specific kind.

Every pattern runs in linear time on any input (possessive quantifiers, bounded
repeats, lookbehinds that start a match only at a word's first character), because
this runs on every stored message, including pasted megabyte logs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class Redacted:
    """Text safe to store, and the kinds of secret removed from it, in text order."""

    text: str
    kinds: tuple[str, ...]


def marker(kind: str) -> str:
    """What replaces a secret of this kind."""
    return f"[REDACTED:{kind}]"


_MARKER = re.compile(r"\[REDACTED:[a-z_]+\]")


class _Finding(NamedTuple):  # a tuple: megabyte logs can hold 100k of them
    start: int
    end: int
    kind: str | None  # None: a marker already in the text, kept as it is


@dataclass(frozen=True)
class _Rule:
    """One pattern; `classify(match, secret)` names the kind, or None to let it pass."""

    pattern: re.Pattern[str]
    classify: Callable[[re.Match[str], str], str | None]

    def find(self, text: str) -> Iterator[_Finding]:
        # Groups named secret* hold the value; the rest of a match (a key name,
        # "Bearer", a URL's user and host) stays readable.
        secret_groups = [name for name in self.pattern.groupindex if name.startswith("secret")]
        for match in self.pattern.finditer(text):
            start, end = _secret_span(match, secret_groups)
            kind = self.classify(match, text[start:end])
            if kind is not None:
                yield _Finding(start, end, kind)


def _secret_span(match: re.Match[str], secret_groups: list[str]) -> tuple[int, int]:
    for name in secret_groups:
        if match.start(name) != -1:
            return match.span(name)
    return match.span()


def _always(kind: str) -> Callable[[re.Match[str], str], str]:
    return lambda match, secret: kind


_PRIVATE_KEY = re.compile(
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


_AWS_ACCESS_KEY_ID = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")
_AWS_SECRET_ACCESS_KEY = re.compile(
    r"(?i:(?:aws[_-]?)?secret[_-]?access[_-]?key)[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?"
    r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
_GITHUB_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_[A-Za-z0-9_]{22,}+)"
)
_GITLAB_TOKEN = re.compile(r"(?<![A-Za-z0-9_-])gl(?:pat|dt|rt|ptt|ft)-[A-Za-z0-9_-]{20,}+")
_API_KEY = re.compile(
    r"""(?<![A-Za-z0-9_-])
    (?: sk-[A-Za-z0-9_-]{20,}+             # OpenAI sk-/sk-proj-, Anthropic sk-ant-
      | xox[baprs]-[A-Za-z0-9-]{10,}+      # Slack
      | AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])  # Google
    )""",
    re.VERBOSE,
)
_JWT = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"
)
_AUTHORIZATION_HEADER = re.compile(
    r"(?i:\bauthorization)[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?(?i:bearer|basic|token|bot)[ \t]+"
    r"(?P<secret>[^\s\"',;]++)"
)
_BEARER_IN_TEXT = re.compile(
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


_CONNECTION_STRING = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}+://[^\s:/@]*+:"
    # Greedy up to the last "@" before the host, so "p@ss" stays whole.
    r"(?P<secret>[^\s/?#]+)@"
)

# Key names end where the separator begins, so "max_tokens=512" and "passwordless:"
# are not secrets while "DB_PASSWORD=", "clientSecret:" and "x-api-key:" are.
_ASSIGNMENT = re.compile(
    r"""
    (?<![/\\])  # "/etc/passwd: no such file" is a path, not an assignment
    (?i:
        (?P<k_password>pass(?:word|wd|phrase)|pwd|contrase[ñn]a|(?<=[_-])pass)
      | (?P<k_api_key>api[_-]?key)
      | (?P<k_token>token)
      | (?P<k_secret>secret(?:[_-]?(?:access[_-]?)?key)?|private[_-]?key)
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
}
# Values that name a type, a variable or a mask rather than hold a secret.
_PLACEHOLDER_VALUES = frozenset(
    {"none", "null", "nil", "true", "false", "str", "string", "int", "bool", "bytes",
     "undefined", "optional[str]", "secretstr"}
)
_PLACEHOLDER_SHAPE = re.compile(r"\$\{?[A-Z_][A-Z0-9_]*\}?|[*x•.…-]+", re.IGNORECASE)
# "token = tokenizer.encode(text)" is code that computes a value, not a literal one.
_CODE_EXPRESSION = re.compile(r"[A-Za-z_][\w.]*(?:\([^()\n]*\)|\[[^\[\]\n]*\])")


def _classify_assignment(match: re.Match[str], value: str) -> str | None:
    if value.lower() in _PLACEHOLDER_VALUES or _PLACEHOLDER_SHAPE.fullmatch(value):
        return None
    bare_start = match.start("secret_bare")
    if bare_start != -1 and _CODE_EXPRESSION.match(match.string, bare_start):
        return None
    kind = next(kind for group, kind in _ASSIGNMENT_KINDS.items() if match.start(group) != -1)
    # "Token: a unit of text" is how people explain LLMs; "token=..." is never prose.
    is_glossary_style = match.group("separator") == ":" and bare_start != -1
    if kind == "token" and is_glossary_style and not _looks_random(value):
        return None
    return kind


# Priority order: earlier rules claim their spans first.
_RULES: tuple[_Rule, ...] = (
    _Rule(_PRIVATE_KEY, _classify_private_key),
    _Rule(_AWS_ACCESS_KEY_ID, _always("aws_access_key")),
    _Rule(_AWS_SECRET_ACCESS_KEY, _always("aws_access_key")),
    _Rule(_GITHUB_TOKEN, _always("github_token")),
    _Rule(_GITLAB_TOKEN, _always("gitlab_token")),
    _Rule(_API_KEY, _always("api_key")),
    _Rule(_JWT, _always("jwt")),
    _Rule(_AUTHORIZATION_HEADER, _always("bearer_token")),
    _Rule(_BEARER_IN_TEXT, _classify_bearer_in_text),
    _Rule(_CONNECTION_STRING, _always("connection_string")),
    _Rule(_ASSIGNMENT, _classify_assignment),
)


def redact_secrets(text: str) -> Redacted:
    """Replace every secret in text with [REDACTED:kind]; ordinary text is unchanged."""
    # Markers already in the text are claimed first, so redacting twice changes nothing.
    claimed = [_Finding(m.start(), m.end(), None) for m in _MARKER.finditer(text)]
    for rule in _RULES:
        claimed = _claim(claimed, rule.find(text))
    kinds = tuple(f.kind for f in claimed if f.kind is not None)
    return Redacted(text=_replace(text, claimed), kinds=kinds)


def _claim(claimed: list[_Finding], candidates: Iterator[_Finding]) -> list[_Finding]:
    """claimed plus the candidates that overlap none of it, sorted by position.

    Both inputs are sorted and non-overlapping, so one forward pass suffices.
    """
    kept: list[_Finding] = []
    i = 0
    for candidate in candidates:
        while i < len(claimed) and claimed[i].end <= candidate.start:
            i += 1
        if i < len(claimed) and claimed[i].start < candidate.end:
            continue
        kept.append(candidate)
    if not kept:
        return claimed
    return sorted(claimed + kept, key=lambda f: f.start)


def _replace(text: str, findings: list[_Finding]) -> str:
    parts: list[str] = []
    position = 0
    for finding in findings:
        parts.append(text[position:finding.start])
        if finding.kind is not None:
            parts.append(marker(finding.kind))
        else:
            parts.append(text[finding.start:finding.end])
        position = finding.end
    parts.append(text[position:])
    return "".join(parts)
