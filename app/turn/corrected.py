"""The prompt as the person's corrections leave it (app/memory/corrections.py).

One rule, wherever a prompt shows something said before a correction:
- a fact the person corrected or deleted: what said the old value is shown with what the
  fact says now — "[corrected since: lawyer is now Ortega]" — after its text;
- a fact the person forgot: what said it is never recalled (the fusion leaves it out:
  app/recall/owners.py), and a message of the conversation itself — the window, or the
  history a client resends — says only FORGOTTEN_MESSAGE in its place;
- a reply a client regenerated is no part of the conversation: the window leaves it out
  (a client's own history has the reply it chose).
A correction or forget also ends the prompt stretch (app/turn/context.py) of every
session whose prompt shows what it takes back (`takes_back_shown`), so their next prompt
is built by this rule; the other sessions keep their prompt, and the model server's
cache of it. Quoted past
messages carry their correction from app/turn/quotes.py; context cards and diary entries
from `corrected_items`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

import apsw

from app.events import Event, superseded_among
from app.memory import retractions_since
from app.memory.corrections import Correction, MarkedKind, corrections_of, session_corrections
from app.model.messages import text_to_store, with_text_appended
from app.sanitize import redact_secrets

__all__ = ["FORGOTTEN_MESSAGE", "T", "noted", "corrected_conversation", "corrected_items",
           "takes_back_shown"]

# What a message that said a fact the person has since forgotten shows instead.
FORGOTTEN_MESSAGE = "[forgotten at the user's request]"



class _Item(Protocol):
    @property
    def id(self) -> int: ...


T = TypeVar("T", bound=_Item)


def noted(text: str, correction: Correction) -> str:
    """A marked item's text as a prompt shows it."""
    if correction.withheld:
        return FORGOTTEN_MESSAGE
    return f"{text} [{correction.note}]"


def _stored_form(message: dict) -> str:
    """A client's message as Hilo stored it (sanitised, spaces squashed)."""
    return " ".join(redact_secrets(text_to_store(message)).text.split())


def corrected_conversation(con: apsw.Connection, user_id: str, session_id: str,
                           window: Sequence[Event],
                           tail: list[dict]) -> tuple[list[Event], list[dict]]:
    """The window (the session's events) and a client's messages as the corrections
    leave them (module docstring). Unchanged, as given, when nothing applies."""
    window = list(window)
    gone = superseded_among(con, user_id, [e.id for e in window])
    marked = session_corrections(con, user_id, session_id)
    if gone:
        window = [e for e in window if e.id not in gone]
    if not marked:
        return window, tail
    window = [replace(e, content=noted(e.content, marked[said]))
              if (said := " ".join(e.content.split())) in marked else e for e in window]
    corrected = []
    for message in tail:
        correction = marked.get(_stored_form(message)) if message.get("role") != "system" else None
        if correction is None:
            corrected.append(message)
        elif correction.withheld:
            corrected.append({**message, "content": FORGOTTEN_MESSAGE})
        else:
            corrected.append(with_text_appended(message, f" [{correction.note}]"))
    return window, corrected


def corrected_items(con: apsw.Connection, user_id: str, kind: MarkedKind, items: list[T],
                    text: Callable[[T], str]) -> tuple[list[T], list[str]]:
    """Context cards or diary entries as a prompt lists them: those that said a fact since
    forgotten left out, those that said one since corrected with their correction; each
    one's line (`text` of it) beside it."""
    found = corrections_of(con, user_id, kind, [item.id for item in items])
    kept = [item for item in items if not found.get(item.id, _NONE).withheld]
    lines = [noted(text(item), found[item.id]) if item.id in found else text(item)
             for item in kept]
    return kept, lines


_NONE = Correction(withheld=False)


def takes_back_shown(con: apsw.Connection, user_id: str, session_id: str,
                     shown: frozenset[str], diary_sessions: Iterable[str],
                     generation: int) -> bool:
    """Whether a change since `generation` takes back or corrects what a session's prompt
    shows: a fact it shows (any version of it), or an item the change marked (app/memory/
    corrections.py) that it shows — a recalled message, card or diary entry (`shown`,
    `diary_sessions`: the ContextPlan's), or a message of the session itself. A profile
    key, card or diary entry taken back counts as shown (the layers may hold it)."""
    changes = retractions_since(con, user_id, generation)
    if not changes:
        return False
    if any(kind != "fact" for kind, _, _ in changes):
        return True
    changed = [int(owner_id) for _, owner_id, _ in changes]
    marks = ",".join("?" * len(changed))
    versions = {row[0] for row in con.execute(
        "SELECT v.id FROM facts f JOIN facts v ON v.user_id = f.user_id "
        f"AND v.category = f.category AND v.key = f.key WHERE f.id IN ({marks})", changed)}
    if any(f"fact:{fact_id}" in shown for fact_id in versions | set(changed)):
        return True
    diaries = set(diary_sessions)
    for kind, owner_id, session in con.execute(
            "SELECT c.owner_kind, c.owner_id, coalesce(e.session_id, d.session_id) "
            "FROM corrections c LEFT JOIN events e ON c.owner_kind = 'event' "
            "AND e.id = c.owner_id LEFT JOIN diary d ON c.owner_kind = 'diary' "
            "AND d.id = c.owner_id WHERE c.user_id = ? AND c.created_at >= ?",
            (user_id, min(at for _, _, at in changes))):
        if (f"{kind}:{owner_id}" in shown or (kind == "event" and session == session_id)
                or (kind == "diary" and session in diaries)):
            return True
    return False
