"""MEMORY.md in an export: the data directory's bootstrap file, carried as the owner wrote it.

MEMORY.md is sent with every conversation of every user as the owner's own words, so an
import never installs one: it is kept beside the data directory's own, as
MEMORY.imported.md, which no conversation reads, until the owner accepts it at the
machine (`hilo memory accept-import`, `accept_imported_memory_md`). The import report
says so in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.config import Config
from app.datadir import BOOTSTRAP_TEMPLATE, DataDir
from app.errors import NotFound
from app.memory.bootstrap import write_bootstrap
from app.ops.transfer.files import read_own_file, write_file

__all__ = ["IMPORTED_NAME", "REPLACED_NAME", "memory_md_text", "exported_memory_md",
           "imported_memory_md_path", "keep_imported_memory_md", "accept_imported_memory_md"]

IMPORTED_NAME = "MEMORY.imported.md"
# Where accepting an import keeps the MEMORY.md it replaces (unless it was the template).
REPLACED_NAME = "MEMORY.md.before-import"


def memory_md_text(config: Config) -> str | None:
    """The data directory's MEMORY.md; None when it has none (or it is not a file)."""
    content = read_own_file(DataDir.of(config).bootstrap)
    return None if content is None else content.decode("utf-8", errors="replace")


def exported_memory_md(config: Config) -> str | None:
    """The MEMORY.md an export carries: None when there is none, or only the template."""
    text = memory_md_text(config)
    return None if text == BOOTSTRAP_TEMPLATE else text


def imported_memory_md_path(config: Config) -> Path:
    """Where an imported MEMORY.md waits for the owner (module docstring)."""
    return DataDir.of(config).bootstrap.with_name(IMPORTED_NAME)


def keep_imported_memory_md(config: Config, text: str) -> tuple[str, Path | None]:
    """Keep an exported MEMORY.md beside the data directory's own: ("pending", its path);
    ("unchanged", None) where it is the same as MEMORY.md or as the one already waiting,
    or the import brings only the template."""
    current = memory_md_text(config)
    beside = imported_memory_md_path(config)
    if text in (current, BOOTSTRAP_TEMPLATE) or read_own_file(beside) == text.encode("utf-8"):
        return "unchanged", None  # the same, or already waiting
    write_file(beside, text.encode("utf-8"))
    return "pending", beside


def accept_imported_memory_md(config: Config) -> tuple[Path, Path | None]:
    """The owner, at the machine, makes the imported MEMORY.md theirs: it becomes
    MEMORY.md; the one it replaces is kept as MEMORY.md.before-import unless it was the
    template. Returns (MEMORY.md, where the old one went). NotFound when no import waits."""
    pending = imported_memory_md_path(config)
    content = read_own_file(pending)
    if content is None:
        raise NotFound(f"no imported MEMORY.md waits at {pending}: `hilo import` puts one "
                       "there when the memory it reads carries one")
    target = DataDir.of(config).bootstrap
    current = memory_md_text(config)
    kept = None
    if current is not None and current != BOOTSTRAP_TEMPLATE:
        kept = target.with_name(REPLACED_NAME)
        write_file(kept, current.encode("utf-8"))
    write_bootstrap(target, content.decode("utf-8", errors="replace"))
    os.unlink(pending)
    return target, kept
