"""How transfer touches files: exports through fresh temporary files, imports without links.

An export never writes through a path that may already exist: each file is written to a
temporary file it has just created next to its target (O_EXCL, so a planted file or
symbolic link is never opened), then renamed over the target. An import reads only
regular files, never through a symbolic link (a link in a folder someone sent could
point at any file on the disk), and only up to a size cap.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.errors import InvalidInput
from app.ops.transfer.records import TransferError

__all__ = ["SkippedFile", "ImportFile", "refuse_to_overwrite", "replacing_file", "write_file",
           "read_import_file", "read_own_file", "files_in"]

_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
# A fifo planted in an import folder would block a plain open for ever.
_NO_BLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)


class SkippedFile(InvalidInput):
    """A file an import leaves alone; str() says why (for the import report)."""


@dataclass(frozen=True)
class ImportFile:
    text: str
    modified: float  # seconds since the epoch


def refuse_to_overwrite(target: Path) -> None:
    if os.path.lexists(target):
        raise TransferError(f"{target} already exists: choose another name or pass --overwrite "
                            "to replace it")


def _fresh_file(target: Path) -> tuple[int, Path]:
    """A new, empty file next to target, opened for writing; never an existing path."""
    for _ in range(100):
        temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.partial")
        try:
            # Mode 0o666 less the umask, as for any file the user creates.
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW | _BINARY, 0o666)
        except FileExistsError:
            continue
        return fd, temp
    raise TransferError(f"could not create a temporary file in {target.parent}: "
                        "check that the folder is writable")


@contextmanager
def replacing_file(target: Path, *, overwrite: bool) -> Iterator[BinaryIO]:
    """A fresh temporary file that replaces `target` once the block ends without error.

    Without overwrite, a target that appeared meanwhile is left alone (TransferError).
    """
    fd, temp = _fresh_file(target)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        if not overwrite:
            refuse_to_overwrite(target)
        os.replace(temp, target)
    finally:
        with suppress(FileNotFoundError):
            temp.unlink()


def write_file(target: Path, content: bytes) -> None:
    with replacing_file(target, overwrite=True) as out:
        out.write(content)


def read_import_file(path: Path, limit: int) -> ImportFile:
    """The text of a regular file in an import folder; SkippedFile for anything else."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise SkippedFile(f"cannot be read: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise SkippedFile("a symbolic link, not followed")
    if not stat.S_ISREG(info.st_mode):
        raise SkippedFile("not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | _NO_FOLLOW | _NO_BLOCK | _BINARY)
    except OSError as exc:
        raise SkippedFile(f"cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for something else since lstat
            raise SkippedFile("not a regular file")
        data = source.read(limit + 1)
    if len(data) > limit:
        raise SkippedFile(f"larger than {limit // 1024} KiB, skipped")
    return ImportFile(data.decode("utf-8", errors="replace"), info.st_mtime)


def read_own_file(path: Path) -> bytes | None:
    """The bytes of a regular file an export may replace; None for a link or anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | _NO_FOLLOW | _NO_BLOCK | _BINARY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return source.read()


def files_in(folder: Path, suffix: str) -> list[Path]:
    """The entries of `folder` whose names end in suffix, sorted; [] when there is none.

    SkippedFile when the folder is a symbolic link (not entered) or not a folder.
    Each entry may still be anything: read it with read_import_file.
    """
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(info.st_mode):
        raise SkippedFile("a symbolic link, not followed")
    if not stat.S_ISDIR(info.st_mode):
        raise SkippedFile("not a folder")
    with os.scandir(folder) as entries:
        return sorted(folder / entry.name for entry in entries if entry.name.endswith(suffix))
