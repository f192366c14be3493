"""What a request's messages already say, so that recall adds only what they do not: a
recalled line, fact or card that says nothing more would only repeat the prompt."""

from __future__ import annotations

import apsw

from app.memory import Card, Fact
from app.model.messages import text_to_store
from app.sanitize import redact_secrets

__all__ = ["Carried", "saying_more"]


class Carried:
    """What a request's messages already say, as Hilo would store it (secrets redacted,
    whitespace squashed): a recalled line that says nothing more would only repeat it."""

    def __init__(self, messages: list[dict], kept_chars: int) -> None:
        # Each message as far as it is stored: a huge one costs no more than that.
        texts = (" ".join(redact_secrets(text_to_store(m)[:kept_chars]).text.split())
                 for m in messages)
        self._text = "\n".join(t for t in texts if t)

    def holds(self, content: str) -> bool:
        """Whether `content` is said in the messages, as whole words."""
        content = " ".join(content.split())
        if not content:
            return True
        at = self._text.find(content)
        while at >= 0:
            end = at + len(content)
            if not (at and self._text[at - 1].isalnum()) and not (
                    end < len(self._text) and self._text[end].isalnum()):
                return True
            at = self._text.find(content, at + 1)
        return False


def saying_more(con: apsw.Connection, user_id: str, session_id: str, carried: Carried,
                 facts: list[Fact], cards: list[Card]) -> tuple[list[Fact], list[Card]]:
    """The facts and cards, less those that only repeat the request: learned from, or
    summarising, messages of this session that it holds word for word (a client resends
    its history; the window shows the recent messages)."""
    sources = [f.source_event_id for f in facts if f.source_event_id is not None]
    resent: set[int] = set()
    if sources:
        rows = con.execute(
            "SELECT id, content FROM events WHERE +user_id = ? AND session_id = ? "
            f"AND id IN ({','.join('?' * len(sources))})", (user_id, session_id, *sources))
        resent = {event_id for event_id, content in rows if carried.holds(content)}
    kept_cards = []
    for card in cards:
        if card.session_id == session_id and card.first_event_id is not None:
            summarised = [row[0] for row in con.execute(
                "SELECT content FROM events WHERE id BETWEEN ? AND ? AND card_id = ?",
                (card.first_event_id, card.last_event_id, card.id))]
            if summarised and all(carried.holds(content) for content in summarised):
                continue
        kept_cards.append(card)
    return [f for f in facts if f.source_event_id not in resent], kept_cards
