"""Times as Hilo stores them: RFC 3339 UTC text that sorts as it reads."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["to_rfc3339", "utc_now", "parse_rfc3339"]


def to_rfc3339(moment: datetime) -> str:
    """A timezone-aware datetime as "2026-11-30T14:44:28.123456Z"."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: pass a timezone-aware one")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_now() -> str:
    return to_rfc3339(datetime.now(UTC))


def parse_rfc3339(text: str) -> datetime:
    """Parse what to_rfc3339 writes (and any ISO 8601 with an offset)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment
