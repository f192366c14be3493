"""The first hour at the command line: the installed `hilo`, run as a process, fails with
one line a person can act on, never a traceback, and says what it did in words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HILO = str(Path(sys.executable).parent / "hilo")


def hilo(*args: str, env: dict[str, str] | None = None, shell: str | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess:
    """The installed `hilo`, importing this tree's code."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    full_env.update({"PYTHONPATH": str(REPO_ROOT), **(env or {})})
    if shell is not None:
        return subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True,
                              text=True, env=full_env, timeout=timeout)
    return subprocess.run([HILO, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def test_version_is_the_installed_packages():
    from importlib.metadata import version

    done = hilo("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"hilo {version('hilo')}"


def test_health_reports_the_same_version():
    from importlib.metadata import version

    from app.api.health import VERSION

    assert VERSION == version("hilo")


def test_a_listing_cut_short_by_head_is_no_error(config, writer):
    from app.tasks.store import add_task

    for i in range(40):  # more than a pipe holds
        add_task(writer, config, "every day at 9", f"task {i} " + "x" * 2000,
                 user_id=config.memory.user_id, source="cli")
    data_dir = config.data_dir
    done = hilo(shell=f"{HILO} tasks list --json --data-dir {data_dir} | head -1")
    assert done.returncode == 0 and done.stdout == "[\n"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_a_data_directory_that_is_a_file_is_one_line(tmp_path):
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    for command in (["serve"], ["init"], ["memory", "facts"]):
        done = hilo(*command, "--data-dir", str(a_file))
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.strip().endswith("") and len(done.stderr.strip().splitlines()) == 1
        assert "is a file, not a directory" in done.stderr


def test_queue_status_of_a_missing_data_directory_says_so(tmp_path):
    missing = tmp_path / "nonexistent"
    done = hilo("queue", "status", "--data-dir", str(missing))
    assert done.returncode == 1
    assert "does not exist" in done.stderr and "Pending 0" not in done.stdout
    as_json = hilo("queue", "status", "--json", "--data-dir", str(missing))
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["ok"] is False


def test_worker_count_from_the_flag_is_checked_like_the_configs(data_dir):
    for bad in ("-3", "0", "65"):
        done = hilo("worker", "--workers", bad, "--data-dir", str(data_dir), timeout=20)
        assert done.returncode == 2 and "--workers" in done.stderr, (bad, done.stderr)


def test_tasks_run_prints_the_reply_in_words_and_no_log_line(data_dir, fake_ollama):
    env = {"HILO_LLM_URL": fake_ollama.url}
    d = ["--data-dir", str(data_dir)]
    fake_ollama.script_chat("Backups look fine.", "Backups look fine again.")
    assert hilo("tasks", "add", "every day at 9", "check the backups", *d, env=env).returncode == 0
    done = hilo("tasks", "run", "1", *d, env=env)
    assert done.returncode == 0, done.stderr
    assert "Backups look fine." in done.stdout and not done.stdout.lstrip().startswith("{")
    assert done.stderr == ""
    as_json = hilo("tasks", "run", "1", "--json", *d, env=env)
    assert json.loads(as_json.stdout)["reply"] == "Backups look fine again."


def test_a_backup_keeps_memory_md_and_restore_puts_it_back(data_dir, tmp_path):
    d = ["--data-dir", str(data_dir)]
    (data_dir / "MEMORY.md").write_text("Always answer in Spanish.\n")
    dest = tmp_path / "backups"
    dest.mkdir()
    made = json.loads(hilo("backup", str(dest), "--json", *d).stdout)
    assert Path(made["memory_md"]).read_text() == "Always answer in Spanish.\n"
    (data_dir / "MEMORY.md").write_text("changed since\n")
    restored = hilo("restore", made["dest"], *d)
    assert restored.returncode == 0, restored.stderr
    assert (data_dir / "MEMORY.md").read_text() == "Always answer in Spanish.\n"
    assert [p.read_text() for p in data_dir.glob("MEMORY.md.before-restore-*")] == [
        "changed since\n"]
