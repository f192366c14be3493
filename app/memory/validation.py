"""What every memory write checks and compares before it touches a row.

Keys and values are cleaned like events (lone surrogates replaced, NUL bytes dropped); a
key with other control characters is refused; a value is stored with its secrets
redacted, and wholly redacted when its key names a secret ("wifi password").
"""

from __future__ import annotations

import unicodedata

from app.errors import InvalidInput
from app.sanitize import clean_text, redact_named_value

__all__ = ["SOURCES", "MAX_ID_LENGTH", "InvalidMemory", "check_text", "check_entry",
           "check_source", "normalise_key", "same_value"]

SOURCES = ("agent", "user")
# Ids (users, sessions, tool calls) are stored, queued and logged as they are.
MAX_ID_LENGTH = 200


class InvalidMemory(InvalidInput, ValueError):
    """A memory edit that cannot be stored as given; str() says why."""

    code = "invalid_memory"


def check_text(name: str, value: str, limit: int) -> str:
    """Non-empty text within `limit` characters; keys have their whitespace collapsed."""
    if not isinstance(value, str):
        raise InvalidMemory(f"{name} must be non-empty text")
    value = clean_text(value)
    if not value.strip():
        raise InvalidMemory(f"{name} must be non-empty text")
    if name != "value":
        value = " ".join(value.split())
        if any(unicodedata.category(ch) == "Cc" for ch in value):
            raise InvalidMemory(f"{name} must be printable text, without control characters")
    else:
        value = value.strip()
    if len(value) > limit:
        raise InvalidMemory(f"{name} is {len(value)} characters; at most {limit} are allowed")
    return value


def check_entry(key: str, value: str, key_limit: int, value_limit: int) -> tuple[str, str]:
    """The (key, value) of a profile entry or fact as stored: checked, key case-folded,
    value redacted."""
    key = check_text("key", key, key_limit).casefold()
    value = redact_named_value(key, check_text("value", value, value_limit)).text
    return key, value


def check_source(source: str) -> None:
    if source not in SOURCES:
        raise InvalidMemory(f"source must be agent or user, got {source!r}")


def normalise_key(key: str) -> str:
    """A key as it is stored: whitespace collapsed, case folded."""
    return " ".join(key.split()).casefold()


def same_value(a: str, b: str) -> bool:
    """Values that differ only in whitespace or case say the same thing."""
    return normalise_key(a) == normalise_key(b)
