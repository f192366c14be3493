"""A changed value stays changed: whatever order learning reaches a conversation's turns
in, the value said last is the current one, and what was said before it is its history.

The real consumer learns a session's latest turns first, its oldest chunk after them
(app/learn/session.py): the chunk that holds the old value is learned after the turn
that changed it.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from app.config import Config
from tests.workers.support import (
    REPO_ROOT,
    add_turn,
    consumer_env,
    handoff,
    hilo_command,
    query,
    scalar,
    scripted_queue,
    wait_until,
)
from workers.queue import configure

pytestmark = pytest.mark.slow

IDLE = 0.3  # [queue] chat_idle_seconds


@pytest.fixture
def cfg(config, data_dir, fake_ollama) -> Config:
    # Ten events over a threshold of eight: the oldest four are a chunk, learned last.
    return scripted_queue(config.replace(memory={"compaction_threshold": 8, "chunk_size": 4},
                                         queue={"chat_idle_seconds": IDLE}),
                          fake_ollama, configure)


def hilo_memory_facts(cfg: Config, *extra: str) -> list[dict]:
    done = subprocess.run(hilo_command("memory", "facts", "--user", "ana", "--json", *extra),
                          cwd=REPO_ROOT, env=consumer_env(cfg), capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)


def test_an_older_chunk_learned_after_the_change_leaves_the_newer_value_current(
        cfg, writer, consumers, tmp_path):
    said = ["I use vim as my editor", "Remember code alpha1", "Remember code alpha2",
            "Remember code alpha3", "Actually, I use helix as my editor now"]
    for text in said:
        assert handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", text))
    worker = consumers(cfg, tmp_path / "worker.log")
    wait_until(lambda: scalar(cfg, "SELECT count(*) FROM context_cards") == 1
               and scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 0,
               60, "the session learned, its oldest chunk carded")
    # The chunk (vim) was learned after the latest turns (helix).
    assert [v for (v,) in query(cfg, "SELECT new_value FROM memory_log WHERE owner_kind = 'fact' "
                                     "AND new_value LIKE 'uses %' ORDER BY id")] == [
        "uses helix", "uses vim"]

    editor = [(f["key"], f["value"]) for f in hilo_memory_facts(cfg)
              if f["category"] == "preference"]
    assert editor == [("editor", "uses helix")]
    history = {f["value"]: f for f in hilo_memory_facts(cfg, "--history")
               if f["category"] == "preference"}
    assert set(history) == {"uses helix", "uses vim"}
    assert history["uses vim"]["superseded_at"] is not None
    assert worker.terminate() == 0
