"""The compiled memory layers: profile, facts, context cards, diary — reads and writes.

This package is the only writer of the profile, facts, context_cards, diary,
memory_log, sessions and embeddings tables: the jobs, the API, the importer and rebuild
all change memory through the functions below (tests/memory/test_writes.py greps the
source tree for SQL that bypasses it).

Writes are functions of a connection, run inside the writer's transaction
(`writer.submit(lambda con: store_fact(con, ...))`), and each change is recorded once in
`memory_log` with its old and new value, source event and worker (provenance.py). Facts are
never overwritten: a changed value supersedes the current row, which is kept; a fact or
profile key the user deleted is tombstoned and no worker re-creates it; a fact the user
forgot is gone, from every row and index and from the disk (forget.py: imported from
there, since it reaches the events too), but for hashes of its key and value. A new
statement of a fact, from the user or a worker, goes through one dedupe policy
(dedupe.py). Reads take any connection (the front-end uses read-only ones).

    profile.py     layer 3: key → value, tombstones
    facts.py       layer 4: one current fact per (category, key), supersede, history
    dedupe.py      store_fact: similar text updates the fact it repeats
    cards.py       layer 2: context cards, folding
    diary.py       layer 5: one entry per session
    edits.py       the edits a person makes by hand: remember, correct, a diary entry
    corrections.py what said a fact the person corrected or forgot since
    forget.py      a fact forgotten for good, with its sources if asked, off the disk too
    importance.py  what is read: recall counts, and decay of what is not
    provenance.py  is_outside, the one rule of whose hand a row is; memory_log, the
                   record of every change
    bootstrap.py   MEMORY.md as the turn reads it: comments stripped, capped, cached
    sessions.py    the sessions table: opened by events, imported, ended, listed
    embeddings.py  the embeddings table's writes (recall reads and searches them)
    restore.py     undoing a forget: the value a front-end held, stored again as it was
    validation.py  InvalidMemory and the checks every write makes
"""

from app.memory.cards import (
    Card,
    NewCard,
    add_card,
    cards_by_ids,
    clear_cards,
    fold_cards,
    link_folded_card,
    list_cards,
    replace_extractive_card,
)
from app.memory.dedupe import SIMILAR_FACT_THRESHOLD, similar_facts, store_fact
from app.memory.diary import (
    DiaryEntry,
    add_diary_entry,
    clear_diary,
    import_diary_entry,
    last_diary,
    replace_extractive_diary,
)
from app.memory.edits import (
    EditedFact,
    FactNotFound,
    correct_fact,
    remember_fact,
    write_diary_entry,
)
from app.memory.facts import (
    CATEGORIES,
    Category,
    Fact,
    FactRecord,
    FactWrite,
    clear_agent_facts,
    current_fact,
    delete_fact,
    fact_history,
    facts_as_of,
    facts_by_ids,
    get_fact,
    import_fact,
    link_superseded_fact,
    list_facts,
    merge_facts,
    restore_user_facts,
    upsert_fact,
)
from app.memory.importance import ImportanceFloors, add_reads, decay_unread_importance
from app.memory.profile import (
    ProfileEntry,
    clear_agent_profile,
    delete_profile,
    import_profile,
    list_profile,
    profile_as_of,
    set_profile,
)
from app.memory.provenance import (
    HANDS,
    Hand,
    WriteAction,
    is_outside,
    memory_generation,
    retractions_since,
)
from app.memory.sessions import (
    SessionInfo,
    count_sessions,
    end_session,
    known_users,
    list_sessions,
    session_exists,
)
from app.memory.validation import SOURCES, InvalidMemory

__all__ = [
    "CATEGORIES", "HANDS", "SIMILAR_FACT_THRESHOLD", "SOURCES",
    "Card", "Category", "DiaryEntry", "EditedFact", "Fact", "FactNotFound", "FactRecord",
    "FactWrite", "Hand", "ImportanceFloors", "InvalidMemory", "NewCard", "ProfileEntry",
    "SessionInfo", "WriteAction",
    "add_card", "add_diary_entry", "add_reads", "cards_by_ids", "clear_agent_facts",
    "clear_agent_profile", "clear_cards", "clear_diary", "correct_fact", "current_fact",
    "decay_unread_importance",
    "delete_fact", "delete_profile", "end_session", "fact_history", "facts_as_of", "facts_by_ids",
    "fold_cards", "get_fact", "import_diary_entry", "import_fact",
    "import_profile", "is_outside", "known_users", "last_diary",
    "link_folded_card", "link_superseded_fact", "list_cards", "list_facts", "list_profile",
    "list_sessions", "count_sessions", "memory_generation", "merge_facts", "profile_as_of", "remember_fact",
    "replace_extractive_card", "replace_extractive_diary", "restore_user_facts",
    "retractions_since", "session_exists", "set_profile",
    "similar_facts",
    "store_fact", "upsert_fact", "write_diary_entry",
]
