"""The data directory: where each file lives, `init`, and the pid files restore checks."""

from __future__ import annotations

import os
import subprocess
import sys

from app.datadir import BOOTSTRAP_TEMPLATE, DataDir
from app.db import available_migrations, connect_readonly, schema_version


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


# -- layout ---------------------------------------------------------------------------------


def test_every_file_has_its_documented_place(tmp_path):
    data = DataDir(tmp_path)
    assert data.memory_db == tmp_path / "memory.sqlite3"
    assert data.queue_db == tmp_path / "queue.sqlite3"
    assert data.bootstrap == tmp_path / "MEMORY.md"
    assert data.logs == tmp_path / "logs"
    assert data.chat_log == tmp_path / "logs" / "chat.log"
    assert data.repl_history == tmp_path / "repl_history"
    assert data.pid_file("worker", 4242) == tmp_path / "worker.4242.pid"
    assert data.pid_file("serve", 7) == tmp_path / "serve.7.pid"


def test_the_configured_directory_is_the_one_used(config):
    assert DataDir.of(config) == DataDir(config.data_dir)


# -- init -----------------------------------------------------------------------------------


def test_init_creates_the_directory_a_migrated_memory_and_the_template(tmp_path):
    data = DataDir(tmp_path / "new" / "hilo")
    report = data.init()
    assert report.created_dir and report.data_dir == data.root
    assert data.logs.is_dir()
    con = connect_readonly(data.memory_db)
    try:
        assert schema_version(con) == report.schema_version == available_migrations()[-1].number
    finally:
        con.close()
    assert report.migrations_applied == [m.name for m in available_migrations()]
    assert report.wrote_bootstrap and data.bootstrap.read_text() == BOOTSTRAP_TEMPLATE
    assert not data.queue_db.exists()  # the queue makes its own file when first used


def test_init_again_adds_nothing_and_keeps_the_users_memory_md(tmp_path):
    data = DataDir(tmp_path)
    data.init()
    data.bootstrap.write_text("I am Ana.\n", encoding="utf-8")
    again = data.init()
    assert not again.created_dir and again.migrations_applied == [] and not again.wrote_bootstrap
    assert data.bootstrap.read_text() == "I am Ana.\n"


# -- pid files ------------------------------------------------------------------------------


def test_pid_file_announces_the_process_and_is_removed_after(data_dir):
    data = DataDir(data_dir)
    with data.hold_pid_file("worker") as pid_file:
        assert data.live_pids("worker")
        assert pid_file == data.pid_file("worker", os.getpid())
        assert pid_file.read_text() == f"{os.getpid()}\n"
    assert not pid_file.exists() and not data.live_pids("worker")
    assert not list(data_dir.glob(".*.pid"))  # nor its temporary file


def test_any_live_worker_among_several_counts(data_dir):
    data = DataDir(data_dir)
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        (data_dir / f"worker.{other.pid}.pid").write_text(f"{other.pid}\n")
        with data.hold_pid_file("worker"):
            assert sorted(data.live_pids("worker")) == sorted([other.pid, os.getpid()])
    finally:
        other.communicate(b"")
    assert data.live_pids("worker") == []  # the other one's file is now stale


def test_a_pid_file_whose_process_is_gone_or_unreadable_is_ignored(data_dir):
    data = DataDir(data_dir)
    pid = dead_pid()
    data.pid_file("worker", pid).write_text(f"{pid}\n")
    (data_dir / "worker.1.pid").write_text("not a number\n")
    (data_dir / "worker.2.pid").write_text("")
    (data_dir / "worker.3.pid").write_text("0\n")
    assert data.live_pids("worker") == []
    assert data.running_processes() == []


def test_running_processes_name_the_worker_and_the_server_and_their_files(data_dir):
    data = DataDir(data_dir)
    with data.hold_pid_file("worker"), data.hold_pid_file("serve"):
        pid = os.getpid()
        assert data.running_processes() == [
            f"the worker (pid {pid}, worker.{pid}.pid)",
            f"the server (pid {pid}, serve.{pid}.pid)",
        ]
    assert data.running_processes() == []


def test_each_role_counts_only_its_own_files(data_dir):
    data = DataDir(data_dir)
    with data.hold_pid_file("serve"):
        assert data.live_pids("serve") == [os.getpid()]
        assert data.live_pids("worker") == []


def test_pid_files_of_one_directory_say_nothing_about_another(tmp_path):
    here, there = DataDir(tmp_path / "a"), DataDir(tmp_path / "b")
    here.init(), there.init()
    with here.hold_pid_file("worker"):
        assert there.live_pids("worker") == [] and there.running_processes() == []

