"""Forgetting, as a user means it: the value is gone from everywhere, the log keeps only
that something was forgotten, and no worker learns the same statement again."""

from __future__ import annotations

import json
import time

import numpy as np

from app.db import connect_readonly
from app.events import append_event, link_to_card
from app.memory import NewCard, add_card, add_diary_entry, list_facts, store_fact, upsert_fact
from app.memory.forget import forget, forget_fact
from app.ops.backup import backup, rebuild
from app.recall.vectors import Owner, store_vectors
from tests.cli.test_messages import hilo

SECRET = "lives at 42 Rua das Flores"


def rows(writer, sql, *args):
    return list(connect_readonly(writer.path).execute(sql, args))


def learn(writer, config, text, value, *, category="fact", key="home address"):
    """A worker learning `value` from a new message `text`: the event, then the fact."""
    event = append_event(writer, config, "ana", "s1", "user", text)
    written = writer.submit(lambda con: store_fact(
        con, "ana", category, key, value, source="agent", worker="distill",
        source_event_id=event.id))
    return event, written


def test_forget_removes_the_value_its_versions_vectors_fts_and_logged_values(writer, config):
    first_event, first = learn(writer, config, "I live at 7 Old Road", "lives at 7 Old Road")
    event, second = learn(writer, config, f"I moved, I {SECRET}", SECRET)
    assert second.action == "supersede"
    writer.submit(lambda con: store_vectors(con, [Owner("fact", first.fact_id, "ana", ""),
                                                  Owner("fact", second.fact_id, "ana", "")],
                                            "m", np.ones((2, 4), dtype=np.float32)))
    gone = writer.submit(lambda con: forget_fact(con, "ana", second.fact_id))
    assert gone.versions == 2 and gone.events == 0
    dump = json.dumps(rows(writer, "SELECT * FROM facts") + rows(writer, "SELECT * FROM memory_log"))
    assert "Rua das Flores" not in dump and "7 Old Road" not in dump
    assert rows(writer, "SELECT rowid FROM facts_fts WHERE facts_fts MATCH 'flores'") == []
    assert rows(writer, "SELECT count(*) FROM embeddings WHERE owner_kind = 'fact'") == [(0,)]
    assert [a for (a,) in rows(writer, "SELECT action FROM memory_log")][-1] == "delete"
    assert list_facts(connect_readonly(writer.path), "ana") == []
    # Without --with-sources the messages stay.
    assert rows(writer, "SELECT count(*) FROM events") == [(2,)]


def test_forget_with_sources_deletes_the_messages_their_fts_rows_and_vectors(writer, config):
    event, written = learn(writer, config, f"I {SECRET}", SECRET)
    writer.submit(lambda con: store_vectors(con, [Owner("event", event.id, "ana", "")], "m",
                                            np.ones((1, 4), dtype=np.float32)))
    gone = writer.submit(lambda con: forget_fact(con, "ana", written.fact_id, with_sources=True))
    assert gone.events == 1
    assert rows(writer, "SELECT count(*) FROM events") == [(0,)]
    assert rows(writer, "SELECT rowid FROM events_fts WHERE events_fts MATCH 'flores'") == []
    assert rows(writer, "SELECT count(*) FROM embeddings") == [(0,)]


def test_a_forgotten_fact_is_not_learned_again_from_old_or_repeated_statements(writer, config):
    event, written = learn(writer, config, f"I {SECRET}", SECRET)
    writer.submit(lambda con: forget_fact(con, "ana", written.fact_id))
    # The distiller re-reading the old message, and the same statement said again.
    again = writer.submit(lambda con: upsert_fact(
        con, "ana", "fact", "home address", SECRET, source="agent", worker="distill",
        source_event_id=event.id))
    assert again.action == "tombstoned"
    assert learn(writer, config, f"Again: I {SECRET}", SECRET)[1].action == "tombstoned"
    assert list_facts(connect_readonly(writer.path), "ana") == []


def test_a_new_statement_after_a_forget_is_a_new_fact(writer, config):
    _, written = learn(writer, config, f"I {SECRET}", SECRET)
    writer.submit(lambda con: forget_fact(con, "ana", written.fact_id))
    time.sleep(0.01)
    _, new = learn(writer, config, "I moved to 9 Praça Nova", "lives at 9 Praça Nova")
    assert new.action == "insert"  # the forgotten fact kept no key for it to supersede
    assert [f.value for f in list_facts(connect_readonly(writer.path), "ana")] == [
        "lives at 9 Praça Nova"]


def test_a_forgotten_fact_keeps_no_key(writer, config):
    _, written = learn(writer, config, f"I {SECRET}", SECRET, key="flat on rua das flores")
    writer.submit(lambda con: forget_fact(con, "ana", written.fact_id))
    dump = json.dumps(rows(writer, "SELECT * FROM facts") + rows(writer, "SELECT * FROM memory_log"))
    assert "flores" not in dump.casefold()
    assert rows(writer, "SELECT rowid FROM facts_fts WHERE facts_fts MATCH 'flores'") == []
    # What stays is enough to know the same key and value again: still not learned.
    assert learn(writer, config, f"Again: I {SECRET}", SECRET,
                 key="flat on rua das flores")[1].action == "tombstoned"


def test_deleted_but_not_forgotten_still_blocks_every_worker_statement(writer, config):
    from app.memory import delete_fact

    _, written = learn(writer, config, f"I {SECRET}", SECRET)
    writer.submit(lambda con: delete_fact(con, "ana", written.fact_id))
    assert learn(writer, config, "I moved to 9 Praça Nova", "lives at 9 Praça Nova")[1].action \
        == "tombstoned"


