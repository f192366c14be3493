"""`hilo serve` answers its first chat without loading what a chat does not need:
FastAPI and pydantic (Hilo's documented API), the memory page (Jinja2), the Redis
client of a SQLite queue, the queue's metrics. Each is loaded when first asked for, and
then works as before.

Each test starts a fresh interpreter, builds the app as `hilo serve` does, sends
requests, and reads `sys.modules` after each step."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path

from app.model.transport import tls_context
from tests.fake_ollama import FakeOllama

REPO = Path(__file__).resolve().parents[2]

# Builds the app as `hilo serve` does, then sends each request and probes the models once
# more; prints, as JSON, the status of each request, the modules loaded after importing
# the server, after building the app and after each request, and how many times the CA
# certificates were read.
PROBE = """
import json, ssl, sys
steps = json.loads(sys.argv[1])
loaded = {}
ca_reads = []
read_cas = ssl.SSLContext.load_verify_locations
ssl.SSLContext.load_verify_locations = lambda *a, **k: ca_reads.append(1) or read_cas(*a, **k)
import app.serve.server
loaded["import"] = sorted(sys.modules)
from app.config import load_config
config = load_config()
app = app.serve.server.create_app(config)
loaded["create_app"] = sorted(sys.modules)
from starlette.testclient import TestClient
statuses = []
with TestClient(app, base_url="http://127.0.0.1") as client:
    for method, path in steps:
        body = {"model": config.llm.chat_model, "stream": False,
                "messages": [{"role": "user", "content": "hello"}]}
        response = client.request(method, path, json=body if method == "POST" else None,
                                  follow_redirects=False)
        statuses.append(response.status_code)
        loaded[f"{method} {path}"] = sorted(sys.modules)
    from app.model.probe import probe_models
    probe_models(config)  # as `hilo serve` does at start, and /health every 15 s
print(json.dumps({"statuses": statuses, "loaded": loaded, "ca_reads": len(ca_reads)}))
"""


def start(fake: FakeOllama, data_dir: Path, *steps: tuple[str, str],
          **env: str) -> tuple[list[int], dict[str, set[str]], int]:
    """(each request's status, the modules loaded after each step, the CA certificates'
    reads) in a fresh `hilo serve`-like process."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(steps)], cwd=REPO, capture_output=True,
        text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(data_dir), "HILO_DATA_DIR": str(data_dir),
             "HILO_LLM_URL": fake.url, **env})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    loaded = {step: set(names) for step, names in result["loaded"].items()}
    return result["statuses"], loaded, result["ca_reads"]


def of(package: str, modules: set[str]) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


CHAT = ("POST", "/api/chat")
OPENAI_CHAT = ("POST", "/v1/chat/completions")
HEALTH = ("GET", "/health")


def test_chat_clients_are_answered_before_fastapi_is_loaded(fake_ollama: FakeOllama,
                                                            tmp_path: Path) -> None:
    statuses, loaded, _ = start(fake_ollama, tmp_path, HEALTH, CHAT, OPENAI_CHAT,
                                ("GET", "/api/tags"), ("GET", "/metrics"),
                                ("GET", "/memory/profile"), ("GET", "/openapi.json"))

    assert statuses == [200] * 7
    before_the_documented_api = loaded["GET /metrics"]
    assert of("fastapi", before_the_documented_api) == set()
    assert of("pydantic", before_the_documented_api) == set()
    assert "fastapi" in loaded["GET /memory/profile"]


def test_the_memory_page_is_loaded_on_its_first_request_not_at_start(
        fake_ollama: FakeOllama, tmp_path: Path) -> None:
    statuses, loaded, _ = start(fake_ollama, tmp_path, HEALTH, CHAT, ("GET", "/ui"),
                             ("GET", "/ui/static/hilo.css"))

    assert statuses == [200, 200, 200, 200]
    assert of("jinja2", loaded["POST /api/chat"]) == set()
    assert of("app.ui", loaded["POST /api/chat"]) <= {"app.ui"}
    assert "jinja2" in loaded["GET /ui"] and "app.ui.memory" in loaded["GET /ui"]


def test_a_sqlite_queue_never_loads_the_redis_client(fake_ollama: FakeOllama,
                                                     tmp_path: Path) -> None:
    statuses, loaded, _ = start(fake_ollama, tmp_path, HEALTH, CHAT, ("GET", "/metrics"))

    assert statuses == [200, 200, 200]
    assert of("huey", loaded["import"]) == set()  # bound to the configured queue first
    assert "huey" in loaded["create_app"]  # the hand-off checks the queue file at start
    assert not any(of("redis", modules) for modules in loaded.values())


def test_the_queue_metrics_are_loaded_on_the_first_scrape(fake_ollama: FakeOllama,
                                                          tmp_path: Path) -> None:
    _, loaded, _ = start(fake_ollama, tmp_path, HEALTH, CHAT, ("GET", "/metrics"))

    assert "workers.queue_metrics" not in loaded["POST /api/chat"]
    assert "workers.inspection" not in loaded["POST /api/chat"]
    assert "workers.queue_metrics" in loaded["GET /metrics"]


def test_an_http_model_server_never_has_the_ca_certificates_read(
        fake_ollama: FakeOllama, tmp_path: Path) -> None:
    """The chat's client, each /health probe's and the start's announcement speak plain
    HTTP to it: nothing to verify."""
    statuses, _, ca_reads = start(fake_ollama, tmp_path, HEALTH, CHAT)

    assert statuses == [200, 200]
    assert ca_reads == 0


def test_https_model_clients_share_the_ca_certificates_and_http_ones_trust_none() -> None:
    verifying = tls_context("https://models.example")
    plain = tls_context("http://127.0.0.1:11434")

    assert tls_context("HTTPS://other.example") is verifying  # read once per process
    assert verifying.verify_mode == ssl.CERT_REQUIRED and verifying.cert_store_stats()["x509_ca"]
    # Should TLS ever start on a plain-HTTP client, it fails: no certificate is trusted.
    assert plain.verify_mode == ssl.CERT_REQUIRED and plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0


def test_a_first_chat_loads_neither_http2_nor_the_edit_distance(
        fake_ollama: FakeOllama, tmp_path: Path) -> None:
    """h2 (when installed): Hilo's clients speak HTTP/1.1; rapidfuzz: only a client's copy
    of a reply that differs from the stored one needs it."""
    statuses, loaded, _ = start(fake_ollama, tmp_path, HEALTH, CHAT)

    assert statuses == [200, 200]
    assert of("h2", loaded["POST /api/chat"]) == set()
    assert of("rapidfuzz", loaded["POST /api/chat"]) == set()


def test_keyword_search_alone_never_loads_numpy(fake_ollama: FakeOllama,
                                                tmp_path: Path) -> None:
    """With `[embedder] kind = "none"` nothing is ever embedded: the embedders (and numpy)
    are not loaded, and /health still reports the models."""
    statuses, loaded, _ = start(fake_ollama, tmp_path, HEALTH, CHAT, HEALTH,
                                HILO_EMBEDDER_KIND="none")

    assert statuses == [200, 200, 200]
    assert not any(of("numpy", modules) for modules in loaded.values())
    assert not any("app.model.embedders" in modules for modules in loaded.values())
