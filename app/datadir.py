"""The data directory: memory.sqlite3, queue.sqlite3, MEMORY.md and logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.config import Config
from app.db import Durability, connect, memory_db_path, migrate, schema_version

BOOTSTRAP_FILE = "MEMORY.md"

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
    data_dir: Path
    created_dir: bool
    migrations_applied: list[str]
    schema_version: int
    wrote_bootstrap: bool


def bootstrap_path(config: Config) -> Path:
    return config.data_dir / BOOTSTRAP_FILE


def init_data_dir(config: Config) -> InitReport:
    """Create the directory, migrate the memory database, write the MEMORY.md template.

    Safe to run again: it only adds what is missing and never overwrites MEMORY.md.
    """
    data_dir = config.data_dir
    created = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    con = connect(memory_db_path(data_dir), Durability.FULL)
    try:
        applied = migrate(con)
        version = schema_version(con)
    finally:
        con.close()
    bootstrap = bootstrap_path(config)
    wrote = not bootstrap.exists()
    if wrote:
        bootstrap.write_text(BOOTSTRAP_TEMPLATE, encoding="utf-8")
    return InitReport(data_dir, created, applied, version, wrote)
