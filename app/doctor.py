"""`hilo doctor`: is this installation healthy, and if not, what to do.

Each check returns OK, WARN or FAIL with a one-line detail and, when not OK, the fix.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from enum import Enum
import apsw

from app.config import Config
from app.datadir import bootstrap_path
from app.db import available_migrations, connect_readonly, memory_db_path, schema_version

FTS_TABLES = ("events_fts", "cards_fts", "facts_fts")
LOW_DISK_WARN = 1 << 30
LOW_DISK_FAIL = 100 << 20


class Status(str, Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status.value}


RESTORE_FIX = (
    "stop the worker and the server, copy your last good backup over memory.sqlite3; "
    "without one, move the file aside and run `hilo init` to start a new memory"
)


def check_data_dir(config: Config) -> Check:
    if config.data_dir.is_dir():
        return Check("data directory", Status.OK, str(config.data_dir))
    return Check("data directory", Status.FAIL, f"{config.data_dir} does not exist",
                 "run `hilo init` (or pass the right --data-dir)")


def check_database(config: Config) -> list[Check]:
    """Schema version, SQLite integrity and FTS5 index integrity of memory.sqlite3."""
    path = memory_db_path(config.data_dir)
    if not path.exists():
        return [Check("memory database", Status.FAIL, f"{path} does not exist", "run `hilo init`")]
    try:
        con = connect_readonly(path)
        try:
            return [_check_schema(con), _check_integrity(con, path), *_check_fts(path)]
        finally:
            con.close()
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        return [Check("memory database", Status.FAIL, f"{path} is corrupt: {exc}", RESTORE_FIX)]


def _check_schema(con: apsw.Connection) -> Check:
    have = schema_version(con)
    want = available_migrations()[-1].number
    if have == want:
        return Check("schema version", Status.OK, f"{have}")
    if have > want:
        return Check("schema version", Status.FAIL, f"{have}, newer than this Hilo ({want})",
                     "upgrade Hilo, or restore a backup made by this version")
    return Check("schema version", Status.WARN, f"{have}, this Hilo has {want}",
                 "run `hilo init` to migrate")


def _check_integrity(con: apsw.Connection, path) -> Check:
    problems = [row[0] for row in con.execute("PRAGMA integrity_check(20)")]
    if problems == ["ok"]:
        return Check("integrity", Status.OK, "PRAGMA integrity_check: ok")
    return Check("integrity", Status.FAIL, f"{path}: {'; '.join(problems[:3])}", RESTORE_FIX)


def _check_fts(path) -> list[Check]:
    # FTS5's integrity-check is spelled as an INSERT, so it needs a writable handle;
    # it changes nothing.
    con = apsw.Connection(str(path))
    con.setbusytimeout(5000)
    checks = []
    try:
        for table in FTS_TABLES:
            try:
                con.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")
                checks.append(Check(f"full-text index {table}", Status.OK, "in sync"))
            except apsw.SQLError as exc:
                if "no such table" in str(exc):
                    continue  # reported by the schema check
                checks.append(Check(f"full-text index {table}", Status.FAIL, str(exc),
                                    "run `hilo rebuild` to re-derive the full-text indexes"))
            except apsw.CorruptError as exc:
                checks.append(Check(f"full-text index {table}", Status.FAIL, str(exc),
                                    "run `hilo rebuild` to re-derive the full-text indexes"))
    finally:
        con.close()
    return checks


def check_disk(config: Config) -> Check:
    target = config.data_dir if config.data_dir.exists() else config.data_dir.parent
    while not target.exists():
        target = target.parent
    free = shutil.disk_usage(target).free
    detail = f"{free / (1 << 30):.1f} GiB free at {target}"
    if free < LOW_DISK_FAIL:
        return Check("free disk", Status.FAIL, detail, "free disk space: SQLite needs room to commit")
    if free < LOW_DISK_WARN:
        return Check("free disk", Status.WARN, detail, "free disk space before it runs out")
    return Check("free disk", Status.OK, detail)


def check_bootstrap(config: Config) -> Check:
    from app.tokens import estimate_tokens

    path = bootstrap_path(config)
    if not path.exists():
        return Check("MEMORY.md", Status.WARN, f"{path} does not exist",
                     "run `hilo init` to write a template, then edit it")
    tokens = estimate_tokens(path.read_text(encoding="utf-8", errors="replace"))
    cap = config.memory.bootstrap_max_tokens
    if tokens > cap:
        return Check("MEMORY.md", Status.WARN, f"about {tokens} tokens; only {cap} are sent",
                     "shorten MEMORY.md or raise [memory] bootstrap_max_tokens")
    return Check("MEMORY.md", Status.OK, f"about {tokens} tokens")


def check_model_server(config: Config) -> list[Check]:
    from app.llm import ModelClient, ModelError

    client = ModelClient.from_config(config)
    try:
        models = client.list_models()
    except ModelError as exc:
        return [Check("model server", Status.WARN, str(exc),
                      "chat needs it; memory and the queue keep working without it")]
    finally:
        client.close()
    checks = [Check("model server", Status.OK, f"{config.llm.url} answers ({len(models)} models)")]
    if config.llm.provider == "ollama":
        for role, name in (("chat model", config.llm.chat_model),
                           ("distill model", config.llm.distill_model)):
            if name in models or f"{name}:latest" in models:
                checks.append(Check(role, Status.OK, name))
            else:
                checks.append(Check(role, Status.WARN, f"{name} is not pulled",
                                    f"run `ollama pull {name}`"))
    return checks


def run_checks(config: Config) -> list[Check]:
    checks = [check_data_dir(config)]
    if checks[0].status is Status.OK:
        checks += check_database(config)
        checks.append(check_bootstrap(config))
    checks.append(check_disk(config))
    checks += check_model_server(config)
    return checks
