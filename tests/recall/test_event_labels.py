"""Event labels: who said an event and when, indexed in the words people ask with, and
how a question's words map onto them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app import db
from app.db import connect, migrate
from app.events import insert_event, prepare_event
from app.recall.event_labels import (
    CALENDAR_WORDS,
    LabelQuery,
    event_labels,
    month_first,
    read_question,
)
from app.recall.streams import event_labels as labels_read_by_streams

ASKED = datetime(2023, 10, 20, 12, 0, tzinfo=UTC)  # a Friday


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def con(tmp_path):
    connection = connect(tmp_path / "m.sqlite3")
    migrate(connection)
    return connection


def add(con, config, role: str, when: datetime, text: str = "hello", user: str = "ana") -> int:
    with con:
        return insert_event(con, prepare_event(config, user, "s", role, text,
                                               created_at=when)).id


def labelled(con, expression: str) -> list[int]:
    return [row[0] for row in con.execute(
        "SELECT rowid FROM event_labels_fts WHERE event_labels_fts MATCH ? ORDER BY rowid",
        (expression,))]


def labels_of(con, event_id: int) -> str:
    return con.execute("SELECT labels FROM event_labels WHERE id = ?", (event_id,)).fetchone()[0]


def test_an_event_is_labelled_with_its_role_and_date_in_english_and_spanish(con, config):
    event = add(con, config, "user", at("2023-05-08T13:56:00"))
    assert labels_of(con, event).split() == [
        "user", "2023", "may", "mayo", "8", "monday", "lunes", "spring", "primavera",
        "afternoon", "tarde"]
    for words in ('"mayo" AND "lunes"', '"may" AND "2023" AND "8"', "tarde", '"user"'):
        assert labelled(con, words) == [event]


def test_the_stored_text_is_not_touched(con, config):
    event = add(con, config, "assistant", at("2023-05-13T22:10:00"), "See you soon")
    assert con.execute("SELECT content FROM events WHERE id = ?", (event,)).fetchone() == (
        "See you soon",)
    assert con.execute("SELECT rowid FROM events_fts WHERE events_fts MATCH 'saturday'"
                       ).fetchall() == []
    assert labelled(con, "saturday AND weekend AND night") == [event]


def test_the_index_follows_deletes_and_redating(con, config):
    kept = add(con, config, "user", at("2023-05-08T09:00:00"))
    gone = add(con, config, "user", at("2023-05-09T09:00:00"))
    with con:
        con.execute("DELETE FROM events WHERE id = ?", (gone,))
        con.execute("UPDATE events SET created_at = '2024-01-02T20:00:00Z' WHERE id = ?", (kept,))
    assert labelled(con, "mayo") == []
    assert labelled(con, "enero AND 2024 AND evening") == [kept]
    con.execute("INSERT INTO event_labels_fts (event_labels_fts, rank) "
                "VALUES ('integrity-check', 1)")


def test_a_database_at_the_previous_schema_upgrades_and_its_events_are_labelled(tmp_path, config):
    con = connect(tmp_path / "m.sqlite3")
    earlier = [m for m in db.available_migrations() if m.number < 9]
    con.execute(f"CREATE TABLE {db.MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT)")
    for migration in earlier:
        con.execute(migration.sql)
        con.execute(f"INSERT INTO {db.MIGRATIONS_TABLE} VALUES (?, 'then')", (migration.name,))
    assert db.schema_version(con) == 8

    def add_then(role: str, when: datetime, text: str) -> int:
        """An event as Hilo stored it at that schema (today's insert_event has more columns)."""
        event = prepare_event(config, "ana", "s", role, text, created_at=when)
        with con:
            con.execute("INSERT OR IGNORE INTO sessions (user_id, id, started_at, last_event_at) "
                        "VALUES ('ana', 's', ?, ?)", (event.created_at, event.created_at))
            con.execute("INSERT INTO events (uuid, user_id, session_id, role, content, "
                        "created_at, importance) VALUES (?, 'ana', 's', ?, ?, ?, 0.5)",
                        (event.uuid, role, text, event.created_at))
        return con.last_insert_rowid()

    said = add_then("user", at("2023-07-04T08:00:00"), "hi")
    answered = add_then("assistant", at("2023-07-04T20:00:00"), "hello")

    applied = migrate(con)  # 0009 first, then any later migration

    assert applied[0] == "0009_event_labels.sql"
    assert db.schema_version(con) == max(m.number for m in db.available_migrations())
    assert labelled(con, "julio AND morning AND user") == [said]
    assert labelled(con, "july AND evening AND assistant") == [answered]
    # Rows indexed by the upgrade leave the index as cleanly as new ones.
    with con:
        con.execute("DELETE FROM events WHERE id = ?", (said,))
    assert labelled(con, "july") == [answered]
    con.execute("INSERT INTO event_labels_fts (event_labels_fts, rank) "
                "VALUES ('integrity-check', 1)")


def test_the_calendar_words_table_holds_the_words_the_code_reads_questions_with(con):
    stored: dict[str, list[tuple[int, str]]] = {}
    for kind, number, words in con.execute(
            "SELECT kind, number, words FROM calendar_words ORDER BY kind, number"):
        stored.setdefault(kind, []).append((number, words))
    assert stored == CALENDAR_WORDS


@pytest.mark.parametrize("hours", range(0, 24 * 9, 7))
def test_the_view_labels_a_time_as_event_labels_does(con, config, hours):
    when = at("2023-12-28T00:00:00") + timedelta(hours=hours)
    event = add(con, config, "assistant", when)
    assert labels_of(con, event).split() == event_labels("assistant", when)


@pytest.mark.parametrize("created_at", [
    "2023-05-08T13:56:00.123456Z",  # as Hilo writes it
    "2023-12-31T23:59:59Z",
    "2024-02-29T00:00:00.5Z",
    "2023-05-08T13:56:00+02:00",  # an offset: SQLite reads it as 11:56 UTC
    "2023-05-08 13:56:00",  # no T, no Z
    "2023-02-30T13:00:00Z",  # no such day: SQLite moves it to 2 March
    "2023-05-08T13:56:60Z",  # no such second: no time at all
    "0999-05-08T13:56:00Z",
    "yesterday",
])
def test_the_streams_read_an_events_labels_as_the_view_gives_them(con, config, created_at):
    event = add(con, config, "user", at("2023-07-04T08:00:00"))
    with con:
        con.execute("UPDATE events SET created_at = ? WHERE id = ?", (created_at, event))
    assert labels_read_by_streams(con, [event]) == {event: set(labels_of(con, event).split())}


# -- reading questions ---------------------------------------------------------------------

def times(question: str, user_names: list[str] = ()) -> set[frozenset[str]] | None:
    labels = read_question(question, ASKED, user_names).labels
    return None if labels is None else set(labels.times)


@pytest.mark.parametrize("question, expected", [
    ("What did I do in June?", {frozenset({"june"})}),
    ("What happened on 13 October 2023?", {frozenset({"13", "october", "2023"})}),
    ("What did she say on October 13, 2023?", {frozenset({"13", "october", "2023"})}),
    ("What did Gina find on 1 February, 2023?", {frozenset({"1", "february", "2023"})}),
    ("Anything on 2023-10-13?", {frozenset({"13", "october", "2023"})}),
    ("What did I buy in December 2022?", {frozenset({"december", "2022"})}),
    ("How often did we go to the beach in 2023?", {frozenset({"2023"})}),
    ("¿Qué hice en mayo de 2023?", {frozenset({"may", "2023"})}),
    ("¿Qué pasó el 3 de junio?", {frozenset({"3", "june"})}),
    ("¿Qué hice el martes por la tarde?", {frozenset({"tuesday", "afternoon"})}),
    ("What did we talk about on Sunday morning?", {frozenset({"sunday", "morning"})}),
    ("What happened in the fall of 2022?", {frozenset({"autumn", "2022"})}),
])
def test_a_question_naming_a_time_gets_its_labels(question, expected):
    assert times(question) == expected


@pytest.mark.parametrize("question, expected", [
    ("What did I do yesterday?", {frozenset({"19", "october", "2023"})}),
    ("¿Qué hice ayer?", {frozenset({"19", "october", "2023"})}),
    ("What did we decide last month?", {frozenset({"september", "2023"})}),
    ("Where did I travel last year?", {frozenset({"2022"})}),
    ("What did I cook last summer?", {frozenset({m, "2023"}) for m in ("june", "july",
                                                                        "august")}),
    ("¿Qué leí el invierno pasado?", {frozenset({"december", "2022"}),
                                      frozenset({"january", "2023"}),
                                      frozenset({"february", "2023"})}),
    ("What did I do last weekend?", {frozenset({"14", "october", "2023"}),
                                     frozenset({"15", "october", "2023"})}),
    ("What did I say three days ago?", {frozenset({"17", "october", "2023"})}),
])
def test_relative_times_count_from_when_the_question_is_asked(question, expected):
    assert times(question) == expected


@pytest.mark.parametrize("question, expected", [
    ("What did I do on 21.01.2024?", {frozenset({"21", "january", "2024"})}),
    ("Notes from 21/01/24", {frozenset({"21", "january", "2024"})}),
    ("What happened on 3-4-2023?", {frozenset({"3", "april", "2023"})}),
    ("Anything on 2024/01/21?", {frozenset({"21", "january", "2024"})}),
    ("¿Qué hice el 21/01?", {frozenset({"21", "january"})}),
    ("What did I say on 04/13/2023?", {frozenset({"13", "april", "2023"})}),
    ("What did I do last Tuesday?", {frozenset({"17", "october", "2023"})}),
    ("¿Qué hice el martes pasado?", {frozenset({"17", "october", "2023"})}),
    ("What did I do the day before yesterday?", {frozenset({"18", "october", "2023"})}),
    ("What did we decide this month?", {frozenset({"october", "2023"})}),
])
def test_numeric_dates_and_more_relative_times_are_read_as_days(question, expected):
    assert times(question) == expected


def test_a_numeric_date_is_read_month_first_only_in_a_month_first_locale():
    question = "What did I do on 03/04/2023?"
    assert read_question(question, ASKED).labels.times == (
        frozenset({"3", "april", "2023"}),)
    assert read_question(question, ASKED, month_first=True).labels.times == (
        frozenset({"4", "march", "2023"}),)
    assert [month_first(locale) for locale in ("en-US", "en_US.UTF-8", "en-GB", "es", None)] \
        == [True, True, False, False, False]


@pytest.mark.parametrize("question", [
    "I ate 1/2 of the cake", "Is version 1.2.3 out?", "It costs 10.50 now",
    "May I ask you something?", "What is the time?", "Did I fall off the bike?",
    "Shall we march on?", "Tell me about spring rolls", "Where is the 2023-style logo?",
])
def test_words_that_only_look_like_times_are_not_read_as_times(question):
    assert times(question) is None


def test_a_named_day_is_not_narrowed_to_a_weekday_it_is_not():
    assert times("What did Maria do the weekend before April 10, 2023?") == {
        frozenset({"10", "april", "2023"})}


def test_a_question_naming_the_user_asks_about_what_the_user_said():
    read = read_question("What did Caroline's mom give her?", ASKED, ["Caroline"])
    assert read.labels == LabelQuery((), "user")
    assert read.name_spans == ((9, 19),)
    assert read_question("What did Melanie paint?", ASKED, ["Caroline"]).labels is None


def test_label_query_agrees_with_the_index(con, config):
    events = {when: add(con, config, role, at(when)) for when, role in [
        ("2023-06-10T10:00:00", "user"), ("2023-06-11T21:00:00", "assistant"),
        ("2023-07-01T10:00:00", "user"), ("2022-06-15T15:00:00", "user")]}
    for question in ("What did Caroline do in June?", "What did we do in June 2023?",
                     "Anything on a weekend in June?", "What happened last summer?"):
        labels = read_question(question, ASKED, ["Caroline"]).labels
        by_index = set(labelled(con, labels.match()))
        by_check = {event for event in events.values()
                    if labels.holds(set(labels_of(con, event).split()))}
        assert by_index == by_check, question
