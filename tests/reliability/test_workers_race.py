"""Two `hilo worker` processes racing on the same queue: every job's effect happens once.

Both start together on a queue already holding the turns (so both start-up sweeps
re-enqueue the same undone work), then share it: each turn is distilled once (one fact
per code, never doubled), each chunk is compacted once (every compacted event is in
exactly one level-0 card, and no two cards share an event), and a compaction's model
call is never repeated for a chunk already carded.
"""

from __future__ import annotations

import pytest

from app.config import Config
from tests.workers.support import (
    query,
    scalar,
    scripted_queue,
    wait_until,
)
from tests.workers.test_consumer import (
    all_done,
    assert_nothing_missing_or_doubled,
    distilled_turns,
    queue_turns,
)
from workers.queue import configure

pytestmark = pytest.mark.slow

TURNS = 300
SESSIONS = 15
DEADLINE = 120.0


@pytest.fixture
def cfg(config, data_dir, fake_ollama) -> Config:
    cfg = scripted_queue(config, fake_ollama, configure, workers=4)
    fake_ollama.latency = 0.02  # long enough that both workers take jobs
    return cfg


def compaction_calls(fake) -> int:
    schemas = (str((r.body or {}).get("format") or (r.body or {}).get("response_format"))
               for r in fake.requests if isinstance(r.body, dict))
    return sum(1 for schema in schemas if "'summary'" in schema)


def test_two_workers_on_one_queue_do_each_job_once(cfg, writer, consumers, fake_ollama, tmp_path):
    queue_turns(cfg, writer, TURNS, SESSIONS)
    first = consumers(cfg, tmp_path / "worker-1.log")
    second = consumers(cfg, tmp_path / "worker-2.log")

    wait_until(lambda: all_done(cfg, TURNS), DEADLINE, "every turn distilled and compacted")
    wait_until(lambda: first.started() and second.started(), 30, "both workers to start")

    assert_nothing_missing_or_doubled(cfg, TURNS)
    assert distilled_turns(cfg) == TURNS
    # No event in two cards of level 0; each card's events are a chunk of one session.
    assert not query(cfg, "SELECT card_id FROM events WHERE card_id IS NOT NULL "
                          "GROUP BY id HAVING count(DISTINCT card_id) > 1")
    cards = scalar(cfg, "SELECT count(*) FROM context_cards WHERE level = 0")
    assert cards > 0
    assert compaction_calls(fake_ollama) == cards, "a chunk was compacted twice"
    assert first.terminate() == 0 and second.terminate() == 0
