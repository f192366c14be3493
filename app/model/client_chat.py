"""A client's own chat request (ClientChat), relayed with only its messages changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.events import Event

__all__ = ["ClientChat"]


@dataclass(frozen=True)
class ClientChat:
    """A client's own chat request, to be relayed with only its messages changed.

    `messages` are the client's messages Hilo sends on (its whole history, or its system
    messages and last message when the stored window is to go before that message);
    `query` is what the memory layers are retrieved for. `sent`: how many of `messages`
    the client sent (None: all); the rest are an agent turn's own calls and results, whose
    provenance their events carry (app/turn/agent.py). `events`: the stored events the
    client's messages are (app/api/conversation.py), whose provenance the turn reads.
    """

    api: str
    body: Mapping[str, Any]
    messages: list[dict[str, Any]]
    with_window: bool
    query: str
    sent: int | None = None
    events: tuple[Event, ...] = ()

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "")

    @property
    def num_ctx(self) -> int | None:
        """The context window the client asked for (Ollama's options.num_ctx)."""
        options = self.body.get("options")
        value = options.get("num_ctx") if isinstance(options, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


