"""A markdown folder a person can read, grep, keep in git or open in Obsidian.

`profile.md` holds MEMORY.md-style `- key: value` lines (their dates and sources in the
front matter), `facts/` and `cards/` one file per current fact and per context card
with YAML front matter, `diary/` the diary by day (each entry under a hilo-diary
marker), `tasks/` one file per scheduled task (its schedule in the front matter, its
prompt as the body). `.hilo-export.json` (manifest.py) records what the export wrote, so that exporting
again into a folder that also holds a person's notes replaces and removes only Hilo's own
unchanged files. `read_markdown` reads such a folder back, including what a person added,
and reads nothing through a symbolic link.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import apsw
import yaml

from app.ops.backup import snapshot
from app.config import Config
from app.datadir import DataDir
from app.timeutil import to_rfc3339
from app.ops.transfer.files import (
    ImportFile,
    SkippedFile,
    files_in,
    read_import_file,
    read_own_file,
    write_file,
)
from app.ops.transfer.frontmatter import split_front_matter, with_front_matter
from app.ops.transfer.manifest import ExportManifest, content_hash
from app.ops.transfer.records import ExportReport, Problem, TransferError, check_user
from app.ops.transfer.user_records import (
    card_records,
    diary_records,
    fact_records,
    profile_records,
    task_records,
)

PROFILE_FILE = "profile.md"
FACTS_DIR, CARDS_DIR, DIARY_DIR, TASKS_DIR = "facts", "cards", "diary", "tasks"
# A scheduled task's front matter: its JSON lines record without the prompt (the body).
TASK_KEYS = ("id", "name", "schedule", "cron_expr", "source", "is_oneshot", "is_paused",
             "is_trusted", "next_run_at", "last_run_at", "created_at", "updated_at")
# An imported file larger than this is skipped: Hilo's own files hold one value capped
# at a few KB (a diary day, a few dozen entries; the profile, its keys).
MAX_FILE_BYTES = 8 * 1024 * 1024

_DIARY_MARKER = re.compile(r"^<!-- hilo-diary (\{.*\}) -->$")
_SLUG = re.compile(r"[^\w]+", re.UNICODE)
_PLAIN_KEY = re.compile(r'^[^\s"`:][^:\n]*$')
# The only files an export may remove as stale: a manifest that names anything else
# (a path out of the folder) is not obeyed.
_REMOVABLE = re.compile(r"^(?:facts|cards|diary|tasks)/[^/\\]+\.md$")


def looks_like_markdown_export(folder: Path) -> bool:
    return os.path.lexists(folder / PROFILE_FILE) or any(
        (folder / d).is_dir() for d in (FACTS_DIR, CARDS_DIR, DIARY_DIR, TASKS_DIR))


# -- export ---------------------------------------------------------------------------------


def _slug(text: str, fallback: str) -> str:
    return _SLUG.sub("-", text.casefold()).strip("-_")[:60].strip("-_") or fallback


def _unique_name(directory: str, stem: str, taken: set[str], row_id: Any) -> str:
    name = f"{directory}/{stem}.md"
    if name in taken:
        name = f"{directory}/{stem}-{row_id}.md"
    taken.add(name)
    return name


def _profile_markdown(user_id: str, entries: list[dict]) -> str:
    lines = ["# Profile", ""]
    meta = {}
    for entry in entries:
        key = entry["key"]
        shown = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
        first, *rest = entry["value"].split("\n")
        lines.append(f"- {shown}: {first}")
        lines.extend(f"  {line}" if line else "" for line in rest)
        meta[key] = {"source": entry["source"], "created_at": entry["created_at"],
                     "updated_at": entry["updated_at"]}
    head = {"hilo": "profile", "user_id": user_id, "keys": meta}
    return with_front_matter(head, "\n".join(lines))


def _diary_markdown(day: str, entries: list[dict]) -> str:
    parts = [f"# Diary — {day}", ""]
    for entry in entries:
        meta = {"session_id": entry["session_id"], "created_at": entry["created_at"],
                "is_extractive": bool(entry["is_extractive"])}
        session = " ".join(str(entry["session_id"]).split())
        parts += [f"## {entry['created_at'][11:16]} UTC · session {session}",
                  "<!-- hilo-diary " + json.dumps(meta, ensure_ascii=False).replace("-->", "--\\u003e")
                  + " -->", "", entry["entry"].strip(), ""]
    return "\n".join(parts)


def _markdown_files(con: apsw.Connection, user_id: str) -> tuple[dict[str, str], Counter]:
    """Relative path → content of every file of the export."""
    files: dict[str, str] = {}
    written: Counter = Counter()
    profile = list(profile_records(con, user_id, live_only=True))
    files[PROFILE_FILE] = _profile_markdown(user_id, profile)
    written["profile"] = len(profile)

    taken: set[str] = set()
    for fact in fact_records(con, user_id, current_only=True):
        stem = f"{fact['created_at'][:10]}-{fact['category']}-{_slug(fact['key'], 'fact')}"
        head = {k: fact[k] for k in ("id", "category", "key", "source", "created_at",
                                     "updated_at", "importance")}
        files[_unique_name(FACTS_DIR, stem, taken, fact["id"])] = with_front_matter(head, fact["value"])
        written["fact"] += 1

    for card in card_records(con, user_id):
        topic = card["keywords"].split(",")[0] if card["keywords"] else card["summary"][:40]
        stem = f"{card['created_at'][:10]}-{_slug(topic, 'card')}"
        head = {k: card[k] for k in ("id", "session_id", "keywords", "level", "is_extractive",
                                     "importance", "event_count", "folded_into", "created_at",
                                     "updated_at")}
        head["is_extractive"] = bool(head["is_extractive"])
        files[_unique_name(CARDS_DIR, stem, taken, card["id"])] = with_front_matter(head, card["summary"])
        written["card"] += 1

    by_day: dict[str, list[dict]] = defaultdict(list)
    for entry in diary_records(con, user_id):
        by_day[entry["created_at"][:10]].append(entry)
        written["diary"] += 1
    for day, entries in by_day.items():
        files[f"{DIARY_DIR}/{day}.md"] = _diary_markdown(day, entries)

    for task in task_records(con, user_id):
        head = {k: task[k] for k in TASK_KEYS}
        for flag in ("is_oneshot", "is_paused", "is_trusted"):
            head[flag] = bool(head[flag])
        files[_unique_name(TASKS_DIR, _slug(task["name"], "task"), taken, task["id"])] = \
            with_front_matter(head, task["prompt"])
        written["task"] += 1
    return files, written


def _files_to_write(out_dir: Path, contents: dict[str, bytes], manifest: ExportManifest,
                   overwrite: bool) -> list[str]:
    """The files of the export that differ from what the folder holds.

    A file already there is replaced only if Hilo wrote it and nobody changed it since
    (the manifest says so), or with overwrite; otherwise nothing is written.
    """
    to_write, refused = [], []
    for relative, content in contents.items():
        target = out_dir / relative
        if not os.path.lexists(target):
            to_write.append(relative)
            continue
        if target.is_dir() and not target.is_symlink():
            raise TransferError(f"{target} is a folder where the export writes a file: "
                                "move it away or export into another folder")
        current = read_own_file(target)
        if current == content:
            continue
        if not overwrite and not manifest.wrote_unchanged(relative, current):
            refused.append(relative)
        to_write.append(relative)
    if refused:
        shown = ", ".join(refused[:3]) + (f" and {len(refused) - 3} more" if len(refused) > 3 else "")
        raise TransferError(f"{out_dir} holds files Hilo did not write or that changed since it "
                            f"wrote them ({shown}): export into an empty folder, or pass "
                            "--overwrite to replace them (import the folder first to keep "
                            "their changes)")
    return to_write


def _remove_stale(out_dir: Path, manifest: ExportManifest,
                  contents: dict[str, bytes]) -> tuple[int, tuple[str, ...]]:
    """Remove what the last export wrote for records that are gone, if nobody changed it.

    Returns (files removed, files kept because a person changed them).
    """
    removed, kept = 0, []
    for relative in sorted(manifest.files):
        if relative in contents or not _REMOVABLE.match(relative) \
                or os.path.islink(out_dir / relative.split("/")[0]):
            continue
        target = out_dir / relative
        current = read_own_file(target)
        if current is None:
            continue  # gone already, or replaced by something that is not Hilo's file
        if manifest.wrote_unchanged(relative, current):
            target.unlink()
            removed += 1
        else:
            kept.append(relative)
    return removed, tuple(kept)


def export_markdown(config: Config, user_id: str, out_dir: Path, *,
                    overwrite: bool = False) -> ExportReport:
    """One user's profile, current facts, cards and diary as a folder of markdown.

    Exporting again into the same folder updates it in place: files whose content is
    unchanged are not rewritten (clean git diffs), and files the last export wrote for
    facts, cards or diary days that are gone are removed, if unchanged since (the
    manifest, .hilo-export.json, says what Hilo wrote). Anything else in the folder is a
    person's: never removed, and replaced only with overwrite.
    """
    check_user(user_id)
    out_dir = Path(out_dir).expanduser()
    if out_dir.exists() and not out_dir.is_dir():
        raise TransferError(f"{out_dir} is a file: pass a folder to export markdown into")
    with snapshot(DataDir.of(config).memory_db) as con:
        files, written = _markdown_files(con, user_id)
    contents = {relative: text.encode("utf-8") for relative, text in files.items()}
    manifest = ExportManifest.read(out_dir)
    to_write = _files_to_write(out_dir, contents, manifest, overwrite)

    for directory in (FACTS_DIR, CARDS_DIR, DIARY_DIR, TASKS_DIR):
        try:
            (out_dir / directory).mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise TransferError(f"{out_dir / directory} is not a folder: move it away or "
                                "export into another folder") from None
    for relative in to_write:
        write_file(out_dir / relative, contents[relative])
    removed, kept = _remove_stale(out_dir, manifest, contents)
    ExportManifest(user_id, {relative: content_hash(content)
                             for relative, content in contents.items()}).write(out_dir)
    return ExportReport(out_dir, user_id, dict(written), removed, kept)


# -- import ---------------------------------------------------------------------------------


def _profile_item(item: str, number: int, where: str) -> tuple[str, str] | Problem:
    """(key, value) of one `- key: value` line; a quoted key is JSON text."""
    if item.startswith('"'):
        try:
            key, end = json.JSONDecoder().raw_decode(item)
        except json.JSONDecodeError:
            return Problem(where, f"line {number}: unreadable quoted key")
        rest = item[end:]
        if not rest.startswith(":"):
            return Problem(where, f'line {number}: expected "- key: value"')
        return str(key), rest[1:].strip()
    key, colon, value = item.partition(":")
    if not colon:
        return Problem(where, f'line {number}: expected "- key: value"')
    return key, value.strip()


def _parse_profile(text: str, where: str) -> Iterator[dict | Problem]:
    head, body = split_front_matter(text)
    meta = head.get("keys") if isinstance(head.get("keys"), dict) else {}
    entries: list[list[str]] = []  # [key, first line, more lines...]
    blank_run = 0
    open_entry = False
    for number, line in enumerate(body.split("\n"), 1):
        if line.startswith("- "):
            item = _profile_item(line[2:], number, where)
            if isinstance(item, Problem):
                yield item
                continue
            entries.append(list(item))
            blank_run, open_entry = 0, True
        elif open_entry and line.startswith("  "):
            entries[-1].extend([""] * blank_run + [line[2:]])
            blank_run = 0
        elif open_entry and not line.strip():
            blank_run += 1
        else:
            blank_run, open_entry = 0, False  # a heading or prose ends the entry
    for key, *lines in entries:
        info = meta.get(" ".join(key.split()).casefold()) or meta.get(key)
        info = info if isinstance(info, dict) else {}
        # A line a person wrote by hand, without export metadata, is the user's own edit.
        yield {"type": "profile", "key": key, "value": "\n".join(lines).strip(),
               "source": info.get("source", "user"), "created_at": info.get("created_at"),
               "updated_at": info.get("updated_at"), "_where": where}


def _parse_diary(text: str, where: str) -> Iterator[dict | Problem]:
    lines = text.split("\n")
    markers = [i for i, line in enumerate(lines) if _DIARY_MARKER.match(line)]
    for n, start in enumerate(markers):
        try:
            meta = json.loads(_DIARY_MARKER.match(lines[start]).group(1))
            if not isinstance(meta, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):
            yield Problem(where, f"line {start + 1}: unreadable hilo-diary marker")
            continue
        end = markers[n + 1] if n + 1 < len(markers) else len(lines)
        if n + 1 < len(markers):
            # The next entry's "## time · session" heading sits just above its marker.
            j = end - 1
            while j > start and not lines[j].strip():
                j -= 1
            if lines[j].startswith("#"):
                end = j
        yield {"type": "diary", "session_id": meta.get("session_id"),
               "created_at": meta.get("created_at"), "is_extractive": meta.get("is_extractive", False),
               "entry": "\n".join(lines[start + 1:end]).strip(), "_where": where}


def _problem(where: str, detail: object) -> Problem:
    return Problem(where, " ".join(str(detail).split()))  # one line in the report


def _folder_files(folder: Path, directory: str) -> Iterator[tuple[str, ImportFile] | Problem]:
    """(where, file) for each markdown file of folder/directory; a Problem for the rest."""
    try:
        paths = files_in(folder / directory, ".md")
    except SkippedFile as exc:
        yield _problem(f"{directory}/", exc)
        return
    for path in paths:
        where = f"{directory}/{path.name}"
        try:
            yield where, read_import_file(path, MAX_FILE_BYTES)
        except SkippedFile as exc:
            yield _problem(where, exc)


def read_markdown(folder: Path) -> Iterator[dict | Problem]:
    """Records from a folder written by export_markdown (or edited by a person).

    A fact or card file a person wrote needs only front-matter with category and key
    (facts) and a body; it is dated by the file's modification time and counts as the
    user's own. A task file needs a `schedule` (as `hilo tasks add` takes it) and the
    prompt as its body. Symbolic links, files that are not regular and oversized files are
    skipped and reported, never followed or read.
    """
    folder = Path(folder)
    for directory, kind in ((CARDS_DIR, "card"), (FACTS_DIR, "fact")):
        for item in _front_matter_files(folder, directory):
            if isinstance(item, Problem):
                yield item
                continue
            where, file, head, body = item
            modified = to_rfc3339(datetime.fromtimestamp(file.modified, timezone.utc))
            record = {"source": "user", "created_at": modified, **head, "type": kind,
                      "_where": where}
            record.setdefault("updated_at", record["created_at"])
            record["value" if kind == "fact" else "summary"] = body.strip()
            yield record
    if os.path.lexists(folder / PROFILE_FILE):
        try:
            profile = read_import_file(folder / PROFILE_FILE, MAX_FILE_BYTES)
            yield from _parse_profile(profile.text, PROFILE_FILE)
        except SkippedFile as exc:
            yield _problem(PROFILE_FILE, exc)
        except (ValueError, yaml.YAMLError) as exc:
            yield _problem(PROFILE_FILE, f"unreadable: {exc}")
    for item in _folder_files(folder, DIARY_DIR):
        if isinstance(item, Problem):
            yield item
        else:
            yield from _parse_diary(item[1].text, item[0])
    for item in _front_matter_files(folder, TASKS_DIR):
        if isinstance(item, Problem):
            yield item
            continue
        where, _, head, body = item
        yield {**head, "type": "task", "prompt": body.strip(), "_where": where}


def _front_matter_files(folder: Path, directory: str) -> Iterator[Any]:
    """Each file of `directory` as (where, file, front matter, body), or the Problem
    that kept it out (a link, an oversized file, unreadable front matter)."""
    for item in _folder_files(folder, directory):
        if isinstance(item, Problem):
            yield item
            continue
        where, file = item
        try:
            head, body = split_front_matter(file.text)
        except (ValueError, yaml.YAMLError) as exc:
            yield _problem(where, f"unreadable front-matter: {exc}")
            continue
        yield where, file, head, body
