"""YAML front matter of the markdown export: written by Hilo, read back from a person's folder."""

from __future__ import annotations

import yaml


def with_front_matter(data: dict, body: str) -> str:
    """A markdown file: `data` as YAML between --- lines, a blank line, then the body."""
    head = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1_000_000)
    return f"---\n{head}---\n\n{body.strip()}\n"


def split_front_matter(text: str) -> tuple[dict, str]:
    """(front matter, body) of a markdown file; ({}, text) when it has none.

    Raises ValueError (or yaml.YAMLError) when the front matter cannot be read.
    """
    if not text.startswith("---"):
        return {}, text
    lines = text.split("\n")
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            data = yaml.safe_load("\n".join(lines[1:end])) or {}
            if not isinstance(data, dict):
                raise ValueError("the front-matter is not a mapping of keys to values")
            return data, "\n".join(lines[end + 1:])
    raise ValueError("the front-matter has no closing ---")
