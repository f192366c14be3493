"""MEMORY.md in an export: the data directory's bootstrap file, carried as the owner wrote it.

An import puts it in place only where the data directory has none, or only the template
`hilo init` writes: a MEMORY.md the owner wrote is never replaced, and the imported one
is put beside it (MEMORY.imported.md) for them to merge by hand. The report says which,
since MEMORY.md is sent with every conversation.
"""

from __future__ import annotations

from pathlib import Path

from app.config import Config
from app.datadir import BOOTSTRAP_TEMPLATE, DataDir
from app.ops.transfer.files import read_own_file, write_file

IMPORTED_NAME = "MEMORY.imported.md"


def memory_md_text(config: Config) -> str | None:
    """The data directory's MEMORY.md; None when it has none (or it is not a file)."""
    content = read_own_file(DataDir.of(config).bootstrap)
    return None if content is None else content.decode("utf-8", errors="replace")


def exported_memory_md(config: Config) -> str | None:
    """The MEMORY.md an export carries: None when there is none, or only the template."""
    text = memory_md_text(config)
    return None if text == BOOTSTRAP_TEMPLATE else text


def install_memory_md(config: Config, text: str) -> tuple[str, Path | None]:
    """Bring an exported MEMORY.md into the data directory: ("added", None) where it had
    none or the template; ("unchanged", None) where it is the same, or the import brings
    only the template; ("kept", path of the imported copy) where the owner wrote their own.
    """
    target = DataDir.of(config).bootstrap
    current = memory_md_text(config)
    if current == text or (text == BOOTSTRAP_TEMPLATE and current is not None):
        return "unchanged", None
    if current is None or current == BOOTSTRAP_TEMPLATE:
        write_file(target, text.encode("utf-8"))
        return "added", None
    beside = target.with_name(IMPORTED_NAME)
    write_file(beside, text.encode("utf-8"))
    return "kept", beside
