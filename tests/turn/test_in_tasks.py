"""Scheduled tasks that use tools, run by the real consumer (`hilo worker`) in its own
process against the fake model server: a task that is not trusted runs only commands
under an allowed prefix and asks nobody; a trusted one runs what its model asks, killed
at the timeout and cut at the output cap; a tool's error goes back to the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.config import Config
from app.tasks.store import add_task
from app.writer import Writer
from tests.fake_ollama import FakeOllama, Reply
from tests.workers.support import (
    query,
    scripted_model,
    scripted_queue,
    wait_until,
)
from workers.queue import configure

pytestmark = pytest.mark.slow

USER = "ana"
# The model asked to do each task calls this tool; its reply then says what it saw.
CALLS = {
    "Make a file": ("terminal", {"command": "touch untrusted-file"}),
    "Say hello": ("terminal", {"command": "echo hello"}),
    "Clean up": ("terminal", {"command": "touch trusted-file"}),
    "Wait for it": ("terminal", {"command": "sleep 30"}),
    "Count to a million": ("terminal", {"command": "seq 1 1000000"}),
    "Forget fact 99": ("forget", {"fact_id": 99}),
}


def model(body: dict[str, Any]) -> Any:
    """Call the task's tool; once its result is in, answer with the result's last line."""
    messages = body.get("messages")
    if not messages:
        return scripted_model(body)  # the workers' own requests: distill, cards, diary
    last = messages[-1]
    if last["role"] == "tool":
        return f"Seen: {last['content'].splitlines()[-1]}"
    name, arguments = CALLS[last["content"]]
    return Reply(tool_calls=[{"name": name, "arguments": arguments}])


@pytest.fixture
def cfg(config: Config, data_dir: Path, fake_ollama: FakeOllama, tmp_path: Path) -> Config:
    cfg = scripted_queue(config, fake_ollama, configure, workers=2)
    fake_ollama.responder = model
    (tmp_path / "work").mkdir()
    return cfg.replace(tools={"terminal_workdir": str(tmp_path / "work"),
                              "terminal_allow_rules": ("echo *",),
                              "terminal_timeout_seconds": 1.0, "terminal_output_chars": 1000})


def due_task(writer: Writer, cfg: Config, prompt: str, trusted: bool = False) -> str:
    """A task the user added at the machine, due now (made an hour ago, every 15 minutes);
    its session."""
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    added = add_task(writer, cfg, "every 15 minutes", prompt, user_id=USER, trusted=trusted,
                     now=an_hour_ago, source="cli", from_outside=False)
    return added.task.session_id


def run_tasks(cfg: Config, consumers, log: Path, sessions: list[str]) -> dict[str, list[tuple]]:
    """Start the worker; when every task's session ends with an answer, (role, content) of
    each session's events."""
    worker = consumers(cfg, log)

    def answered() -> dict[str, list[tuple]] | None:
        runs = {s: query(cfg, "SELECT role, content, tool_calls_json FROM events "
                              "WHERE session_id = ? ORDER BY id", (s,)) for s in sessions}
        done = all(r and r[-1][0] == "assistant" and r[-1][2] is None for r in runs.values())
        return {s: [row[:2] for row in r] for s, r in runs.items()} if done else None

    runs = wait_until(answered, 60, "every task's answer")
    assert worker.terminate() == 0
    return runs


def test_a_task_runs_only_the_commands_the_user_allowed(cfg, writer, consumers, tmp_path):
    untrusted = due_task(writer, cfg, "Make a file")
    allowed = due_task(writer, cfg, "Say hello")
    trusted = due_task(writer, cfg, "Clean up", trusted=True)
    runs = run_tasks(cfg, consumers, tmp_path / "worker.log", [untrusted, allowed, trusted])

    assert runs[untrusted][2:] == [
        ("tool", "error: not run: no allow rule covers `touch untrusted-file` and this task is "
                 "not trusted; the user can allow it (hilo terminal allow, [tools] "
                 "terminal_allow_rules) or mark the task trusted (hilo tasks add --trusted)"),
        ("assistant", "Seen: error: not run: no allow rule covers `touch untrusted-file` and this "
                      "task is not trusted; the user can allow it (hilo terminal allow, [tools] "
                      "terminal_allow_rules) or mark the task trusted (hilo tasks add "
                      "--trusted)")]
    assert not (tmp_path / "work" / "untrusted-file").exists()
    assert runs[allowed][2:] == [("tool", "$ echo hello\nhello\n[exit status 0]"),
                                 ("assistant", "Seen: [exit status 0]")]
    assert runs[trusted][2] == ("tool", "$ touch trusted-file\n[exit status 0]")
    assert (tmp_path / "work" / "trusted-file").exists()
    # The record: instructions, the model's call, its result, the answer.
    assert [role for role, _ in runs[trusted]] == ["system", "assistant", "tool", "assistant"]


def test_a_tasks_timeout_output_cap_and_tool_errors(cfg, writer, consumers, tmp_path):
    slow = due_task(writer, cfg, "Wait for it", trusted=True)
    loud = due_task(writer, cfg, "Count to a million", trusted=True)
    failing = due_task(writer, cfg, "Forget fact 99")
    runs = run_tasks(cfg, consumers, tmp_path / "worker.log", [slow, loud, failing])

    assert runs[slow][2] == ("tool", "$ sleep 30\n[killed after 1 s: the command did not "
                                     "finish in time]")
    output = runs[loud][2][1]
    assert output.startswith("$ seq 1 1000000\n1\n2\n3\n") and len(output) < 1200
    assert output.endswith("[… output cut: 6888896 bytes in all, the first 1000 characters "
                           "shown]\n[exit status 0]")
    assert runs[failing][2:] == [
        ("tool", "error: there is no current fact #99: recall shows the facts' ids"),
        ("assistant", "Seen: error: there is no current fact #99: recall shows the facts' ids")]
