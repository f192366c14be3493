"""The docs name only what exists: every repository path, `python -m` module and `hilo`
command in README.md, docs/*.md and BENCHMARKS.md; every link between the pages reaches
a heading; and each row of BENCHMARKS.md's summary table matches the section it names.

Reads text and imports the click group (no subprocesses), so it runs in about a second.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import click
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")),
        REPO_ROOT / "BENCHMARKS.md"]

# A repository path: under one of the top-level folders, or a top-level file by name.
PATH = re.compile(r"(?<![\w./~$<>:-])((?:app|workers|tests|migrations|docs|\.ci)/[\w./*-]*"
                  r"|(?:config\.toml|Procfile|Makefile|pyproject\.toml|BENCHMARKS\.md|README\.md)"
                  r"(?![\w-]))")
MODULE = re.compile(r"\bpython3? +(?:-\S+ +)*-m\s+((?:tests|app|workers)(?:\.\w+)+)")
HILO = re.compile(r"(?<![\w.-])hilo +([a-z][\w-]*)(?: +([a-z][\w|-]*))?")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`]+)`")


def doc_ids() -> list[str]:
    return [doc.relative_to(REPO_ROOT).as_posix() for doc in DOCS]


def code_of(text: str) -> list[str]:
    """The fenced blocks and inline code spans of a markdown text."""
    fenced = FENCE.findall(text)
    return fenced + SPAN.findall(FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


@cache
def hilo_commands() -> dict[str, frozenset[str] | None]:
    """Each `hilo` subcommand, and for a group, its own subcommands."""
    from app.cli import hilo

    ctx = click.Context(hilo)
    commands: dict[str, frozenset[str] | None] = {}
    for name in hilo.list_commands(ctx):
        command = hilo.get_command(ctx, name)
        commands[name] = (frozenset(command.list_commands(ctx))
                          if isinstance(command, click.Group) else None)
    return commands


def exists(path: str) -> bool:
    path = path.rstrip(".,;:")
    if "*" in path:
        return any(REPO_ROOT.glob(path))
    return (REPO_ROOT / path).exists()


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_path_a_doc_names_exists(doc: Path):
    text = doc.read_text(encoding="utf-8")
    missing = sorted({path for path in PATH.findall(text) if not exists(path)})
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_module_a_doc_runs_exists(doc: Path):
    text = doc.read_text(encoding="utf-8")
    missing = []
    for module in set(MODULE.findall(text)):
        base = REPO_ROOT / module.replace(".", "/")
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()
                or (base / "__init__.py").is_file()):
            missing.append(module)
    assert not missing, f"{doc.name} runs modules that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_hilo_command_a_doc_names_exists(doc: Path):
    commands = hilo_commands()
    wrong = set()
    for code in code_of(doc.read_text(encoding="utf-8")):
        for name, sub in HILO.findall(code.replace("\\|", "|")):
            if name not in commands:
                wrong.add(f"hilo {name}")
            elif sub and commands[name] is not None:
                wrong.update(f"hilo {name} {word}" for word in sub.split("|")
                             if word and word not in commands[name])
    assert not wrong, f"{doc.name} names hilo commands that do not exist: {sorted(wrong)}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_link_between_the_pages_reaches_a_heading(doc: Path):
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        page = (doc.parent / path).resolve() if path else doc
        if not page.exists():
            broken.append(target)
        elif anchor and (page.suffix != ".md" or anchor not in anchors(page)):
            broken.append(target)
    assert not broken, f"{doc.name} has links that go nowhere: {broken}"


# -- BENCHMARKS.md's summary table ------------------------------------------------------------

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def benchmarks() -> str:
    return (REPO_ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")


def generated_section(name: str) -> str:
    text = benchmarks()
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    assert start in text and end in text, f"BENCHMARKS.md has no section {name!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def summary_rows() -> list[dict[str, str]]:
    """The rows of the table that opens BENCHMARKS.md (before its first section)."""
    head = benchmarks().split("\n<!-- bench:", 1)[0]
    lines = [line for line in head.splitlines() if line.startswith("|")]
    columns = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(columns, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]


def test_the_summary_table_names_figures_from_each_section_and_its_date():
    rows = summary_rows()
    assert len(rows) >= 10
    stale = []
    for row in rows:
        name = re.fullmatch(r"\[([^\]]+)\]\(#[^)]+\)", row["section"]).group(1)
        section = generated_section(name)
        run = re.search(r"^Run: (\d{4}-\d{2}-\d{2})", section, re.M).group(1)
        command = re.search(r"^Command: `([^`]+)`", section, re.M).group(1)
        if row["run"] != run:
            stale.append(f"{row['figure']}: run {row['run']}, but {name} ran on {run}")
        if row["command"] != f"`{command}`":
            stale.append(f"{row['figure']}: command {row['command']}, but {name} ran `{command}`")
        for number in NUMBER.findall(row["value"]):
            if not re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d,]|\.\d)", section):
                stale.append(f"{row['figure']}: {number} is not in section {name}")
    assert not stale, "BENCHMARKS.md's summary is stale:\n" + "\n".join(stale)
