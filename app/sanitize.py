"""Secrets never reach the database: every message is redacted before it is stored.

What counts as a secret is decided in one place, `app.secret_rules`; this module applies
its rules to a text, a named value or a JSON value, and replaces what they find.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from app.secret_rules import PLACEHOLDER_SHAPE, PLACEHOLDER_VALUES, Finding, rules_for

__all__ = ["Redacted", "marker", "Secret", "redact_secrets", "find_secrets", "ECHO_MIN_CHARS",
           "clean_text", "secret_kind", "redact_named_value", "redact_json"]


@dataclass(frozen=True)
class Redacted:
    """Text safe to store, and the kinds of secret removed from it, in text order."""

    text: str
    kinds: tuple[str, ...]


def marker(kind: str) -> str:
    """What replaces a secret of this kind."""
    return f"[REDACTED:{kind}]"


_MARKER = re.compile(r"\[REDACTED:[a-z_]+\]")


@dataclass(frozen=True)
class Secret:
    """A secret found in a text: what it is, and its characters."""

    kind: str
    value: str


def redact_secrets(text: str, *, echoes_of: tuple[Secret, ...] = ()) -> Redacted:
    """Replace every secret in text with [REDACTED:kind]; ordinary text is unchanged.

    `echoes_of`: secrets the text may repeat in part (a model's reply to a prompt that
    held them). A piece of one is no longer the shape its rule knows, so any run of
    ECHO_MIN_CHARS or more of its characters is redacted too, as its kind.
    """
    claimed = list(_findings(text))
    if echoes_of:
        claimed = _claim(claimed, _echoes(text, echoes_of))
    kinds = tuple(f.kind for f in claimed if f.kind is not None)
    return Redacted(text=_replace(text, claimed), kinds=kinds)


def find_secrets(text: str) -> tuple[Secret, ...]:
    """The secrets in text, in text order, each once."""
    found = {Secret(f.kind, text[f.start:f.end]) for f in _findings(text) if f.kind is not None}
    return tuple(sorted(found, key=lambda s: text.index(s.value)))


# Texts up to this long have their findings remembered (the last _REMEMBERED of them): a
# client resends its whole conversation with every request, and Hilo reads each message
# several times per request (to tell the new ones from those stored, to store them, to
# keep the last chat), so the same texts come back again and again. Longer ones are rare
# and would hold too much memory.
_REMEMBERED_CHARS = 4096
_REMEMBERED = 1024


def _findings(text: str) -> tuple[Finding, ...]:
    """The secrets and markers in text, in text order."""
    return _remembered_findings(text) if len(text) <= _REMEMBERED_CHARS else _scan(text)


def _scan(text: str) -> tuple[Finding, ...]:
    # Markers already in the text are claimed first, so redacting twice changes nothing.
    claimed = [Finding(m.start(), m.end(), None) for m in _MARKER.finditer(text)]
    for rule in rules_for(text.lower()):
        claimed = _claim(claimed, rule.find(text))
    return tuple(claimed)


_remembered_findings = lru_cache(maxsize=_REMEMBERED)(_scan)


# Ten characters of a random token do not occur in prose by chance, and fewer give away
# little of it.
ECHO_MIN_CHARS = 10


def _echoes(text: str, secrets: tuple[Secret, ...]) -> Iterator[Finding]:
    """Maximal runs of text made of ECHO_MIN_CHARS-long pieces of one of the secrets."""
    pieces: dict[str, str] = {}
    for secret in secrets:
        for start in range(len(secret.value) - ECHO_MIN_CHARS + 1):
            pieces.setdefault(secret.value[start:start + ECHO_MIN_CHARS], secret.kind)
    run_start = run_end = -1
    run_kind = ""
    for start in range(len(text) - ECHO_MIN_CHARS + 1):
        kind = pieces.get(text[start:start + ECHO_MIN_CHARS])
        if kind is None:
            continue
        if start > run_end:
            if run_end > run_start:
                yield Finding(run_start, run_end, run_kind)
            run_start, run_kind = start, kind
        run_end = start + ECHO_MIN_CHARS
    if run_end > run_start:
        yield Finding(run_start, run_end, run_kind)


def _claim(claimed: list[Finding], candidates: Iterator[Finding]) -> list[Finding]:
    """claimed plus the candidates, sorted by position. A candidate that overlaps secrets
    already claimed widens them to cover it (the first claim names the kind): no piece of
    a longer token is left in clear, to be found by the next pass. One that overlaps a
    marker already in the text is dropped.

    Both inputs are sorted and non-overlapping, so one forward pass suffices.
    """
    merged: list[Finding] = []
    i = 0
    for candidate in candidates:
        while i < len(claimed) and claimed[i].end <= candidate.start:
            merged.append(claimed[i])
            i += 1
        j = i
        while j < len(claimed) and claimed[j].start < candidate.end:
            j += 1
        overlapped = claimed[i:j]
        i = j
        if merged and merged[-1].end > candidate.start:  # widened by the candidate before
            overlapped.insert(0, merged.pop())
        if not overlapped:
            merged.append(candidate)
        elif any(f.kind is None for f in overlapped):
            merged.extend(overlapped)
        else:
            merged.append(Finding(min(candidate.start, overlapped[0].start),
                                   max(candidate.end, overlapped[-1].end), overlapped[0].kind))
    merged.extend(claimed[i:])
    return merged


def _replace(text: str, findings: list[Finding]) -> str:
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


def clean_text(text: str) -> str:
    """Text SQLite stores as it was meant: lone surrogates (which UTF-8 cannot encode)
    become "?", NUL bytes are dropped."""
    if text.isascii() and "\x00" not in text:
        return text  # nothing to clean: no copy of a long message (each check is in C)
    return text.encode("utf-8", errors="replace").decode("utf-8").replace("\x00", "")


def secret_kind(text: str) -> str | None:
    """The kind of the first secret in text, or None: for identifiers that must not be
    one (a session id is stored, queued and logged as it is)."""
    kinds = redact_secrets(text).kinds
    return kinds[0] if kinds else None


# A name that says its value is a secret: "password", "wifi password", "github token",
# "contraseña del banco". "password hint", "token budget" and "max tokens" do not.
_SECRET_NAME = re.compile(
    r"""
    (?:^|[\s_.-])(?:
        (?P<password>pass(?:word|wd|phrase|code)?|pwd|pin)
      | (?P<token>token|access[\s_-]?token)
      | (?P<api_key>api[\s_-]?key)
      | (?P<secret>secret|private[\s_-]?key|credentials?|creds|access[\s_-]?key)
    )$
    | ^(?P<password_es>contrase[ñn]a|clave|pin)(?:$|[\s_-]+(?:de|del|para)\b)
    """,
    re.IGNORECASE | re.VERBOSE,
)


def redact_named_value(name: str, value: str) -> Redacted:
    """`value` redacted as it would be after `name=` — wholly when the name says it is a
    secret ("wifi password" → [REDACTED:password]), else wherever it holds one."""
    match = _SECRET_NAME.search(name.strip())
    bare = value.strip()
    if (match is None or not bare or _MARKER.fullmatch(bare)
            or bare.lower() in PLACEHOLDER_VALUES or PLACEHOLDER_SHAPE.fullmatch(bare)):
        return redact_secrets(value)
    kind = "password" if match.lastgroup == "password_es" else match.lastgroup
    return Redacted(text=marker(kind), kinds=(kind,))


def redact_json(value: Any, *, echoes_of: tuple[Secret, ...] = ()) -> Any:
    """A JSON value (a chat request, a tool call's arguments) with its secrets redacted
    and its shape kept (where redacting its JSON text could eat a quote's escape): each
    string redacted as the value of its key (`{"password": "x"}` loses x, so does
    `{"Authorization": "Basic x"}`), a string holding JSON (OpenAI's tool-call
    arguments) redacted inside and written back only when something was redacted, so a
    value without secrets comes back identical."""
    return _redact_json(value, "", echoes_of)


def _redact_json(value: Any, name: str, echoes_of: tuple[Secret, ...]) -> Any:
    if isinstance(value, dict):
        return {redact_secrets(str(key)).text: _redact_json(item, str(key), echoes_of)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_json(item, name, echoes_of) for item in value]
    if not isinstance(value, str):
        return value
    inner = _json_container(value)
    if inner is not None:
        redacted = _redact_json(inner, name, echoes_of)
        return value if redacted == inner else json.dumps(redacted, ensure_ascii=False)
    if name and _SECRET_NAME.search(name.strip()):
        return redact_secrets(redact_named_value(name, value).text, echoes_of=echoes_of).text
    if name:  # read after its key, as the JSON text reads: "Authorization": "Basic …"
        prefix = f"{name}: "
        redacted = redact_secrets(prefix + value, echoes_of=echoes_of).text
        if redacted.startswith(prefix):
            return redacted[len(prefix):]
    return redact_secrets(value, echoes_of=echoes_of).text


def _json_container(text: str) -> Any:
    """The object or array a string holds as JSON text, else None."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, (dict, list)) else None
