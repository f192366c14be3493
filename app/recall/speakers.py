"""Who said it: the names a question may call the two speakers by.

People seldom write their own name: the user's name is in the profile, and the name the
user calls the assistant by is read from the conversation itself. It is a name the user
writes again and again to address the assistant ("Thanks, Mel!", "Hey Jon, ...") and the
assistant itself never writes. On LoCoMo's development conversations the only names
that pass are the other speaker's (in 17 to 215 of the user's messages, addressed in
91 to 100 % of them, never in theirs); the user's name is the other way round, and the
people the two talk about are written by both or not as an address.

A question naming a speaker is asked about what that speaker said (the role label of
app/recall/event_labels.py), so their messages are found although none names them.
"""

from __future__ import annotations

import re
import threading

import apsw

from app.fts import quote_term
from app.recall.bm25 import RECOUNT_GROWTH

__all__ = ["ADDRESS_SAMPLE", "ADDRESS_MIN_MESSAGES", "ADDRESS_SHARE", "ADDRESSED_SHARE",
           "names_in", "AddressBook", "names_the_assistant"]

# The newest messages holding a name that are read to tell who writes it and how...
ADDRESS_SAMPLE = 100
# ... of which the user must have written at least this many ...
ADDRESS_MIN_MESSAGES = 5
# ... and this share, and addressed someone by the name in this share of their own.
ADDRESS_SHARE = 0.9
ADDRESSED_SHARE = 0.8

_WRITERS_SQL = ("SELECT e.role, e.content FROM events_fts JOIN events e "
                "ON e.id = events_fts.rowid WHERE events_fts MATCH ? AND e.user_id = ? "
                "AND e.role IN ('user', 'assistant') ORDER BY events_fts.rowid DESC LIMIT ?")
# A word written as a name, past the question's first word.
_NAME_WORD = re.compile(r"(?<=\W)[A-Z][^\W\d_]{2,}")
# Written as an address: opening the message or a clause, or after a greeting or thanks,
# and closing it.
_ADDRESS = (r"(?:^|[,!?.;:]\s*|\b(?:hey|hi|hello|thanks|thank you|bye|dear|congrats"
            r"|congratulations|wow|oh|sorry|ok|okay|yeah|yes|no|hola|gracias)[,!]?\s+)"
            r"{name}\b(?=\s*(?:[,!?.:;)]|$))")


def names_in(text: str) -> list[re.Match]:
    """The words of a question written as names (not its first word)."""
    return list(_NAME_WORD.finditer(text))


class AddressBook:
    """Whether a name is what the user calls the assistant, per database file and user,
    kept until the memory has grown by RECOUNT_GROWTH (a Recall holds one per process):
    reading a hundred messages for each name of each question would cost a turn more
    than its whole search."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str, str], tuple[int, bool]] = {}
        self._lock = threading.Lock()

    def names_the_assistant(self, con: apsw.Connection, user_id: str, name: str,
                            rows: int) -> bool:
        """As names_the_assistant; `rows`: how many events the memory holds now."""
        key = (con.filename, user_id, name.casefold())
        with self._lock:
            known = self._known.get(key)
        if (known is not None and con.filename  # an in-memory database: nothing to key on
                and known[0] <= rows <= known[0] * (1 + RECOUNT_GROWTH)):
            return known[1]
        found = names_the_assistant(con, user_id, name)
        with self._lock:
            self._known[key] = (rows, found)
        return found


def names_the_assistant(con: apsw.Connection, user_id: str, name: str) -> bool:
    """Whether `name` is what the user calls the assistant: of the newest messages holding
    it, nearly all are the user's and in most of those the user addresses someone by it."""
    said = con.execute(_WRITERS_SQL, (quote_term(name), user_id, ADDRESS_SAMPLE)).fetchall()
    by_user = [content for role, content in said if role == "user"]
    if len(by_user) < max(ADDRESS_MIN_MESSAGES, ADDRESS_SHARE * len(said)):
        return False
    address = re.compile(_ADDRESS.format(name=re.escape(name)), re.IGNORECASE)
    addressed = sum(address.search(content) is not None for content in by_user)
    return addressed >= ADDRESSED_SHARE * len(by_user)
