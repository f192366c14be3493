"""`hilo queue` and the doctor's queue checks, on Huey's own storage, in both backends.

Each test builds a queue as a stopped worker leaves it: jobs pending, one scheduled for
later, two failed (one degraded after the model failed, one that raised), one done —
the jobs that ran were run in this process, one by one, as a consumer would run them.
The `hilo` group is run in this process on each test's config (click's CliRunner); one
test runs the installed command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from click.testing import CliRunner

from app.cli import hilo
from tests.fake_ollama import Fault
from tests.workers.support import (
    REPO_ROOT,
    add_turn,
    consumer_env,
    query,
    scripted_model,
    wait_until,
    worker_config,
)
from workers import hooks as queue_hooks
from workers import jobs as queue_jobs
from workers import runner
from workers.hooks import HEARTBEAT_KEY, new_task_id, task_id_time
from workers.queue import huey, try_lock

# -- helpers -----------------------------------------------------------------------------------


def hilo_queue(cfg, *argv: str) -> tuple[int, str, str]:
    """Run `hilo queue ARGV` in this process on `cfg`; (exit status, stdout, stderr)."""
    result = CliRunner().invoke(hilo, ["queue", *argv], obj=cfg, prog_name="hilo")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def as_json(cfg, *argv: str) -> tuple[int, dict]:
    status, out, _ = hilo_queue(cfg, *argv, "--json")
    return status, json.loads(out)  # exactly one document: json.loads rejects trailing data


def run_next() -> None:
    """What a consumer does with the next job: take it, run it (or move it to the schedule)."""
    task = huey.dequeue()
    assert task is not None
    huey.execute(task)


def run_pending() -> None:
    """Run what is pending (and what that enqueues); the scheduled job is an hour away."""
    while huey.pending_count():
        run_next()


@pytest.fixture(params=["sqlite", "redis"])
def cfg(request, config, data_dir, fake_ollama, bound_queue, monkeypatch):
    settings = {"max_attempts": 1}
    if request.param == "redis":
        settings.update(backend="redis", redis_url=request.getfixturevalue("redis_url"))
    cfg = worker_config(config, fake_ollama, **settings).replace(embedder={"kind": "none"})
    monkeypatch.setattr(queue_hooks, "_last_beat", (0, float("-inf")))
    bound_queue(cfg)
    fake_ollama.responder = scripted_model
    return cfg


@pytest.fixture
def jobs(cfg, writer, fake_ollama, monkeypatch) -> dict[str, str]:
    """The queue a stopped worker left; the ids of its jobs by role."""
    add_turn(writer, cfg, "ana", "s1", "Remember code alpha1")
    ids = {}
    # Done: ran and left nothing behind (no result is stored for None).
    ids["done"] = queue_jobs.embed("ana").id
    run_next()
    # Degraded: the model failed its only attempt; the extractive diary was written.
    fake_ollama.script_generate(Fault.http_500("model is loading"))
    ids["degraded"] = queue_jobs.diary("ana", "s1").id
    run_next()
    # Raised: a bug, recorded by Huey with its traceback.
    add_turn(writer, cfg, "ana", "s2", "Remember code alpha2")  # something to learn
    with monkeypatch.context() as patch:
        patch.setattr(runner, "learn_session", _broken_compact)
        ids["raised"] = queue_jobs.compact("ana", "s2").id
        run_next()
    # Scheduled: a retry an hour ahead, moved to the schedule by the worker.
    ids["scheduled"] = queue_jobs.diary.schedule(args=("ana", "s3"), delay=3600).id
    run_next()
    # Pending: never taken.
    ids["distill"] = queue_jobs.distill("ana", "s4", [1, 2]).id
    ids["diary"] = queue_jobs.diary("bob", "s5").id
    # The worker has stopped and never polled: no heartbeat (and the next poll writes one).
    huey.delete(HEARTBEAT_KEY)
    monkeypatch.setattr(queue_hooks, "_last_beat", (0, float("-inf")))
    return ids


def _broken_compact(*args, **kwargs):
    raise RuntimeError("disk on fire")


# -- status and listings -----------------------------------------------------------------------


def test_status_counts_every_kind_of_job_with_the_worker_stopped(cfg, jobs):
    code, doc = as_json(cfg, "status")
    assert code == 0
    assert doc["backend"] == cfg.queue.backend
    counts = (doc["pending"], doc["scheduled"], doc["failed"], doc["results"], doc["due"])
    assert counts == (2, 1, 2, 0, 2)
    assert doc["by_task"] == {
        "compact": {"pending": 0, "scheduled": 0, "failed": 1},
        "diary": {"pending": 1, "scheduled": 1, "failed": 1},
        "distill": {"pending": 1, "scheduled": 0, "failed": 0},
    }
    assert doc["oldest_pending"]["id"] == jobs["distill"] and doc["oldest_pending"]["task"] == "distill"
    assert 0 <= doc["oldest_pending"]["waiting_seconds"] < 60
    assert doc["worker"] == {"last_poll_at": None, "seconds_since_poll": None, "pid": None,
                             "host": None, "active": False}
    assert doc["locks"] == []  # compact released its lock although it raised

    code, out, _ = hilo_queue(cfg, "status")
    assert code == 0
    assert "Pending 2 (2 due; the oldest, distill, waiting" in out and "scheduled 1 · failed 2" in out
    assert "no worker has polled this queue — start one: hilo worker" in out
    assert "distill" in out and "hilo queue retry --all-failed" in out
    if cfg.queue.backend == "sqlite":
        assert str(cfg.data_dir / "queue.sqlite3") in out


def test_status_shows_a_polling_worker(cfg, jobs):
    assert huey.dequeue() is not None  # a worker polls (and takes a job)
    code, doc = as_json(cfg, "status")
    worker = doc["worker"]
    assert worker["active"] is True and worker["pid"] == os.getpid()
    assert worker["seconds_since_poll"] < 60
    _, out, _ = hilo_queue(cfg, "status")
    assert f"Worker: polled 0 s ago (pid {os.getpid()}" in out


def test_pending_lists_jobs_in_the_order_they_run_with_their_age(cfg, jobs):
    code, doc = as_json(cfg, "pending")
    assert code == 0 and doc["total"] == 2
    first, second = doc["jobs"]
    assert (first["id"], first["task"], first["args"]) == (
        jobs["distill"], "distill", ["ana", "s4", [1, 2]])
    assert (second["id"], second["task"], second["args"]) == (jobs["diary"], "diary", ["bob", "s5"])
    assert first["due"] is True and first["revoked"] is False and first["eta"] is None
    assert first["enqueued_at"].endswith("Z") and first["waiting_seconds"] >= 0

    assert as_json(cfg, "pending", "--task", "diary")[1]["total"] == 1
    limited = as_json(cfg, "pending", "--limit", "1")[1]
    assert limited["total"] == 2 and len(limited["jobs"]) == 1

    _, out, _ = hilo_queue(cfg, "pending")
    assert jobs["distill"] in out
    assert "learn facts from 2 messages of session s4, for ana" in out  # not its arguments
    assert "write the diary entry of session s5, for bob" in out
    assert first["purpose"] == "learn facts from 2 messages of session s4, for ana"


def test_scheduled_lists_jobs_waiting_for_their_time(cfg, jobs):
    code, doc = as_json(cfg, "scheduled")
    assert code == 0 and doc["total"] == 1
    [job] = doc["jobs"]
    assert (job["id"], job["task"], job["args"], job["due"]) == (
        jobs["scheduled"], "diary", ["ana", "s3"], False)
    assert job["eta"] > job["enqueued_at"] and job["waiting_seconds"] is None
    _, out, _ = hilo_queue(cfg, "scheduled")
    assert jobs["scheduled"] in out and ("(in 59 min" in out or "(in 1 h 0 min)" in out)


def test_failed_shows_task_arguments_error_traceback_and_attempts(cfg, jobs):
    code, doc = as_json(cfg, "failed")
    assert code == 0 and doc["total"] == 2
    failures = {f["id"]: f for f in doc["jobs"]}
    degraded, raised = failures[jobs["degraded"]], failures[jobs["raised"]]
    assert (degraded["task"], degraded["args"], degraded["attempts"], degraded["degraded"]) == (
        "diary", ["ana", "s1"], 1, True)
    assert "gave up on the model after 1 attempt(s)" in degraded["error"]
    assert degraded["traceback"] == "" and degraded["failed_at"].endswith("Z")
    assert (raised["task"], raised["args"], raised["attempts"], raised["degraded"]) == (
        "compact", ["ana", "s2"], 1, False)
    assert "disk on fire" in raised["error"]
    assert "Traceback (most recent call last)" in raised["traceback"]
    assert "RuntimeError: disk on fire" in raised["traceback"]

    _, out, _ = hilo_queue(cfg, "failed")
    assert jobs["degraded"] in out and jobs["raised"] in out
    assert "(fallback written)" in out and f"Traceback of {jobs['raised']} (compact):" in out
    assert "RuntimeError: disk on fire" in out
    # Errors read as sentences, not Python's repr.
    assert "JobDegraded(" not in out and "RuntimeError('" not in out
    assert degraded["error"].startswith("write the diary entry of session s1, for ana: gave up "
                                        "on the model")
    assert raised["error"] == ("an unexpected RuntimeError: disk on fire (a bug in Hilo: the "
                               "traceback says where)")


# -- steering ----------------------------------------------------------------------------------


def test_retry_re_enqueues_the_failed_task_with_its_arguments(cfg, jobs, writer):
    code, doc = as_json(cfg, "retry", jobs["raised"])
    assert code == 0 and doc["skipped"] == []
    [retried] = doc["retried"]
    assert retried["id"] == jobs["raised"] and retried["task"] == "compact"
    pending = as_json(cfg, "pending")[1]["jobs"]
    again = next(j for j in pending if j["id"] == retried["new_id"])
    assert again["task"] == "compact" and again["args"] == ["ana", "s2"] and again["kwargs"] == {}
    assert [f["id"] for f in as_json(cfg, "failed")[1]["jobs"]] == [jobs["degraded"]]

    code, out, _ = hilo_queue(cfg, "retry", "--all-failed")
    assert code == 0 and f"Retried {jobs['degraded']} (diary) as " in out
    assert as_json(cfg, "status")[1]["failed"] == 0
    # The retried jobs run (model and code fixed) and nothing fails any more.
    run_pending()
    assert as_json(cfg, "status")[1]["failed"] == 0
    assert query(cfg, "SELECT count(*) FROM diary WHERE session_id = 's1'") == [(1,)]

    code, out, err = hilo_queue(cfg, "retry", "no-such-id")
    assert code == 1 and "Skipped no-such-id: no failed job has this id" in out
    code, out, err = hilo_queue(cfg, "retry")
    assert code == 2 and "--all-failed" in err and out == ""
    assert hilo_queue(cfg, "retry", "--all-failed")[1].strip() == "No failed jobs to retry."


def test_revoke_one_job_then_a_worker_drops_it(cfg, jobs):
    code, doc = as_json(cfg, "revoke", jobs["diary"])
    assert code == 0 and doc["revoked"] == [{"id": jobs["diary"], "task": "diary", "where": "pending"}]
    assert as_json(cfg, "status")[1]["revoked"] == 1
    listed = {j["id"]: j["revoked"] for j in as_json(cfg, "pending")[1]["jobs"]}
    assert listed == {jobs["distill"]: False, jobs["diary"]: True}
    _, out, _ = hilo_queue(cfg, "pending")
    assert "revoked" in out

    run_pending()
    assert query(cfg, "SELECT count(*) FROM diary WHERE user_id = 'bob'") == [(0,)]  # never ran
    assert not [k for k in huey.all_results() if k.startswith("r:")]  # the flag went with it

    code, doc = as_json(cfg, "revoke", "no-such-id")
    assert code == 1 and doc["not_found"] == ["no-such-id"]


def test_revoke_a_task_flags_its_pending_and_scheduled_jobs_only(cfg, jobs):
    code, out, _ = hilo_queue(cfg, "revoke", "--task", "diary")
    assert code == 0
    assert f"Revoked {jobs['diary']} (diary, pending)" in out
    assert f"Revoked {jobs['scheduled']} (diary, scheduled)" in out
    assert as_json(cfg, "status")[1]["revoked"] == 2
    # A diary enqueued afterwards is not revoked: only the jobs that were waiting are.
    later = queue_jobs.diary("ana", "s1").id
    assert {j["id"]: j["revoked"] for j in as_json(cfg, "pending")[1]["jobs"]}[later] is False

    code, out, err = hilo_queue(cfg, "revoke", "--task", "nonsense")
    assert code == 1 and "no task is called 'nonsense'" in err and "distill" in err
    code, doc = as_json(cfg, "revoke", "--task", "nonsense")
    assert code == 1 and doc["ok"] is False and "nonsense" in doc["error"]


def test_flush_refuses_without_yes_then_empties_the_queue_keeping_worker_state(cfg, jobs):
    assert try_lock("compact:ana:s9")
    huey.put(runner.LAST_DECAY_KEY, "2026-01-01T00:00:00Z")
    code, out, err = hilo_queue(cfg, "flush")
    assert code == 2 and out == ""
    assert "refusing to flush without --yes: it would delete 2 pending and 1 scheduled jobs, " \
           "2 failure records" in err
    assert as_json(cfg, "status")[1]["pending"] == 2  # nothing deleted

    code, doc = as_json(cfg, "flush", "--yes")
    assert code == 0
    assert doc["flushed"] == {"pending": 2, "scheduled": 1, "failed": 2, "results": 0,
                              "revoke_flags": 0}
    assert "hilo.lock.compact:ana:s9" in doc["kept"] and runner.LAST_DECAY_KEY in doc["kept"]
    status = as_json(cfg, "status")[1]
    assert (status["pending"], status["scheduled"], status["failed"]) == (0, 0, 0)
    assert status["locks"] == ["compact:ana:s9"]
    assert huey.get(runner.LAST_DECAY_KEY, peek=True) == "2026-01-01T00:00:00Z"
    _, out, _ = hilo_queue(cfg, "flush", "--yes")
    assert "Flushed 0 pending and 0 scheduled jobs" in out


# -- the doctor --------------------------------------------------------------------------------


def _checks(cfg, now=None) -> dict:
    from app.ops.doctor import check_queue

    return {c.name: c for c in check_queue(cfg, now=now)}


def test_doctor_flags_a_stalled_worker(cfg, jobs):
    from app.ops.doctor import Status

    later = _checks(cfg, now=time.time() + 300)  # jobs due for 5 min, no worker ever polled
    assert later["queue worker"].status is Status.FAIL
    assert "2 jobs are due" in later["queue worker"].detail
    assert "no worker has ever polled" in later["queue worker"].detail
    assert "hilo worker" in later["queue worker"].fix
    assert _checks(cfg)["queue worker"].status is Status.WARN  # just enqueued: may be starting

    huey.dequeue()  # a worker polls
    assert _checks(cfg)["queue worker"].status is Status.OK
    stale = _checks(cfg, now=time.time() + 600)["queue worker"]  # …then died
    assert stale.status is Status.FAIL and "for 10 min" in stale.detail
    backlog = _checks(cfg, now=time.time() + 700)["queue backlog"]
    assert backlog.status is Status.WARN and "hilo worker" in backlog.fix


def test_doctor_flags_an_old_failure(cfg, jobs):
    from app.ops.doctor import Status

    now = _checks(cfg)
    assert now["failed jobs"].status is Status.OK and "2 in the last day" in now["failed jobs"].detail
    old = _checks(cfg, now=time.time() + 25 * 3600)["failed jobs"]
    assert old.status is Status.WARN and "2 failed, the oldest 25 h old" in old.detail
    assert "hilo queue failed" in old.fix and "hilo queue retry --all-failed" in old.fix
    assert now["queue"].status is Status.OK


# -- without a queue, and without Redis --------------------------------------------------------


def test_a_data_dir_without_a_queue_file_reads_as_empty_and_stays_so(config, data_dir, bound_queue):
    code, doc = as_json(config, "status")
    assert code == 0 and (doc["pending"], doc["failed"]) == (0, 0)
    assert as_json(config, "failed")[1] == {"total": 0, "jobs": []}
    code, out, _ = hilo_queue(config, "revoke", "--task", "diary")
    assert code == 0 and "No pending or scheduled diary jobs." in out
    assert as_json(config, "flush", "--yes")[1]["flushed"]["pending"] == 0
    assert not (config.data_dir / "queue.sqlite3").exists()
    from app.ops.doctor import Status, check_queue

    assert all(c.status is Status.OK for c in check_queue(config))


def test_an_unreachable_redis_is_an_error_that_says_what_to_do(config, data_dir, bound_queue):
    down = config.replace(queue={"backend": "redis", "redis_url": "redis://:secret@127.0.0.1:1/0"})
    code, out, err = hilo_queue(down, "status")
    assert code == 1 and out == ""
    assert "cannot reach the Redis queue at redis://:***@127.0.0.1:1/0" in err and "secret" not in err
    code, doc = as_json(down, "pending")
    assert code == 1 and doc["ok"] is False
    from app.ops.doctor import Status, check_queue

    [check] = check_queue(down)
    assert check.status is Status.FAIL and "redis" in check.fix


# -- the hooks ---------------------------------------------------------------------------------


def test_task_ids_carry_their_creation_time():
    at = 1_790_000_000.123
    task_id = new_task_id(at)
    assert uuid.UUID(task_id).version == 7 and abs(task_id_time(task_id) - at) < 0.001
    assert task_id_time(str(uuid.uuid4())) is None and task_id_time("not an id") is None
    before = time.time()
    assert before - 0.01 <= task_id_time(queue_jobs.distill.s("u", "s", [1]).id) <= time.time() + 0.01
    assert task_id_time(queue_jobs.reconcile_periodically.task_class().id) is not None


@pytest.mark.parametrize("cfg", ["sqlite"], indirect=True)
def test_a_running_consumer_writes_the_heartbeat(cfg, consumers, tmp_path):
    consumer = consumers(cfg, tmp_path / "worker.log")

    def polled():
        doc = as_json(cfg, "status")[1]["worker"]
        return doc["active"] and doc["pid"] == consumer.process.pid

    wait_until(polled, 30, "the consumer's heartbeat")
    # Stopping gracefully is tested in tests/workers/test_consumer.py; Huey installs its signal
    # handlers just after starting the worker threads, so the exit status is not ours here.
    consumer.terminate()


def test_hilo_queue_status_as_installed(cfg, jobs):
    result = subprocess.run([sys.executable, "-m", "app.cli", "queue", "status", "--json"],
                            cwd=REPO_ROOT, env=consumer_env(cfg), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["pending"], doc["scheduled"], doc["failed"]) == (2, 1, 2)
    assert doc["worker"]["active"] is False
