"""Nothing Hilo keeps holds a secret in clear: a token or a password in a tool call's
arguments is redacted in the events (memory.sqlite3), in the chat kept for the workers
to continue, and in what a failed job records (queue.sqlite3)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from app.model.replies import SentChat
from tests.api.support import HiloServer
from tests.fake_ollama import FakeOllama
from tests.workers.support import (
    drain,
    scripted_queue,
)
from workers.chat_activity import ChatActivity, last_chat
from workers.hooks import describe_failure
from workers.queue import huey, record_failure

TOKEN = "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"
PASSWORD = "Plum-Tree-4417!"
SECRETS = (TOKEN, PASSWORD)


def kept_files(data_dir: Path) -> dict[str, bytes]:
    """Every database file Hilo keeps, with its write-ahead log."""
    return {path.name: path.read_bytes() for path in sorted(data_dir.glob("*.sqlite3*"))}


def assert_kept_nowhere(data_dir: Path) -> None:
    files = kept_files(data_dir)
    assert {"memory.sqlite3", "queue.sqlite3"} <= set(files)
    for name, content in files.items():
        for secret in SECRETS:
            assert secret.encode() not in content, f"{secret!r} is in {name}"


def calls(api: str) -> list[dict]:
    """A tool call carrying both secrets, as each API writes it."""
    arguments = {"command": f"git push https://x:{TOKEN}@github.com/a/b",
                 "password": PASSWORD, "token": TOKEN}
    if api == "openai":
        return [{"id": "call_1", "type": "function",
                 "function": {"name": "terminal", "arguments": json.dumps(arguments)}}]
    return [{"function": {"name": "terminal", "arguments": arguments}}]


@pytest.mark.parametrize("api, path", [("ollama", "/api/chat"),
                                       ("openai", "/v1/chat/completions")])
def test_a_secret_in_a_tool_calls_arguments_is_kept_nowhere(config, data_dir, bound_queue,
                                                            fake_ollama: FakeOllama, api, path):
    cfg = scripted_queue(config, fake_ollama, bound_queue)
    server = HiloServer(cfg, fake_ollama).start()
    history = [{"role": "user", "content": "Push the branch"},
               {"role": "assistant", "content": "", "tool_calls": calls(api)},
               {"role": "tool", "content": "pushed", **({"tool_call_id": "call_1"}
                                                        if api == "openai" else {})},
               {"role": "user", "content": "Thanks, what did you run?"}]
    try:
        with httpx.Client(timeout=30) as client:
            reply = client.post(f"{server.url}{path}", json={
                "model": cfg.llm.chat_model, "messages": history, "stream": False})
            assert reply.status_code == 200
        kept = last_chat(huey, cfg.llm.url)  # the chat kept for the workers to continue
        assert kept is not None and "[REDACTED:" in json.dumps(kept.sent.body)
        drain()  # the workers learn the conversation
    finally:
        server.stop()
    assert_kept_nowhere(data_dir)


def test_the_kept_chat_keeps_its_shape_with_the_secrets_redacted(config, data_dir, bound_queue,
                                                                fake_ollama):
    cfg = scripted_queue(config, fake_ollama, bound_queue)
    body = {"model": "m", "messages": [
        {"role": "assistant", "content": "", "tool_calls": calls("openai")},
        {"role": "assistant", "content": "", "tool_calls": calls("ollama")}]}
    ChatActivity(huey, cfg.llm.url).served("default", "s1", SentChat("/api/chat", body, "ok"))
    kept = last_chat(huey, cfg.llm.url)
    assert kept is not None
    openai, ollama = (m["tool_calls"][0]["function"]["arguments"]
                      for m in kept.sent.body["messages"])
    assert json.loads(openai)["password"] == ollama["password"] == "[REDACTED:password]"
    assert ollama["token"] == "[REDACTED:token]"
    assert ollama["command"] == "git push https://x:[REDACTED:github_token]@github.com/a/b"
    assert_kept_nowhere(data_dir)


def test_a_failed_jobs_record_holds_no_secret(config, data_dir, bound_queue, fake_ollama):
    scripted_queue(config, fake_ollama, bound_queue)

    class Task:  # what describe_failure reads of a task
        args = ("default", "s1")
        kwargs = {"attempt": 3}

    error = ValueError(f"the model's output is not usable: {{'password': '{PASSWORD}', "
                       f"'token': '{TOKEN}'}}")
    record_failure("task-1", error, Task())
    described = describe_failure(Task(), {"error": repr(error), "traceback": f"... {TOKEN}"})
    assert not any(secret in json.dumps(described) for secret in SECRETS)
    assert_kept_nowhere(data_dir)
