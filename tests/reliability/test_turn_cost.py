"""The cost of a turn is bounded: MEMORY.md is read once per change, capped, and its
comments are stripped in linear time."""

from __future__ import annotations

import os
import re
import time

from app.memory.bootstrap import MAX_BOOTSTRAP_BYTES, read_bootstrap, strip_html_comments


class ScanCounted(str):
    """A text that counts the characters its find() calls read."""

    scanned = 0

    def find(self, sub, start=0, *args):
        found = super().find(sub, start, *args)
        ScanCounted.scanned += (len(self) if found < 0 else found + len(sub)) - start
        return found


def test_unclosed_comments_are_read_in_linear_time(tmp_path):
    """A lazy regex reads "<!--" * n in n^2 steps (seconds at 64 KB); the stripper reads each
    character at most twice, whatever the nesting."""
    for text in ["<!--" * 16_384, "<!--" * 8_192 + "-->", "<!-- a -->" * 4_096 + "<!--" * 4_096,
                 "-->" * 8_192 + "<!--"]:
        ScanCounted.scanned = 0
        stripped = strip_html_comments(ScanCounted(text))
        assert stripped == re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
        assert ScanCounted.scanned <= 2 * len(text) + 8, len(text)
    path = tmp_path / "MEMORY.md"
    path.write_text("<!--" * 16_384)
    assert read_bootstrap(path) == "<!--" * 16_384  # an unclosed comment is kept, as written


def test_comments_are_stripped_as_the_regex_did():
    regex = re.compile(r"<!--.*?-->", re.DOTALL)
    for text in ["a<!-- x -->b", "<!--a-->-->b<!--", "x<!--<!-- y -->z-->", "<!---->", "<!-->",
                 "a <!-- 1 --> b <!-- 2\n3 --> c <!-- open", "-->", ""]:
        assert strip_html_comments(text) == regex.sub("", text), text


def test_a_huge_file_is_read_once_per_change_and_capped(tmp_path, monkeypatch):
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"remember this\n" * (4 * MAX_BOOTSTRAP_BYTES // 14))  # 4 MiB
    first = read_bootstrap(path)
    assert len(first.encode()) <= MAX_BOOTSTRAP_BYTES
    reads = []
    real_open = type(path).open
    monkeypatch.setattr(type(path), "open", lambda self, *a, **k: reads.append(self) or
                        real_open(self, *a, **k))
    for _ in range(100):
        assert read_bootstrap(path) == first
    assert reads == []  # served from the cache
    path.write_text("<!-- note -->changed")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    reads.clear()  # writing it opened it too
    assert read_bootstrap(path) == "changed"
    assert len(reads) == 1


def test_a_missing_file_is_empty(tmp_path):
    assert read_bootstrap(tmp_path / "absent.md") == ""
