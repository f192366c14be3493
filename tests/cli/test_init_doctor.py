"""`hilo init` and `hilo doctor`, run as a user runs them: the installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HILO = [sys.executable, "-m", "app.cli"]


def hilo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    full_env.update(env or {})
    return subprocess.run([*HILO, *args], capture_output=True, text=True, env=full_env,
                          timeout=60)


@pytest.fixture
def model_env(fake_ollama) -> dict[str, str]:
    return {"HILO_LLM_URL": fake_ollama.url}


def test_init_creates_a_usable_data_directory(tmp_path):
    data = tmp_path / "hilo-data"
    result = hilo("init", "--data-dir", str(data))
    assert result.returncode == 0, result.stderr
    assert (data / "memory.sqlite3").exists()
    assert "<!--" in (data / "MEMORY.md").read_text()
    from app.db import available_migrations

    assert f"schema {available_migrations()[-1].number}" in result.stdout


def test_init_twice_changes_nothing_and_keeps_memory_md(tmp_path):
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    (data / "MEMORY.md").write_text("I am Ana.\n")
    again = hilo("init", "--data-dir", str(data), "--json")
    report = json.loads(again.stdout)
    assert report["migrations_applied"] == [] and report["wrote_memory_md"] is False
    assert (data / "MEMORY.md").read_text() == "I am Ana.\n"


def test_data_dir_from_environment(tmp_path):
    data = tmp_path / "from-env"
    assert hilo("init", env={"HILO_DATA_DIR": str(data)}).returncode == 0
    assert (data / "memory.sqlite3").exists()


def test_doctor_on_a_fresh_directory_is_all_ok(tmp_path, model_env):
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    result = hilo("doctor", "--data-dir", str(data), "--json", env=model_env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert report["ok"] is True
    for name in ("data directory", "schema version", "integrity",
                 "full-text index events_fts", "free disk", "model server", "chat model",
                 "terminal sandbox"):
        assert statuses[name] == "OK", (name, report)


def test_doctor_on_a_corrupted_database_fails_and_says_how_to_recover(tmp_path, model_env):
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    db = data / "memory.sqlite3"
    db.write_bytes(b"this is not a database, it was overwritten" * 100)
    result = hilo("doctor", "--data-dir", str(data), env=model_env)
    assert result.returncode == 1
    assert "FAIL" in result.stdout and "backup" in result.stdout


def test_doctor_on_a_damaged_page_fails(tmp_path, model_env):
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    db = data / "memory.sqlite3"
    raw = bytearray(db.read_bytes())
    # Keep page 1 (header and schema) intact; break the b-tree page type of the others.
    for offset in range(4096, len(raw), 4096):
        raw[offset] = 0xA5
    db.write_bytes(bytes(raw))
    result = hilo("doctor", "--data-dir", str(data), "--json", env=model_env)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["ok"] is False
    assert any(c["status"] == "FAIL" and "backup" in c["fix"] for c in report["checks"])


def test_doctor_without_a_data_directory_says_run_init(tmp_path, model_env):
    result = hilo("doctor", "--data-dir", str(tmp_path / "missing"), env=model_env)
    assert result.returncode == 1
    assert "hilo init" in result.stdout


def test_doctor_fails_when_the_model_server_is_down(tmp_path):
    from tests.fake_ollama import unused_loopback_url

    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    result = hilo("doctor", "--data-dir", str(data), "--json",
                  env={"HILO_LLM_URL": unused_loopback_url()})
    report = json.loads(result.stdout)
    server = next(c for c in report["checks"] if c["name"] == "model server")
    assert result.returncode == 1 and report["ok"] is False and server["status"] == "FAIL"
    assert "ollama serve" in server["detail"] and "chat cannot work" in server["fix"]


def test_doctor_fails_when_the_chat_model_is_not_pulled(tmp_path, fake_ollama, model_env):
    fake_ollama.models = ["nomic-embed-text"]
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    result = hilo("doctor", "--data-dir", str(data), "--json", env=model_env)
    report = json.loads(result.stdout)
    chat = next(c for c in report["checks"] if c["name"] == "chat model")
    assert result.returncode == 1 and report["ok"] is False and chat["status"] == "FAIL"
    assert "ollama pull gemma3:4b" in chat["fix"]


def test_doctor_warns_when_the_terminal_has_no_sandbox(tmp_path, model_env):
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    bin_dir = tmp_path / "bin"  # the Python that runs hilo, and no bwrap
    bin_dir.mkdir()
    result = hilo("doctor", "--data-dir", str(data), "--json",
                  env={**model_env, "PATH": str(bin_dir)})
    report = json.loads(result.stdout)
    sandbox = next(c for c in report["checks"] if c["name"] == "terminal sandbox")
    assert result.returncode == 0 and sandbox["status"] == "WARN"
    assert sandbox["detail"].startswith("the terminal is off: bubblewrap (bwrap) is not "
                                        "installed")


def test_doctor_says_an_imported_memory_md_waits_for_the_owner(tmp_path, model_env):
    data = tmp_path / "d"
    hilo("init", "--data-dir", str(data))
    (data / "MEMORY.imported.md").write_text("# From the old laptop\n")
    result = hilo("doctor", "--data-dir", str(data), "--json", env=model_env)
    memory_md = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "MEMORY.md")
    assert memory_md["status"] == "WARN" and "MEMORY.imported.md" in memory_md["detail"]
    assert "hilo memory accept-import" in memory_md["fix"]
    accepted = hilo("memory", "accept-import", "--data-dir", str(data))
    assert accepted.returncode == 0, accepted.stderr
    assert "is now the imported one" in accepted.stdout
    assert (data / "MEMORY.md").read_text() == "# From the old laptop\n"
    again = hilo("memory", "accept-import", "--data-dir", str(data))
    assert again.returncode == 1 and "no imported MEMORY.md waits" in again.stderr
