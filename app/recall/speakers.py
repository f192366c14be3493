"""Who said it: the names a question may call the two speakers by.

People seldom write their own name: the user's name is in the profile, and the name the
user calls the assistant by is read from the conversation itself. A name the user writes
again and again and the assistant never does is how the user addresses the assistant
("Thanks, Mel!", "Hey Jon"); the assistant's own replies never hold it. LoCoMo's
development conversations: the other speaker's name is in 58, 95 and 215 of the user's
messages and in none of theirs, and the user's name the other way round; the names of
anyone else the two talk about are written by both.

A question naming a speaker is asked about what that speaker said (app/recall/
event_labels.py: the role label), so their messages are found although none of them
names them.
"""

from __future__ import annotations

import apsw

from app.fts import quote_term

# The newest messages holding a name that are read to tell who writes it...
ADDRESS_SAMPLE = 100
# ... and the share of them the user must have written for it to be the assistant's name.
ADDRESS_SHARE = 0.9

_WRITERS_SQL = ("SELECT e.role FROM events_fts JOIN events e ON e.id = events_fts.rowid "
                "WHERE events_fts MATCH ? AND e.user_id = ? AND e.role IN ('user', 'assistant') "
                "ORDER BY events_fts.rowid DESC LIMIT ?")


def names_the_assistant(con: apsw.Connection, user_id: str, name: str) -> bool:
    """Whether `name` (a word written as a name, common in the memory) is what the user
    calls the assistant: nearly every recent message holding it is the user's."""
    roles = [row[0] for row in con.execute(_WRITERS_SQL, (quote_term(name), user_id,
                                                           ADDRESS_SAMPLE))]
    return bool(roles) and roles.count("user") >= ADDRESS_SHARE * len(roles)
