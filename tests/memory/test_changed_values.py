"""A changed value supersedes the old one — under the same key or one naming the same
thing — and a value said before the current one never replaces it (app/memory/dedupe.py,
app/memory/facts.py upsert_fact, app/memory/profile.py set_profile)."""

from __future__ import annotations

from contextlib import closing

import pytest

from app.events import append_event
from app.memory import facts_as_of, set_profile, store_fact
from app.memory.dedupe import same_subject, value_kind
from tests.workers.support import query, read_only


def said(writer, config, text: str) -> int:
    return append_event(writer, config, "ana", "s1", "user", text, origin="typed").id


def store(writer, key, value, event_id=None, category="fact", source="agent"):
    return writer.submit(lambda con: store_fact(
        con, "ana", category, key, value, source=source, worker="distill",
        source_event_id=event_id, from_outside=False))


def current(config, category="fact") -> list[tuple[str, str]]:
    return query(config, "SELECT key, value FROM facts WHERE category = ? "
                         "AND superseded_at IS NULL ORDER BY id", (category,))


def test_a_value_said_before_the_current_one_is_kept_as_its_history(config, writer):
    paris = said(writer, config, "I live in Paris")
    lyon = said(writer, config, "I moved to Lyon")
    store(writer, "home city", "Lyon", lyon)  # the latest turn, learned first
    older = store(writer, "home city", "Paris", paris)  # then the chunk before it
    assert older.action == "history"
    assert current(config) == [("home city", "Lyon")]
    (lyon_id, lyon_said), = query(config, "SELECT f.id, e.created_at FROM facts f JOIN events e "
                                          "ON e.id = f.source_event_id WHERE f.value = 'Lyon'")
    (paris_said,) = query(config, "SELECT created_at FROM events WHERE id = ?", (paris,))[0]
    # Dated when it was said, superseded when Lyon was said, by Lyon.
    assert query(config, "SELECT created_at, superseded_at, superseded_by FROM facts "
                         "WHERE value = 'Paris'") == [(paris_said, lyon_said, lyon_id)]
    with closing(read_only(config)) as con:
        assert [(f.key, f.value) for f in facts_as_of(con, "ana", paris_said)] == [
            ("home city", "Paris")]
    # Learned again from the same message: nothing new.
    assert store(writer, "home city", "Paris", paris).action == "unchanged"
    assert query(config, "SELECT count(*) FROM facts") == [(2,)]


def test_a_later_value_still_supersedes(config, writer):
    paris = said(writer, config, "I live in Paris")
    lyon = said(writer, config, "I moved to Lyon")
    store(writer, "home city", "Paris", paris)
    assert store(writer, "home city", "Lyon", lyon).action == "supersede"
    assert current(config) == [("home city", "Lyon")]


def test_the_users_own_edit_is_never_held_back(config, writer):
    paris = said(writer, config, "I live in Paris")
    lyon = said(writer, config, "I moved to Lyon")
    store(writer, "home city", "Lyon", lyon)
    assert store(writer, "home city", "Marseille", source="user").action == "supersede"
    # A worker learning a message said before the user's edit does not undo it.
    assert store(writer, "home city", "Paris", paris).action == "history"
    assert current(config) == [("home city", "Marseille")]


def test_a_profile_value_said_before_the_current_one_does_not_replace_it(config, writer):
    paris = said(writer, config, "I live in Paris")
    lyon = said(writer, config, "I moved to Lyon")

    def set_city(city, event_id):
        return writer.submit(lambda con: set_profile(
            con, "ana", "city", city, source="agent", worker="distill",
            source_event_id=event_id, from_outside=False))

    assert set_city("Lyon", lyon) == "insert"
    assert set_city("Paris", paris) == "unchanged"
    assert query(config, "SELECT value FROM profile") == [("Lyon",)]
    assert set_city("Nice", said(writer, config, "Now I live in Nice")) == "update"


def test_a_changed_value_under_a_key_naming_the_same_thing_supersedes(config, writer):
    store(writer, "backend stack", "Kotlin with Ktor",
          said(writer, config, "The backend is Kotlin with Ktor"))
    changed = store(writer, "backend framework", "Spring Boot",
                    said(writer, config, "Scratch Ktor, we migrated the backend to Spring Boot"))
    assert changed.action == "supersede"
    assert current(config) == [("backend stack", "Spring Boot")]


@pytest.mark.parametrize("key, value, other_key, other_value, message, same", [
    ("date of the move", "June 10", "move date", "June 3", "", True),  # the same words
    ("main editor", "uses helix", "editor", "uses vim", "", True),  # narrowed, same head
    ("pet food", "Whiskas", "pet", "a cat named Miso", "", False),  # another head
    ("backend framework", "Spring Boot", "backend stack", "Kotlin with Ktor",
     "scratch Ktor, it is Spring Boot now", True),  # the change names the old value
    ("backend framework", "Spring Boot", "backend stack", "Kotlin with Ktor",
     "we use Spring Boot for the admin tool", False),
    ("favourite food", "pasta", "favourite colour", "blue", "my favourite food is pasta",
     False),
    ("moving day", "10th of June", "move", "moving to Rotterdam", "", False),
    ("monthly rent", "900 euros", "monthly budget", "1200 euros", "", False),
])
def test_keys_name_the_same_thing_by_a_small_rule(key, value, other_key, other_value, message,
                                                  same):
    assert same_subject(key, value, other_key, other_value, message) is same


def test_a_value_is_a_date_a_number_or_words():
    assert [value_kind(v) for v in ("10th of June", "Friday", "at 6:30", "8.0", "N3",
                                    "Spring Boot")] == [
        "when", "when", "when", "number", "number", "words"]

