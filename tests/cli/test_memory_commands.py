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
        set_profile(con, "ana", "name", "Ana", source="user", worker="user",
                    from_outside=False)))  # as `hilo memory set-profile` writes it
    facts = json.loads(run(capsys, "memory", "facts", "--user", "ana", "--json",
                           "--data-dir", str(data_dir)))
    assert [(f["key"], f["from_outside"]) for f in facts] == [("release", True)]
    profile = json.loads(run(capsys, "memory", "profile", "--user", "ana", "--json",
                             "--data-dir", str(data_dir)))
    assert [(p["key"], p["from_outside"]) for p in profile] == [("name", False)]


def test_as_of_a_text_that_is_not_a_time_is_refused_in_one_line(writer, data_dir, capsys):
    seed(writer)
    assert main(["memory", "as-of", "not a date", "--data-dir", str(data_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ('hilo memory as-of: "not a date" is not a time: give one like '
                            "2026-11-30T12:00:00Z or a date like 2026-11-30\n")


def test_as_of_reads_as_words_and_as_json_only_with_json(writer, data_dir, capsys):
    seed(writer)
    d = ["--user", "ana", "--data-dir", str(data_dir)]
    human = run(capsys, "memory", "as-of", "2999-01-01T00:00:00+01:00", *d)
    assert "name: Ana" in human and "(preference) editor: uses helix" in human
    assert "{" not in human
    doc = json.loads(run(capsys, "memory", "as-of", "2999-01-01", "--json", *d))
    assert doc["as_of"] == "2999-01-01T00:00:00.000000Z"
    assert doc["profile"] == {"name": "Ana"}
    assert [f["value"] for f in doc["facts"]] == ["uses helix"]


def test_as_of_a_time_between_two_values_shows_the_first_as_it_was_then(writer, data_dir,
                                                                        capsys):
    seed(writer)
    d = ["--user", "ana", "--data-dir", str(data_dir)]
    history = json.loads(run(capsys, "memory", "facts", "--history", "--json", *d))
    first = next(f for f in history if f["value"] == "uses vim")
    between = first["created_at"]  # current from then until "uses helix" superseded it
    assert between < first["superseded_at"]

    human = run(capsys, "memory", "as-of", between, *d)
    doc = json.loads(run(capsys, "memory", "as-of", between, "--json", *d))

    assert f"#{first['id']} [{between[:10]}] (preference) editor: uses vim" in human
    assert "superseded" not in human and "helix" not in human
    (fact,) = doc["facts"]
    assert (fact["value"], fact["superseded_at"], fact["deleted_at"]) == ("uses vim", None, None)


def test_a_forgotten_facts_key_is_gone_from_as_of_and_history(writer, data_dir, capsys):
    writer.submit(lambda con: upsert_fact(con, "ana", "fact", "allergy", "allergic to nuts",
                                          source="agent", worker="test"))
    d = ["--user", "ana", "--data-dir", str(data_dir)]
    before = json.loads(run(capsys, "memory", "as-of", "2999-01-01", "--json", *d))
    (fact,) = before["facts"]
    run(capsys, "memory", "forget", str(fact["id"]), *d)
    # As of a time before the forget, too: the key itself was part of what was forgotten.
    for when in ("2999-01-01", fact["created_at"]):
        assert "allergy" not in run(capsys, "memory", "as-of", when, "--json", *d)
    assert "allergy" not in run(capsys, "memory", "facts", "--history", "--json", *d)


def test_add_and_edit_say_what_they_did_in_words(data_dir, capsys):
    d = ["--user", "ana", "--data-dir", str(data_dir)]
    added = run(capsys, "memory", "add", "preference", "editor", "uses vim", *d)
    assert added.startswith("Added: #") and added.rstrip().endswith("editor: uses vim")
    fact_id = added.split("#")[1].split()[0]
    edited = run(capsys, "memory", "edit", fact_id, "uses helix", *d)
    assert edited.startswith("Updated (the old value is kept as history): #")
    assert "Insert" not in added + edited and "Supersede" not in added + edited


def test_edit_and_forget_of_a_missing_fact_say_it_the_same_way(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    assert main(["memory", "edit", "99", "new value", *d]) == 1
    edit_error = capsys.readouterr().err
    assert main(["memory", "forget", "99", *d]) == 1
    forget_error = capsys.readouterr().err
    assert edit_error == forget_error == (
        "hilo memory: no current fact 99: list the facts to see the current ids\n")


def test_set_profile_sets_a_key_the_profile_then_shows(data_dir, capsys):
    d = ["--user", "ana", "--data-dir", str(data_dir)]
    assert run(capsys, "memory", "set-profile", "City", " Madrid ", *d) == "Added: city: Madrid\n"
    assert run(capsys, "memory", "set-profile", "city", "Lisbon", *d) == "Updated: city: Lisbon\n"
    assert run(capsys, "memory", "profile", *d) == "city: Lisbon\n"
