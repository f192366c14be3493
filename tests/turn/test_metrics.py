"""/metrics content: Prometheus text that a Prometheus parser accepts, with the numbers
operators look at — queue depth and age, jobs by name and outcome, writer depth and
batches, context build and model call latency."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.turn.metrics import render
from tests.workers.support import (
    add_turn,
    drain,
    handoff,
    scripted_queue,
)
from workers.queue import huey
from workers.queue_metrics import JOB_METRICS, render_queue


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    cfg = scripted_queue(config, fake_ollama, bound_queue)
    return cfg


def scrape(config, writer) -> bytes:
    """What GET /metrics serves: this process's measurements and writer, then the queue."""
    return render(writer) + render_queue(config)


def samples(text: bytes) -> dict[tuple, float]:
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_parse_and_show_the_queue_and_the_writer(cfg, writer):
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha1"))
    before = samples(scrape(cfg, writer))
    assert before[("hilo_queue_jobs", (("state", "pending"),))] == 1
    assert before[("hilo_queue_up", ())] == 1
    assert ("hilo_writer_queue_depth", ()) in before
    assert before[("hilo_writer_commits_total", ())] >= 1

    drain()
    JOB_METRICS.flush(huey, force=True)
    after = samples(scrape(cfg, writer))
    assert after[("hilo_queue_jobs", (("state", "pending"),))] == 0
    assert after[("hilo_jobs_total", (("outcome", "done"), ("task", "distill")))] >= 1
    assert after[("hilo_job_duration_seconds_count", (("task", "distill"),))] >= 1


def test_a_turn_records_context_and_model_latency(cfg, fake_ollama):
    from app.turn.chat import ChatService

    with ChatService(cfg) as service:
        service.start_turn("ana", "s1", "hello there").run()
        text = scrape(cfg, service.writer)
    found = samples(text)
    assert found[("hilo_context_build_seconds_count", ())] >= 1
    assert found[("hilo_model_call_seconds_count", (("call", "chat"),))] >= 1


def test_model_errors_are_counted(cfg):
    from app.model.errors import ModelUnreachable
    from app.turn.chat import ChatService
    from tests.fake_ollama import unused_loopback_url

    down = cfg.replace(llm={"url": unused_loopback_url()}, embedder={"kind": "none"})
    with ChatService(down) as service:
        with pytest.raises(ModelUnreachable):
            service.start_turn("ana", "s1", "hello")
        found = samples(scrape(down, service.writer))
    assert found[("hilo_model_errors_total", (("call", "chat"), ("error", "ModelUnreachable")))] >= 1


def test_metrics_route_is_served_and_guarded_by_the_token(cfg):
    from fastapi.testclient import TestClient

    from app.serve import create_app

    with TestClient(create_app(cfg.replace(server={"token": "s3cret-token"}))) as client:
        assert client.get("/metrics").status_code == 401
        response = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert response.status_code == 200
    assert ("hilo_queue_up", ()) in samples(response.content)
