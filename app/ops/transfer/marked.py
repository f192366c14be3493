"""Entries of a markdown export that a person reads and Hilo reads back exactly.

An entry is a marker line holding its fields as JSON, then its text quoted line by line:

    <!-- hilo-event {"uuid": "…", "role": "user", "created_at": "…"} -->
    > the message, every line quoted,
    >
    > so that no line of it can be taken for a marker

Quoting every line keeps the text exact (blank lines, leading spaces, a line that looks
like a marker) and still reads as a block quote. A session's messages (sessions/) and
the fact versions of history.md and forgotten.md are written so; headings and prose
between entries are for people and are not read back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from app.ops.transfer.records import Problem

__all__ = ["marked_entry", "read_marked"]

_MARKER = re.compile(r"^<!-- hilo-([a-z]+) (\{.*\}) -->$")


def marked_entry(kind: str, fields: dict, text: str) -> list[str]:
    """The lines of one entry: its marker, then `text` quoted."""
    meta = json.dumps(fields, ensure_ascii=False).replace("-->", "--\\u003e")
    return [f"<!-- hilo-{kind} {meta} -->",
            *(f"> {line}" if line else ">" for line in text.split("\n"))]


def read_marked(text: str, kind: str, where: str) -> Iterator[tuple[dict, str] | Problem]:
    """(fields, text) of each `kind` entry of a file, in order; a Problem for a marker
    that cannot be read."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        found = _MARKER.match(line)
        if found is None or found.group(1) != kind:
            continue
        try:
            fields = json.loads(found.group(2))
            if not isinstance(fields, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):
            yield Problem(where, f"line {number + 1}: unreadable hilo-{kind} marker")
            continue
        quoted = []
        follower = number + 1
        while follower < len(lines) and lines[follower].startswith(">"):
            line = lines[follower]
            quoted.append(line[2:] if line.startswith("> ") else line[1:])
            follower += 1
        yield fields, "\n".join(quoted)
