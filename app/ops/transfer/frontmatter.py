"""YAML front matter of the markdown export: written by Hilo, read back from a person's folder.

A folder to import may come from anyone, so its front matter is read with a loader that
refuses aliases: a few hundred bytes of nested aliases (the "billion laughs") expand to
gigabytes once a value is used. Its size is capped too, and nesting that would exhaust
the parser's recursion is refused; every refusal is a ValueError the importer reports.
Hilo writes front matter without aliases, so nothing it exports is refused.
"""

from __future__ import annotations

import yaml

__all__ = ["MAX_FRONT_MATTER_BYTES", "front_matter", "with_front_matter", "load_yaml",
           "split_front_matter"]

# A profile's front matter holds about 150 bytes per key: room for some 7,000 keys.
MAX_FRONT_MATTER_BYTES = 1024 * 1024


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"found the alias *{event.anchor}: aliases are not allowed here",
                event.start_mark)
        return super().compose_node(parent, index)


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True


def front_matter(data: dict) -> str:
    """`data` as YAML between --- lines: the head of a markdown file."""
    head = yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True,
                     width=1_000_000)
    return f"---\n{head}---\n"


def with_front_matter(data: dict, body: str) -> str:
    """A markdown file: its front matter, a blank line, then the body (trimmed)."""
    return f"{front_matter(data)}\n{body.strip()}\n"


def load_yaml(text: str) -> object:
    """Safe YAML without aliases; ValueError (or yaml.YAMLError) when it cannot be read."""
    if len(text.encode("utf-8", errors="replace")) > MAX_FRONT_MATTER_BYTES:
        raise ValueError(f"the front-matter is larger than {MAX_FRONT_MATTER_BYTES // 1024} KiB")
    try:
        return yaml.load(text, Loader=_NoAliasLoader)
    except RecursionError:
        raise ValueError("the front-matter is nested too deeply") from None


def split_front_matter(text: str) -> tuple[dict, str]:
    """(front matter, body) of a markdown file; ({}, text) when it has none.

    Raises ValueError (or yaml.YAMLError) when the front matter cannot be read.
    """
    if not text.startswith("---"):
        return {}, text
    lines = text.split("\n")
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            data = load_yaml("\n".join(lines[1:end])) or {}
            if not isinstance(data, dict):
                raise ValueError("the front-matter is not a mapping of keys to values")
            return data, "\n".join(lines[end + 1:])
    raise ValueError("the front-matter has no closing ---")
