"""`hilo memory …`: what Hilo knows, for people and (with --json) for scripts."""

from __future__ import annotations

import json

from app.cli import main
from app.memory import set_profile, upsert_fact


def seed(writer):
    def write(con):
        set_profile(con, "ana", "name", "Ana", source="agent", worker="test")
        upsert_fact(con, "ana", "preference", "editor", "uses vim", source="agent", worker="test")
        upsert_fact(con, "ana", "preference", "editor", "uses helix", source="agent", worker="test")
        upsert_fact(con, "bob", "fact", "pet", "has a dog called Pixel", source="agent",
                    worker="test")
    writer.submit(write)


def run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_profile_and_facts_as_json(writer, data_dir, capsys):
    seed(writer)
    profile = json.loads(run(capsys, "memory", "profile", "--user", "ana", "--json",
                             "--data-dir", str(data_dir)))
    assert [(p["key"], p["value"]) for p in profile] == [("name", "Ana")]
    facts = json.loads(run(capsys, "memory", "facts", "--user", "ana", "--json",
                           "--data-dir", str(data_dir)))
    assert [f["value"] for f in facts] == ["uses helix"]
    history = json.loads(run(capsys, "memory", "facts", "--user", "ana", "--history", "--json",
                             "--data-dir", str(data_dir)))
    assert {f["value"] for f in history} == {"uses helix", "uses vim"}


def test_search_with_explain_shows_stream_ranks(writer, data_dir, capsys):
    seed(writer)
    out = run(capsys, "memory", "search", "which", "editor?", "--user", "ana", "--explain",
              "--json", "--data-dir", str(data_dir))
    hits = json.loads(out)
    assert hits[0]["text"] == "preference · editor: uses helix"
    assert hits[0]["explain"]["ranks"]["bm25"] == 1


def test_one_user_never_sees_another_users_memory(writer, data_dir, capsys):
    seed(writer)
    out = run(capsys, "memory", "search", "dog", "Pixel", "--user", "ana", "--json",
              "--data-dir", str(data_dir))
    assert json.loads(out) == []


def test_missing_database_is_a_clear_error(tmp_path, capsys):
    assert main(["memory", "profile", "--data-dir", str(tmp_path / "none")]) == 1
    assert "hilo init" in capsys.readouterr().err


def test_reembed_backfills_every_owner_for_the_configured_model(writer, data_dir, capsys,
                                                                fake_ollama, monkeypatch):
    seed(writer)
    monkeypatch.setenv("HILO_LLM_URL", fake_ollama.url)
    doc = json.loads(run(capsys, "memory", "reembed", "--json", "--data-dir", str(data_dir)))
    # The two current facts (the superseded one and profile keys are not embedded).
    assert doc["model"] == "nomic-embed-text" and doc["embedded"] == 2 and doc["remaining"] == 0
    again = json.loads(run(capsys, "memory", "reembed", "--json", "--data-dir", str(data_dir)))
    assert again["embedded"] == 0  # resumable: nothing left to do


def test_the_json_says_which_memory_came_from_outside(writer, data_dir, capsys):
    writer.submit(lambda con: (
        upsert_fact(con, "ana", "fact", "release", "v2 is out", source="agent", worker="test",
                    from_outside=True),
        set_profile(con, "ana", "name", "Ana", source="user", worker="user")))
    facts = json.loads(run(capsys, "memory", "facts", "--user", "ana", "--json",
                           "--data-dir", str(data_dir)))
    assert [(f["key"], f["from_outside"]) for f in facts] == [("release", True)]
    profile = json.loads(run(capsys, "memory", "profile", "--user", "ana", "--json",
                             "--data-dir", str(data_dir)))
    assert [(p["key"], p["from_outside"]) for p in profile] == [("name", False)]
