"""Telling the user what is missing: the start line of `hilo serve` (and the worker),
/health degraded with the reason, `hilo doctor` checking the embedder, and a missing
embedding model said once, not every turn."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from app.log import configure_logging
from app.model.client import ModelClient
from app.model.embedders import OllamaEmbedder
from app.model.probe import PROBE_TIMEOUT_SECONDS, announce_models, probe_models
from app.recall.query import make_query
from tests.api.support import serve
from tests.conftest import REPO_ROOT
from tests.fake_ollama import unused_loopback_url

HILO = str(Path(sys.executable).with_name("hilo"))
running = contextlib.contextmanager(serve)
WITHOUT_EMBEDDINGS = ["gemma3:4b"]


def hilo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env.update(extra)
    return env


def log_lines(run) -> list[dict]:
    """The JSON log lines written while `run()` runs."""
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    try:
        run()
    finally:
        configure_logging("info", "json", stream=sys.stderr)
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


# -- the probe ------------------------------------------------------------------------------


def test_with_every_model_pulled_nothing_is_degraded(config, fake_ollama):
    report = probe_models(config.replace(llm={"url": fake_ollama.url}))
    assert report.server_ok and not report.degraded and report.reasons == []
    assert [(m.role, m.name, m.ready) for m in report.models] == [
        ("chat", "gemma3:4b", True), ("distill", "gemma3:4b", True),
        ("embedding", "nomic-embed-text", True)]


def test_a_missing_embedding_model_is_a_reason(config, fake_ollama):
    fake_ollama.models = WITHOUT_EMBEDDINGS
    report = probe_models(config.replace(llm={"url": fake_ollama.url}))
    assert report.degraded
    assert report.reasons == ["embedding model nomic-embed-text: not pulled, search uses "
                              "keywords only — run `ollama pull nomic-embed-text`"]


def test_a_model_server_that_is_down_is_the_reason(config):
    report = probe_models(config.replace(llm={"url": unused_loopback_url()}))
    assert report.degraded and not report.server_ok
    assert len(report.reasons) == 1 and "ollama serve" in report.reasons[0]


@pytest.mark.slow
def test_a_silent_model_server_delays_the_start_by_the_short_timeout_only(config):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        report = announce_models(config.replace(llm={"url": url, "timeout_seconds": 120.0}))
        waited = time.monotonic() - started
    assert report.degraded and not report.server_ok
    assert waited < PROBE_TIMEOUT_SECONDS + 1.5


def test_the_start_line_names_the_server_and_each_model(config, fake_ollama):
    fake_ollama.models = WITHOUT_EMBEDDINGS
    lines = log_lines(lambda: announce_models(config.replace(llm={"url": fake_ollama.url})))
    assert len(lines) == 1
    line = lines[0]
    assert line["event"] == "models.degraded" and line["level"] == "warning"
    assert line["server"] == f"{fake_ollama.url} answers"
    assert line["chat"] == line["distill"] == "gemma3:4b (ready)"
    assert "nomic-embed-text (not pulled" in line["embedding"]
    assert "ollama pull nomic-embed-text" in line["embedding"]


# -- hilo serve and /health -----------------------------------------------------------------


@pytest.mark.slow
def test_hilo_serve_prints_the_model_line_at_start(data_dir, fake_ollama):
    fake_ollama.models = WITHOUT_EMBEDDINGS
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [HILO, "serve", "--data-dir", str(data_dir), "--port", str(port)], cwd=REPO_ROOT,
        env=hilo_env(HILO_LLM_URL=fake_ollama.url, HILO_LOGGING_FORMAT="json"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[dict] = []

    def read() -> None:
        for line in server.stderr:
            if '"models.' in line:
                found.append(json.loads(line))
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        reader.join(timeout=30)
        assert found, "no model line at start"
        assert found[0]["server"] == f"{fake_ollama.url} answers"
        assert "ollama pull nomic-embed-text" in found[0]["embedding"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def test_health_is_ok_with_every_model(config, data_dir, fake_ollama):
    with running(config, fake_ollama) as server:
        body = server.client().get("/health").json()
        assert body["status"] == "ok" and "reasons" not in body
        assert body["models"]["embedding"] == "nomic-embed-text (ready)"


def test_health_is_degraded_with_the_reason_when_the_embedder_is_missing(config, data_dir,
                                                                        fake_ollama):
    fake_ollama.models = WITHOUT_EMBEDDINGS
    with running(config, fake_ollama) as server:
        response = server.client().get("/health")
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "degraded"
        assert any("ollama pull nomic-embed-text" in r for r in body["reasons"])


def test_health_is_degraded_when_the_model_server_is_down(config, data_dir):
    with running(config.replace(llm={"url": unused_loopback_url()})) as server:
        body = server.client().get("/health").json()
        assert body["status"] == "degraded"
        assert body["reasons"][0].startswith("model server: ")


# -- hilo doctor and the embedder -----------------------------------------------------------


def doctor_checks(data_dir: Path, url: str) -> dict[str, dict]:
    result = subprocess.run([HILO, "doctor", "--data-dir", str(data_dir), "--json"],
                            capture_output=True, text=True, timeout=60,
                            env=hilo_env(HILO_LLM_URL=url))
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def test_doctor_checks_the_embedder(data_dir, fake_ollama):
    checks = doctor_checks(data_dir, fake_ollama.url)
    assert checks["embedder"]["status"] == "OK"
    assert checks["embedder"]["detail"] == "nomic-embed-text"
    assert fake_ollama.bodies("/api/embed")[-1]["model"] == "nomic-embed-text"


def test_doctor_warns_when_the_embedding_model_is_not_pulled(data_dir, fake_ollama):
    fake_ollama.models = WITHOUT_EMBEDDINGS
    checks = doctor_checks(data_dir, fake_ollama.url)
    assert checks["embedder"]["status"] == "WARN"
    assert "ollama pull nomic-embed-text" in checks["embedder"]["detail"]
    assert "keywords" in checks["embedder"]["fix"]


# -- said once, not every turn --------------------------------------------------------------


def test_a_missing_embedding_model_is_said_once_and_search_goes_on_by_keywords(config,
                                                                              fake_ollama, recall):
    model = f"nomic-embed-text-{uuid.uuid4().hex[:8]}"  # new to this process
    client = ModelClient.from_config(config.replace(llm={"url": fake_ollama.url}))
    embedder = OllamaEmbedder(client, model)
    queries = []
    lines = log_lines(lambda: queries.extend(make_query("ana", f"turn {n}", embedder,
                                                        recall=recall)
                                             for n in range(3)))
    client.close()
    assert all(q.vector is None for q in queries)
    warnings = [line for line in lines if line["level"] == "warning"]
    assert [w["event"] for w in warnings] == ["embedder.unavailable"]
    assert warnings[0]["model"] == model and f"ollama pull {model}" in warnings[0]["error"]
    assert "keywords" in warnings[0]["effect"]


@pytest.mark.parametrize("missing", [True, False])
def test_the_worker_start_can_say_the_same_line(config, fake_ollama, missing):
    if missing:
        fake_ollama.models = WITHOUT_EMBEDDINGS
    lines = log_lines(lambda: announce_models(config.replace(llm={"url": fake_ollama.url})))
    assert [line["event"] for line in lines] == (
        ["models.degraded"] if missing else ["models.ready"])
