"""The data directory: every path in it, its creation, and the pid files of the processes
that use it.

    memory.sqlite3     the memory (app/db.py opens and migrates it)
    queue.sqlite3      the job queue, with the SQLite backend (workers/queue.py)
    MEMORY.md          what the user wants always known, written by the user
    logs/              log files of front-ends on a terminal (`hilo chat`: chat.log)
    repl_history       `hilo chat`'s input history
    vectors/           approximate vector indexes, derived from memory.sqlite3 (app/recall/vectors.py)
    work/<user>/       the terminal's working folder of each user, unless [tools]
                       terminal_workdir names one (app/turn/tools/terminal.py)
    <role>.<pid>.pid   one per running worker or server (below)

`DataDir` is the one place this layout is known; everything else asks it for a path.

Running processes announce themselves with pid files (`worker.<pid>.pid`,
`serve.<pid>.pid`: the decimal pid and a newline, written by `DataDir.hold_pid_file`),
one per process since several workers may run; `hilo restore` refuses while one names a
live process. A file whose process is gone is stale and ignored.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from app.config import Config
from app.db import (
    MEMORY_DB,
    QUEUE_DB,
    Durability,
    check_memory_database,
    connect,
    create_memory_database,
    migrate,
    schema_version,
)

__all__ = ["BOOTSTRAP_FILE", "LOGS_DIR", "CHAT_LOG", "REPL_HISTORY_FILE", "VECTOR_INDEX_DIR",
           "WORK_DIR", "PID_ROLES", "BOOTSTRAP_TEMPLATE", "InitReport", "DataDir"]

BOOTSTRAP_FILE = "MEMORY.md"
LOGS_DIR = "logs"
CHAT_LOG = "chat.log"
REPL_HISTORY_FILE = "repl_history"
VECTOR_INDEX_DIR = "vectors"
WORK_DIR = "work"
# Roles of the processes that announce themselves, and how refusals name them.
PID_ROLES = {"worker": "the worker", "serve": "the server"}

BOOTSTRAP_TEMPLATE = """\
<!--
  MEMORY.md — what Hilo should always know, written by you.

  Everything outside these comment markers is sent to the model verbatim at the start
  of every conversation (capped at [memory] bootstrap_max_tokens, about 500 tokens),
  so keep it short: who you are, how you like answers, standing instructions.
  Hilo never edits this file; what it learns goes to its database instead
  (see `hilo memory` and /profile, /facts in `hilo chat`).

  For example:

  # About me
  - I am Ana, a backend developer in Madrid; I answer in Spanish or English.
  - I work mostly in Python and Go; I deploy with Docker on Debian.

  # How to answer
  - Be brief. Show commands before explanations.
-->
"""


@dataclass(frozen=True)
class InitReport:
    """What `hilo init` found and did, for it to say."""

    data_dir: Path
    created_dir: bool
    migrations_applied: list[str]
    schema_version: int
    wrote_bootstrap: bool


@dataclass(frozen=True)
class DataDir:
    """The data directory at `root`: its paths, its creation and its pid files."""

    root: Path

    @classmethod
    def of(cls, config: Config) -> DataDir:
        """The data directory `config` names ([data] dir, HILO_DATA_DIR, --data-dir)."""
        return cls(config.data_dir)

    # -- paths --------------------------------------------------------------------------------

    @property
    def memory_db(self) -> Path:
        return self.root / MEMORY_DB

    @property
    def queue_db(self) -> Path:
        """The queue file of the SQLite backend (Redis keeps the queue elsewhere)."""
        return self.root / QUEUE_DB

    @property
    def bootstrap(self) -> Path:
        """MEMORY.md."""
        return self.root / BOOTSTRAP_FILE

    @property
    def logs(self) -> Path:
        return self.root / LOGS_DIR

    @property
    def chat_log(self) -> Path:
        return self.logs / CHAT_LOG

    @property
    def repl_history(self) -> Path:
        return self.root / REPL_HISTORY_FILE

    @property
    def vector_indexes(self) -> Path:
        """Where the approximate vector indexes persist; deleting it only costs a rebuild."""
        return self.root / VECTOR_INDEX_DIR

    def terminal_folder(self, user_id: str) -> Path:
        """`<root>/work/<user>`: the user's id as one file name (percent-encoded; hashed
        when that would be long or a dot), so no id reaches another folder."""
        name = quote(user_id, safe="")
        if len(name) > 200 or name.strip(".") == "":
            name = "user-" + hashlib.sha256(user_id.encode()).hexdigest()[:32]
        return self.root / WORK_DIR / name

    def pid_file(self, role: str, pid: int) -> Path:
        """`<root>/<role>.<pid>.pid`."""
        return self.root / f"{role}.{pid}.pid"

    # -- creation -----------------------------------------------------------------------------

    def init(self) -> InitReport:
        """Create the directory, migrate the memory database, write the MEMORY.md template.

        Safe to run again: it only adds what is missing and never overwrites MEMORY.md.
        """
        created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        # An existing file is checked, never overwritten; a missing one is created whole.
        self.check_memory()
        created_with = create_memory_database(self.memory_db)
        con = connect(self.memory_db, Durability.FULL)
        try:
            applied = created_with + migrate(con)
            version = schema_version(con)
        finally:
            con.close()
        wrote = not self.bootstrap.exists()
        if wrote:
            self.bootstrap.write_text(BOOTSTRAP_TEMPLATE, encoding="utf-8")
        return InitReport(self.root, created, applied, version, wrote)

    def check_memory(self) -> None:
        """Refuse a memory database that lost its schema or fails a quick check, with the
        one line that says what to do (CorruptDatabase); a missing one passes."""
        check_memory_database(self.memory_db)

    # -- pid files ----------------------------------------------------------------------------

    @contextmanager
    def hold_pid_file(self, role: str) -> Iterator[Path]:
        """Announce this process as a `role` ("worker", "serve") for the duration, so
        restore can refuse while it runs."""
        path = self.pid_file(role, os.getpid())
        temporary = path.with_name(f".{path.name}")
        temporary.write_text(f"{os.getpid()}\n", encoding="ascii")
        os.replace(temporary, path)  # atomic: a reader never sees a half-written pid
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    def live_pids(self, role: str) -> list[int]:
        """The live processes of a role that announced themselves (stale files are ignored)."""
        pids = (_pid_file_owner(path) for path in sorted(self.root.glob(f"{role}.*.pid")))
        return [pid for pid in pids if pid is not None]

    def running_processes(self) -> list[str]:
        """Descriptions of the Hilo processes whose pid files name a live process."""
        return [f"{what} (pid {pid}, {self.pid_file(role, pid).name})"
                for role, what in PID_ROLES.items() for pid in self.live_pids(role)]


def _pid_file_owner(path: Path) -> int | None:
    """The live process a pid file names, or None (no file, unreadable, or stale)."""
    try:
        pid = int(path.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid  # alive, owned by another user
    return pid
