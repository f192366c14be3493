"""A chat reply: whole (`ChatReply`), or as it streams (`ChatStream`)."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from app.model.replies import ReplyRecord, SentChat
from app.model.usage import EngineTime

__all__ = ["ChatReply", "ACCEPTED", "ChatStream"]


@dataclass(frozen=True)
class ChatReply:
    text: str
    model: str
    prompt_eval_count: int | None  # tokens the server counted in the prompt (None if unreported)
    eval_count: int | None  # tokens generated
    done_reason: str | None = None
    # The tools the model called, in app.model.messages' neutral shape ({"id", "name", "arguments"}).
    tool_calls: tuple[dict[str, Any], ...] = ()
    # Of the prompt's tokens, those the server found in its cache (None if unreported).
    prompt_cached_count: int | None = None
    # The engine's own counters for the reply, when the server reports them (app/model/usage.py).
    engine: EngineTime | None = None

    @property
    def prompt_read(self) -> tuple[int, float] | None:
        """(tokens, ms) of prompt the server read anew, for its reading speed; None if unreported."""
        return self.engine.prompt_read if self.engine is not None else None


# Yielded first by the stream generators once the server has accepted the request, so
# ChatStream raises refusals (model not pulled, server down) at creation. Real pieces
# are never empty.
ACCEPTED = ""


class ChatStream:
    """A streaming reply: iterate for text pieces as they arrive — or, for a relayed
    request (`record` set), for the bytes to pass on to the client.

    Refusals (unreachable, model not pulled, HTTP errors) raise when the stream is
    created; StreamInterrupted raises mid-iteration, with the text so far in
    `partial_text`. After the last piece, `reply`, `text`, `prompt_eval_count` and
    `eval_count` hold the totals. Close it (or use `with`) when leaving early.
    """

    def __init__(self, events: Generator[Any, None, ChatReply], model: str,
                 record: ReplyRecord | None = None, sent: dict[str, Any] | None = None) -> None:
        self._events = events
        self._pieces: list[str] = []
        self.model = model
        self.record = record
        self.reply: ChatReply | None = None
        self._sent = sent if sent is not None else {}
        accepted = next(events)
        assert not accepted  # ACCEPTED, or b"" from a relay

    def exchange(self) -> SentChat | None:
        """The request as sent and the reply, once it is complete (text only: a reply
        with tool calls is not one a later request can continue)."""
        if not self.done or self.tool_calls or "body" not in self._sent:
            return None
        return SentChat(self._sent["path"], self._sent["body"], self.text)

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> Any:
        try:
            piece = next(self._events)
        except StopIteration as end:
            if self.reply is None:
                self.reply = end.value
            raise
        if self.record is None:
            self._pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        """The reply's text so far (of a relayed reply: its content, without thinking)."""
        return self.record.text if self.record is not None else "".join(self._pieces)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of the reply, in the neutral shape of app.model.messages: of a
        relayed one as read so far, of Hilo's own once it is complete."""
        if self.record is not None:
            return self.record.tool_calls
        return list(self.reply.tool_calls) if self.reply is not None else []

    @property
    def done(self) -> bool:
        return self.reply is not None

    @property
    def prompt_eval_count(self) -> int | None:
        return self.reply.prompt_eval_count if self.reply else None

    @property
    def eval_count(self) -> int | None:
        return self.reply.eval_count if self.reply else None

    def close(self) -> None:
        """Stop reading and free the connection."""
        self._events.close()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
