"""What every memory write checks and compares before it touches a row."""

from __future__ import annotations

from app.errors import InvalidInput

SOURCES = ("agent", "user")


class InvalidMemory(InvalidInput, ValueError):
    """A memory edit that cannot be stored as given; str() says why."""

    code = "invalid_memory"


def check_text(name: str, value: str, limit: int) -> str:
    """Non-empty text within `limit` characters; keys have their whitespace collapsed."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidMemory(f"{name} must be non-empty text")
    value = " ".join(value.split()) if name != "value" else value.strip()
    if len(value) > limit:
        raise InvalidMemory(f"{name} is {len(value)} characters; at most {limit} are allowed")
    return value


def check_source(source: str) -> None:
    if source not in SOURCES:
        raise InvalidMemory(f"source must be agent or user, got {source!r}")


def normalise_key(key: str) -> str:
    """A key as it is stored: whitespace collapsed, case folded."""
    return " ".join(key.split()).casefold()


def same_value(a: str, b: str) -> bool:
    """Values that differ only in whitespace or case say the same thing."""
    return normalise_key(a) == normalise_key(b)
