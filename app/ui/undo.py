"""The memory page's undo of a forget: for a few minutes, in this process only.

A forget removes the fact's text from the database (app.memory.facts.forget_fact), so
the text an undo needs is held here, in the `hilo serve` process's memory, and nowhere
else: never written to disk, gone when the time is up or the process ends. Undoing
stores it again through the one write path of facts, with its original provenance
(app.memory.restore). A forget that also deleted the messages the fact came from is not
held: those messages cannot be brought back, and the page says so before it forgets.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from app.memory.facts import Fact

__all__ = ["UNDO_SECONDS", "PendingUndo", "ForgetUndos", "undos_of"]

# How long a forget can be undone.
UNDO_SECONDS = 300.0
_MADE = threading.Lock()


@dataclass(frozen=True)
class PendingUndo:
    """A forgotten fact that can still be brought back, until `until` (monotonic)."""

    token: str
    fact: Fact
    until: float

    def minutes_left(self, now: float) -> int:
        return max(1, round((self.until - now) / 60))


class ForgetUndos:
    """The forgets of one server that can still be undone, by a token only their user's
    page is shown."""

    def __init__(self, seconds: float = UNDO_SECONDS) -> None:
        self.seconds = seconds
        self._held: dict[str, PendingUndo] = {}
        self._lock = threading.Lock()

    def hold(self, fact: Fact, now: float | None = None) -> PendingUndo:
        now = time.monotonic() if now is None else now
        pending = PendingUndo(secrets.token_urlsafe(16), fact, now + self.seconds)
        with self._lock:
            self._drop_expired(now)
            self._held[pending.token] = pending
        return pending

    def pending(self, user_id: str, now: float | None = None) -> list[PendingUndo]:
        """The user's forgets that can still be undone, the latest first."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._drop_expired(now)
            mine = [p for p in self._held.values() if p.fact.user_id == user_id]
        return sorted(mine, key=lambda p: p.until, reverse=True)

    def take(self, user_id: str, token: str, now: float | None = None) -> PendingUndo | None:
        """The user's pending undo `token`, no longer held; None when there is none (or
        its time is up, or it is another user's)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._drop_expired(now)
            pending = self._held.get(token)
            if pending is None or pending.fact.user_id != user_id:
                return None
            return self._held.pop(token)

    def _drop_expired(self, now: float) -> None:
        for token in [t for t, p in self._held.items() if p.until <= now]:
            del self._held[token]


def undos_of(state: Any) -> ForgetUndos:
    """The server's pending undos (its app `state`'s), made on the page's first need."""
    with _MADE:
        undos = getattr(state, "forget_undos", None)
        if undos is None:
            undos = state.forget_undos = ForgetUndos()
        return undos
