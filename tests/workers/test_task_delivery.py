"""A scheduled task's reply reaches the person (issue 15): printed in a running `hilo
chat` and as "while you were away" at its next start, POSTed to a webhook with retries,
shown as a desktop notification where there is one; `hilo tasks add` says where."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.datadir import DataDir
from app.db import connect_readonly
from app.tasks.delivery import RunReport, has_undelivered
from app.tasks.runs import task_runs
from app.tasks.store import add_task
from app.turn.agent import Agent
from app.turn.chat import ChatService
from tests.cli.support import leave, rows
from tests.cli.test_messages import hilo
from workers.notify import Notification, NotifyFailed, deliver_run, post_webhook
from workers.scheduler import run_due_tasks, scheduler_tick

UTC = UTC
USER = "default"
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def as_task(service: ChatService) -> Agent:
    """The worker's runner of scheduled tasks over `service`."""
    return Agent(service, surface="task")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Hook:
    """A loopback HTTP server standing in for ntfy, Slack or any JSON webhook: records
    each POST and answers with the scripted statuses (then 200)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.received: list[Received] = []
        self.statuses = list(statuses or [])
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.received.append(Received(self.path, dict(self.headers), body))
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hilo-topic"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    yield server
    server.close()


@pytest.fixture
def live_config(config, fake_ollama):
    return config.replace(llm={"url": fake_ollama.url}, notify={"desktop": False})


def tick(config, writer, at: datetime) -> list:
    """One scheduler tick as the worker runs it, with delivery and no pauses between
    webhook attempts."""
    with ChatService(config, writer=writer) as service:
        return scheduler_tick(config, writer, chat_service=as_task(service), clock=lambda: at,
                              deliver=lambda r: deliver_run(config, writer, r, sleep=lambda s: None))


def reader(config):
    return connect_readonly(DataDir.of(config).memory_db)


# -- the webhook -------------------------------------------------------------------------------


def test_an_ntfy_webhook_gets_the_reply_with_the_task_as_title(writer, live_config, fake_ollama, hook):
    config = live_config.replace(notify={"webhook_url": hook.url, "webhook_kind": "ntfy"})
    task = add_task(writer, config, "every day at 9", "Remind me to walk Nilo", name="walk Nilo",
                    now=NOW, source="cli").task
    fake_ollama.script_chat("Time to walk Nilo!")
    [result] = tick(config, writer, NOW + timedelta(hours=9))
    assert result.status == "done"
    [post] = hook.received
    assert post.path == "/hilo-topic" and post.body.decode() == "Time to walk Nilo!"
    assert post.headers["Title"] == "Hilo: walk Nilo"
    [run] = task_runs(reader(config), USER, task.id)
    assert run.notified_at is not None and run.notify_error is None


@pytest.mark.parametrize("kind", ["slack", "json"])
def test_slack_and_json_webhooks_get_json(writer, live_config, fake_ollama, hook, kind):
    config = live_config.replace(notify={"webhook_url": hook.url, "webhook_kind": kind})
    add_task(writer, config, "every day at 9", "check the backups", now=NOW, source="cli")
    fake_ollama.script_chat("Backups look fine.")
    tick(config, writer, NOW + timedelta(hours=9))
    [post] = hook.received
    body = json.loads(post.body)
    if kind == "slack":
        assert body == {"text": "*Hilo: check the backups*\nBackups look fine."}
    else:
        assert (body["name"], body["status"], body["reply"]) == (
            "check the backups", "done", "Backups look fine.")


def test_a_failing_webhook_is_retried_then_the_failure_shows_in_tasks_log(
        writer, live_config, fake_ollama, hook, data_dir):
    hook.statuses = [503, 503, 503]
    config = live_config.replace(notify={"webhook_url": hook.url, "webhook_attempts": 3})
    task = add_task(writer, config, "every day at 9", "check the backups", now=NOW, source="cli").task
    fake_ollama.script_chat("Backups look fine.")
    [result] = tick(config, writer, NOW + timedelta(hours=9))
    assert result.status == "done"  # the run itself is not failed by its delivery
    assert len(hook.received) == 3
    done = hilo("tasks", "log", str(task.id), "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "not delivered: webhook ntfy http://127.0.0.1:" in done.stdout
    assert "failed after 3 attempts: HTTP 503" in done.stdout


def test_a_webhook_that_recovers_is_delivered_once(writer, live_config, fake_ollama, hook):
    hook.statuses = [500]
    config = live_config.replace(notify={"webhook_url": hook.url})
    task = add_task(writer, config, "every day at 9", "x", now=NOW, source="cli").task
    tick(config, writer, NOW + timedelta(hours=9))
    assert len(hook.received) == 2
    [run] = task_runs(reader(config), USER, task.id)
    assert run.notified_at is not None and run.notify_error is None


def test_webhook_backoff_grows_and_is_bounded(writer, live_config, hook):
    hook.statuses = [500] * 10
    pauses: list[float] = []
    settings = live_config.replace(notify={"webhook_url": hook.url, "webhook_attempts": 4}).notify
    note = Notification("Hilo: x", "y", RunReport(1, 1, USER, "x", "done", "y", None, None))
    with pytest.raises(NotifyFailed, match="after 4 attempts"):
        post_webhook(settings, note, sleep=pauses.append)
    assert pauses == [1.0, 2.0, 4.0] and len(hook.received) == 4


# -- the desktop -------------------------------------------------------------------------------


def fake_notify_send(folder: Path) -> Path:
    """A notify-send that writes its arguments, one per line, to a file."""
    folder.mkdir()
    record = folder / "shown.txt"
    script = folder / "notify-send"
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done >> "{record}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return record


def test_a_desktop_notification_is_shown_with_notify_send(
        writer, live_config, fake_ollama, tmp_path, monkeypatch):
    record = fake_notify_send(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    config = live_config.replace(notify={"desktop": True})
    add_task(writer, config, "every day at 9", "Remind me to walk Nilo", name="walk Nilo", now=NOW, source="cli")
    fake_ollama.script_chat("Time to walk Nilo!")
    tick(config, writer, NOW + timedelta(hours=9))
    assert record.read_text().splitlines() == ["--app-name=Hilo", "Hilo: walk Nilo",
                                               "Time to walk Nilo!"]


def test_without_notify_send_the_run_is_delivered_quietly(writer, live_config, fake_ollama,
                                                          tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    config = live_config.replace(notify={"desktop": True})
    add_task(writer, config, "every day at 9", "x", now=NOW, source="cli")
    [result] = tick(config, writer, NOW + timedelta(hours=9))
    assert result.status == "done"


# -- where replies go, said when the task is added -----------------------------------------------


def test_tasks_add_says_where_replies_will_go(data_dir, tmp_path):
    done = hilo("tasks", "add", "in 1 minute", "walk Nilo", "--data-dir", str(data_dir),
                env={"HILO_NOTIFY_WEBHOOK_URL": "https://ntfy.sh/secret-topic",
                     "HILO_NOTIFY_DESKTOP": "false"})
    assert done.returncode == 0, done.stderr
    assert "Replies: hilo chat, webhook ntfy https://ntfy.sh/…\n" in done.stdout
    assert "secret-topic" not in done.stdout  # a topic or a token in the path is a secret
    fake_notify_send(tmp_path / "bin")
    done = hilo("tasks", "add", "in 1 minute", "walk Nilo", "--data-dir", str(data_dir), "--json",
                env={"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert json.loads(done.stdout)["replies"] == ["hilo chat", "desktop notification"]


# -- hilo chat ---------------------------------------------------------------------------------


def run_a_task(writer, config, fake_ollama, prompt: str, reply: str) -> int:
    """Add a one-shot and run it as the worker would; its task id."""
    task = add_task(writer, config, "in 1 minute", prompt, now=NOW, source="cli").task
    fake_ollama.script_chat(reply)
    with ChatService(config, writer=writer) as service:
        [result] = run_due_tasks(config, writer, as_task(service), NOW + timedelta(minutes=2))
    assert result.status == "done"
    return task.id


@pytest.mark.slow
def test_chat_shows_what_ran_while_you_were_away_once(start_chat, writer, live_config,
                                                      fake_ollama, data_dir):
    run_a_task(writer, live_config, fake_ollama, "remind me to walk Nilo", "Time to walk Nilo!")
    child = start_chat()
    # The prompt came after the greeting; the replies were printed just before it.
    assert "While you were away:" in child.before and "Time to walk Nilo!" in child.before
    assert "remind me to walk Nilo" in child.before  # the task's name
    leave(child)
    assert not has_undelivered(reader(live_config), USER)
    child = start_chat()
    assert "While you were away" not in child.before
    leave(child)


@pytest.mark.slow
def test_a_run_that_ends_during_a_chat_is_printed_at_the_idle_prompt(
        start_chat, writer, live_config, fake_ollama, data_dir):
    child = start_chat()
    run_a_task(writer, live_config, fake_ollama, "remind me to walk Nilo", "Time to walk Nilo!")
    started = time.monotonic()
    child.expect("Time to walk Nilo!")  # no key pressed: the idle prompt looked
    assert time.monotonic() - started < 10
    [(delivered,)] = rows(data_dir, "SELECT delivered_at FROM task_runs")
    assert delivered is not None
    leave(child)


def test_tasks_run_prints_the_reply_so_chat_does_not_repeat_it(writer, live_config, fake_ollama,
                                                               data_dir):
    task = add_task(writer, live_config, "every day at 9", "check the backups", now=NOW, source="cli").task
    fake_ollama.script_chat("Backups look fine.")
    done = hilo("tasks", "run", str(task.id), "--data-dir", str(data_dir),
                env={"HILO_LLM_URL": fake_ollama.url})
    assert done.returncode == 0, done.stderr
    assert "Backups look fine." in done.stdout
    assert not has_undelivered(reader(live_config), USER)
