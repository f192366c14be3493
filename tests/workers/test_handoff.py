"""The chat's hand-off to the workers: injected into the turn, onto the queue by job name,
and the turn and the producers load nothing of the jobs."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import app
from app.model.errors import ModelUnreachable
from app.turn.chat import ChatService, NoHandoff
from tests.fake_ollama import unused_loopback_url
from tests.workers.support import (
    REPO_ROOT,
    consumer_env,
    worker_config,
)
from workers import jobs
from workers.handoff import queue_handoff
from workers.queue import configure, failed_jobs, huey


class RecordingHandoff:
    """Stands in for the queue: records what the turn hands off."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def after_reply(self, user_id: str, session_id: str, event_ids: list[int],
                    sent: object = None) -> bool:
        self.calls.append(("after_reply", user_id, session_id, list(event_ids)))
        return True

    def session_ended(self, user_id: str, session_id: str) -> bool:
        self.calls.append(("session_ended", user_id, session_id))
        return True

    def model_activity(self) -> None:
        return None


def test_a_turn_hands_its_events_and_the_session_end_to_the_injected_handoff(
        config, data_dir, fake_ollama):
    handoff = RecordingHandoff()
    with ChatService(config.replace(llm={"url": fake_ollama.url}), handoff=handoff) as service:
        outcome = service.start_turn("ana", "s1", "hello there").run()
        service.end_session("ana", "s1")
    assert handoff.calls == [
        ("after_reply", "ana", "s1", [outcome.user_event.id, outcome.reply_event.id]),
        ("session_ended", "ana", "s1")]


def test_a_model_that_cannot_start_still_hands_off_the_users_message(config, data_dir):
    handoff = RecordingHandoff()
    down = config.replace(llm={"url": unused_loopback_url()}, embedder={"kind": "none"})
    with ChatService(down, handoff=handoff) as service:
        with pytest.raises(ModelUnreachable):
            service.start_turn("ana", "s1", "remember that I use helix")
        [(stored,)] = service.reader().execute("SELECT id FROM events").fetchall()
    assert handoff.calls == [("after_reply", "ana", "s1", [stored])]


def test_without_a_handoff_the_reconcile_sweep_finds_the_turn(config, data_dir, fake_ollama,
                                                             bound_queue):
    cfg = worker_config(config, fake_ollama).replace(embedder={"kind": "none"})
    runner = bound_queue(cfg)
    with ChatService(cfg) as service:
        assert isinstance(service.handoff, NoHandoff)
        service.start_turn("ana", "s1", "hello there").run()
    assert huey.pending_count() == 0
    runner.reconcile(0.0)
    assert [t.name for t in huey.pending()] == ["distill"]


def test_the_queue_handoff_enqueues_distill_and_diary_by_name(config, data_dir):
    handoff = queue_handoff(config)
    assert handoff.after_reply("ana", "s1", [1, 2]) is True
    assert handoff.session_ended("ana", "s1") is True
    assert [(t.name, t.args) for t in huey.pending()] == [
        ("distill", ("ana", "s1", [1, 2])), ("diary", ("ana", "s1"))]


def test_a_job_taken_where_no_consumer_started_fails_saying_so(config, data_dir):
    configure(config)
    jobs.diary("ana", "s1")
    huey.execute(huey.dequeue())
    [failure] = failed_jobs()
    assert "no job runner in this process" in failure.error and "hilo worker" in failure.error


def _modules_after(config, code: str) -> dict:
    """Run `code` in a fresh interpreter; the app and workers modules it loaded, and the
    queue's signal receivers."""
    probe = code + (
        "\nimport json, sys\nfrom workers.queue import huey\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.startswith(('app', "
        "'workers'))), 'receivers': sum(map(len, huey._signal.receivers.values()))}))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=consumer_env(config),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_enqueueing_from_a_front_end_loads_no_job_code_and_counts_no_jobs(config, data_dir):
    loaded = _modules_after(config, (
        "import app.api, app.cli.repl\n"
        "from app.config import load_config\n"
        "from workers.handoff import queue_handoff\n"
        "assert queue_handoff(load_config()).after_reply('ana', 's1', [1])\n"))
    job_code = {"workers.runner", "app.learn.distill", "app.learn.compact", "app.learn.diary_entry",
                "app.learn.consolidate", "app.learn.embed", "workers.reconcile", "workers.scheduler"}
    assert not job_code & set(loaded["modules"])
    assert loaded["receivers"] == 0  # the job-metrics signal handler is the consumer's


def test_the_turn_and_the_core_import_nothing_of_the_queue(config):
    """Every wing below the queue (the store, tasks, model, recall, the turn and learning),
    imported whole, loads no module of workers/."""
    above_the_queue = ("app.api", "app.cli", "app.http", "app.mcp", "app.ops", "app.serve", "app.ui")
    below = [info.name for info in pkgutil.walk_packages(app.__path__, "app.")
             if not info.name.startswith(above_the_queue)]
    code = "".join(f"import {name}\n" for name in below)
    loaded = _modules_after(config, code + "import sys\nqueue = [m for m in sys.modules "
                                           "if m.startswith('workers')]\nassert not queue, queue\n")
    assert {"app.turn.chat", "app.learn.distill", "app.recall.vectors"} <= set(loaded["modules"])


def test_hilo_queue_knows_the_jobs_by_name_without_a_worker(config, data_dir):
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "queue", "revoke", "--task", "diary", "--json"],
        cwd=REPO_ROOT, env=consumer_env(config), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"revoked": [], "not_found": []}
