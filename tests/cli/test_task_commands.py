"""`hilo tasks …` as a user types it."""

from __future__ import annotations

import json
import re

from app.cli import main


def run(capsys, *argv: str, code: int = 0) -> str:
    assert main(list(argv)) == code
    captured = capsys.readouterr()
    return captured.out if code == 0 else captured.err


def test_add_echoes_the_schedule_in_words_then_lists_it(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    out = run(capsys, "tasks", "add", "every weekday at 9", "summarise yesterday", *d)
    assert "Runs at 09:00, Monday through Friday, UTC; next:" in out
    listed = json.loads(run(capsys, "tasks", "list", "--json", *d))
    assert [(t["cron_expr"], t["prompt"], t["source"]) for t in listed] == [
        ("0 9 * * 1-5", "summarise yesterday", "cli")]


def test_pause_resume_and_remove(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    run(capsys, "tasks", "add", "cada lunes a las 8", "revisar los backups", "--name", "backups", *d)
    run(capsys, "tasks", "pause", "backups", *d)
    assert json.loads(run(capsys, "tasks", "list", "--json", *d))[0]["is_paused"] is True
    run(capsys, "tasks", "resume", "backups", *d)
    assert json.loads(run(capsys, "tasks", "list", "--json", *d))[0]["is_paused"] is False
    run(capsys, "tasks", "rm", "backups", *d)
    assert json.loads(run(capsys, "tasks", "list", "--json", *d)) == []


def test_trust_and_untrust_round_trip(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    run(capsys, "tasks", "add", "every day at 9", "check the disk", "--name", "disk", *d)
    assert json.loads(run(capsys, "tasks", "list", "--json", *d))[0]["is_trusted"] is False

    trusted = json.loads(run(capsys, "tasks", "trust", "disk", "--json", *d))
    assert (trusted["name"], trusted["is_trusted"]) == ("disk", True)
    assert json.loads(run(capsys, "tasks", "list", "--json", *d))[0]["is_trusted"] is True
    assert run(capsys, "tasks", "untrust", "disk", *d) == "Untrusted disk\n"
    assert json.loads(run(capsys, "tasks", "list", "--json", *d))[0]["is_trusted"] is False
    assert "no scheduled task named" in run(capsys, "tasks", "trust", "nope", *d, code=1)


def test_add_trusted_stays_the_owners_way_to_trust_at_once(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    added = json.loads(run(capsys, "tasks", "add", "every day at 9", "check the disk",
                           "--trusted", "--json", *d))
    assert added["is_trusted"] is True


def test_a_schedule_it_cannot_understand_is_refused_with_examples(data_dir, capsys):
    err = run(capsys, "tasks", "add", "whenever I feel like it", "x", "--data-dir",
              str(data_dir), code=1)
    assert "could not understand" in err and "every weekday at 18:30" in err
    assert "cada lunes a las 8" in err


def test_run_now_stores_the_reply_in_the_tasks_session(data_dir, capsys, fake_ollama, monkeypatch):
    monkeypatch.setenv("HILO_LLM_URL", fake_ollama.url)
    fake_ollama.script_chat("Backups look fine.")
    d = ["--data-dir", str(data_dir)]
    run(capsys, "tasks", "add", "every day at 9", "check the backups", *d)
    result = json.loads(run(capsys, "tasks", "run", "1", "--json", *d))
    assert result["status"] == "done" and result["reply"] == "Backups look fine."
    log = json.loads(run(capsys, "tasks", "log", "1", "--json", *d))
    assert [(e["role"], e["content"]) for e in log["events"]] == [
        ("system", "check the backups"), ("assistant", "Backups look fine.")]


def test_a_bad_zone_is_refused_in_one_short_line(data_dir, capsys):
    for argv in (["every day at 9", "x"], ["remind me to stretch in 30 seconds"]):
        err = run(capsys, "tasks", "add", *argv, "--tz", "Mars/Olympus", "--data-dir",
                  str(data_dir), code=1)
        assert err == ('hilo tasks: "Mars/Olympus" is not a time zone: name one as in '
                       '"Europe/Madrid" or "America/New_York"\n')


def test_one_sentence_holds_the_schedule_and_the_prompt(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    soon = json.loads(run(capsys, "tasks", "add", "remind me to stretch in 30 seconds",
                          "--json", *d))
    assert (soon["original_schedule"], soon["prompt"], soon["is_oneshot"]) == (
        "in 30 seconds", "remind me to stretch", True)
    weekly = json.loads(run(capsys, "tasks", "add", "every monday at 8 plan the week",
                            "--json", *d))
    assert (weekly["cron_expr"], weekly["prompt"]) == ("0 8 * * 1", "plan the week")
    err = run(capsys, "tasks", "add", "water the plants", *d, code=1)
    assert err == ('hilo tasks: found no schedule in "water the plants": give the schedule '
                   'and the prompt as two arguments, e.g. "in 30 seconds" "remind me to '
                   'stretch"\n')


def test_a_schedule_alone_asks_what_the_task_should_do(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    for schedule in ("every day at 9", "tomorrow at 9", "in 10 minutes", "cada lunes a las 8"):
        err = run(capsys, "tasks", "add", schedule, *d, code=1)
        assert err == (f'hilo tasks: what should the task do? give a prompt after the '
                       f'schedule: "{schedule}" "water the plants"\n')
    assert json.loads(run(capsys, "tasks", "list", "--json", *d)) == []


def test_a_refusal_is_one_short_line_per_mistake(data_dir, capsys):
    err = run(capsys, "tasks", "add", "every blue moon", "water the plants", "--data-dir",
              str(data_dir), code=1)
    first, *examples = err.splitlines()
    assert first == ('hilo tasks: could not understand "blue moon" in "every blue moon": '
                     'not a day, a time or an interval')
    assert examples and all(len(line) <= 90 for line in examples)


def test_tasks_list_says_each_next_run_once_in_local_time_and_who_added_it(data_dir, capsys):
    d = ["--data-dir", str(data_dir)]
    run(capsys, "tasks", "add", "every day at 9", "water the plants", "--tz", "Europe/Madrid",
        *d)
    listed = run(capsys, "tasks", "list", *d)

    assert "T09:00" not in listed and "Z" not in listed  # no UTC time stamps
    assert listed.count("next") == 1
    assert re.search(r"next: \d{4}-\d\d-\d\d 09:00 \(\w+day\)\n", listed), listed
    assert listed.splitlines()[0].endswith("added at this machine (hilo tasks add)")
