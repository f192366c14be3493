"""MEMORY.md, the bootstrap file, as the turn reads it: cheap on every turn.

The file is read once per change (cached by mtime and size), at most
MAX_BOOTSTRAP_BYTES of it (the section is capped at [memory] bootstrap_max_tokens, at
most 100,000 tokens, long after this many bytes), and its HTML comments — the template's
instructions — are stripped in one pass: a file of unclosed `<!--` costs no more than
any other file of its size. `write_bootstrap` is how a front-end saves the person's
own text (the memory page's editor); Hilo's workers never write it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from app.memory.validation import InvalidMemory
from app.sanitize import clean_text

__all__ = ["MAX_BOOTSTRAP_BYTES", "COMMENT_OPEN", "COMMENT_CLOSE", "strip_html_comments",
           "read_bootstrap", "write_bootstrap"]

# 100,000 tokens (the largest bootstrap_max_tokens) at ~4 bytes a token, with room.
MAX_BOOTSTRAP_BYTES = 1 << 20
COMMENT_OPEN, COMMENT_CLOSE = "<!--", "-->"

_cache_lock = threading.Lock()
_cache: dict[Path, tuple[int, int, str]] = {}  # path -> (mtime_ns, size, text)


def strip_html_comments(text: str) -> str:
    """`text` without `<!-- … -->` comments; an unclosed one is kept, as written."""
    kept = []
    position = 0
    while True:
        start = text.find(COMMENT_OPEN, position)
        if start < 0:
            break
        end = text.find(COMMENT_CLOSE, start + len(COMMENT_OPEN))
        if end < 0:
            break  # no comment closes after here, so none that opens later does either
        kept.append(text[position:start])
        position = end + len(COMMENT_CLOSE)
    kept.append(text[position:])
    return "".join(kept)


def read_bootstrap(path: Path) -> str:
    """MEMORY.md without its HTML comments (the template's instructions); "" if missing."""
    path = Path(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return ""
    with _cache_lock:
        cached = _cache.get(path)
    if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
        return cached[2]
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BOOTSTRAP_BYTES)
    except FileNotFoundError:
        return ""
    text = strip_html_comments(raw.decode("utf-8", errors="replace")).strip()
    with _cache_lock:
        _cache[path] = (stat.st_mtime_ns, stat.st_size, text)
    return text


def write_bootstrap(path: Path, text: str) -> None:
    """Replace MEMORY.md with the person's `text` (line ends as `\n`), whole or not at all:
    written beside it, flushed to disk, then renamed over it. InvalidMemory when it is
    longer than a turn ever reads."""
    text = clean_text(text).replace("\r\n", "\n").replace("\r", "\n")
    data = text.encode("utf-8")
    if len(data) > MAX_BOOTSTRAP_BYTES:
        raise InvalidMemory(f"MEMORY.md may hold at most {MAX_BOOTSTRAP_BYTES} bytes; this "
                            f"text is {len(data)}: keep it to what every conversation needs")
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
