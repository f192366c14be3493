"""Forgetting, as a user means it: the value is gone from everywhere, the log keeps only
that something was forgotten, and no worker learns the same statement again."""

from __future__ import annotations

import json
import time

import numpy as np

from app.db import connect_readonly
from app.events import append_event
from app.memory import list_facts, store_fact, upsert_fact
from app.memory.forget import forget_fact
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