def test_memory_add_edit_forget_from_the_command_line(data_dir):
    d = ["--data-dir", str(data_dir)]
    added = hilo("memory", "add", "preference", "editor", "uses vim", "--json", *d)
    assert added.returncode == 0, added.stderr
    fact = json.loads(added.stdout)["fact"]
    assert (fact["key"], fact["value"]) == ("editor", "uses vim")
    edited = json.loads(hilo("memory", "edit", str(fact["id"]), SECRET, "--json", *d).stdout)
    assert edited["action"] == "supersede" and edited["fact"]["value"] == SECRET
    human = hilo("memory", "forget", str(edited["fact"]["id"]), "--with-sources", *d)
    assert human.returncode == 0 and "Forgot" in human.stdout
    assert json.loads(hilo("memory", "facts", "--json", *d).stdout) == []
    again = hilo("memory", "forget", str(edited["fact"]["id"]), *d)
    assert again.returncode == 1 and "no current fact" in again.stderr
    out = data_dir / "export.jsonl"
    assert hilo("export", str(out), "--format", "jsonl", *d).returncode == 0
    exported = out.read_text() if out.is_file() else "".join(
        p.read_text() for p in out.rglob("*") if p.is_file())
    assert "Rua das Flores" not in exported and "uses vim" not in exported


def _told(writer, config, session: str, text: str, reply: str) -> tuple[int, int]:
    """The person says `text` and the model answers `reply`: their events' ids."""
    said = append_event(writer, config, "ana", session, "user", text, origin="typed")
    answered = append_event(writer, config, "ana", session, "assistant", reply, origin="model")
    return said.id, answered.id


def test_forget_with_sources_leaves_the_text_in_no_file_nor_in_a_backup_made_after(
        writer, config, tmp_path):
    """The database file, its write-ahead log and shared memory, and a backup: none holds
    the forgotten value, its key, the message it came from or the reply that repeated it."""
    for n in range(200):  # other memory around it, so the pages it sat in are reused
        _told(writer, config, "older", f"Note {n}: the tomatoes need water", "Noted.")
    said, repeated = _told(writer, config, "s1", "My locker code is zanzibar7731",
                           "Got it: your locker code is zanzibar7731.")
    _told(writer, config, "s1", "And the bike is blue", "Noted, a blue bike.")
    written = writer.submit(lambda con: store_fact(
        con, "ana", "fact", "locker zanzibar", "locker code is zanzibar7731", source="agent",
        worker="distill", source_event_id=said))
    gone = forget(writer, "ana", written.fact_id, with_sources=True)
    assert gone.events == 2 and gone.wal_truncated  # the message and the reply repeating it
    report = backup(config, tmp_path / "after.sqlite3")
    files = [*writer.path.parent.glob(writer.path.name + "*"), report.dest]
    assert len(files) >= 2
    for path in files:
        assert b"zanzibar" not in path.read_bytes(), path.name
    # What was not forgotten is all there.
    assert [c for (c,) in rows(writer, "SELECT content FROM events WHERE session_id = 's1'")] \
        == ["And the bike is blue", "Noted, a blue bike."]


def test_forget_with_sources_removes_what_summed_the_sources_up(writer, config):
    """A card and a diary entry made from the forgotten message go too; the card's other
    messages are compacted anew, and the session's diary is written again."""
    said, _ = _told(writer, config, "s1", "My locker code is zanzibar7731", "Noted.")
    others = _told(writer, config, "s1", "The bike is blue", "Noted, a blue bike.")
    card = writer.submit(lambda con: add_card(con, "ana", NewCard(
        "s1", "The user gave the locker code zanzibar7731 and a bike colour.", "locker",
        said, others[-1], 4), worker="compact"))
    writer.submit(lambda con: link_to_card(con, "ana", [said, *others], card))
    writer.submit(lambda con: add_diary_entry(con, "ana", "s1", "Locker zanzibar7731 noted.",
                                              is_extractive=False, worker="diary"))
    written = writer.submit(lambda con: store_fact(
        con, "ana", "fact", "locker code", "zanzibar7731", source="agent", worker="distill",
        source_event_id=said))
    forget(writer, "ana", written.fact_id, with_sources=True)
    assert rows(writer, "SELECT count(*) FROM context_cards") == [(0,)]
    assert rows(writer, "SELECT count(*) FROM diary") == [(0,)]
    assert rows(writer, "SELECT compacted, card_id FROM events WHERE id IN (?, ?)", *others) == [
        (0, None), (0, None)]
    dump = json.dumps(rows(writer, "SELECT * FROM memory_log"))
    assert "zanzibar" not in dump


def test_a_reply_that_does_not_repeat_the_source_stays(writer, config):
    said, _ = _told(writer, config, "s1", "My locker code is zanzibar7731", "Good morning!")
    written = writer.submit(lambda con: store_fact(
        con, "ana", "fact", "locker code", "zanzibar7731", source="agent", worker="distill",
        source_event_id=said))
    assert forget(writer, "ana", written.fact_id, with_sources=True).events == 1
    assert rows(writer, "SELECT content FROM events") == [("Good morning!",)]


def test_rebuild_hashes_the_key_a_fact_forgotten_before_kept(writer, config):
    _, written = learn(writer, config, f"I {SECRET}", SECRET, key="flat on rua das flores")
    forget(writer, "ana", written.fact_id)
    # As a forget before keys were forgotten too left it.
    writer.submit(lambda con: con.execute("UPDATE facts SET key = 'flat on rua das flores'"))
    assert rebuild(config).forgotten_keys == 1
    assert "flores" not in json.dumps(rows(writer, "SELECT * FROM facts")).casefold()
    assert learn(writer, config, f"Again: I {SECRET}", SECRET,
                 key="flat on rua das flores")[1].action == "tombstoned"
