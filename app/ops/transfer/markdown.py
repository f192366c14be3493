"""A markdown folder a person can read, grep, keep in git or open in Obsidian.

`profile.md` holds MEMORY.md-style `- key: value` lines (their dates and sources, and
the keys deleted, in the front matter), `facts/` and `cards/` one file per current fact
and per context card with YAML front matter, `history.md` every earlier version of a
fact, `forgotten.md` the facts deleted or forgotten (what Hilo must not learn again),
`sessions/` one file per session with its messages, `diary/` the diary by day (each
entry under a hilo-diary marker), `tasks/` one file per scheduled task (its schedule in
the front matter, its prompt as the body), and `MEMORY.md` the data directory's own.
Messages and fact versions are marked entries (marked.py), read back exactly.
`.hilo-export.json` (manifest.py) records what the export wrote, so that exporting
again into a folder that also holds a person's notes replaces and removes only Hilo's own
unchanged files. `read_markdown` reads such a folder back, including what a person added,
and reads nothing through a symbolic link.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import yaml

from app.config import Config
from app.datadir import DataDir
from app.ops.backup import snapshot
from app.ops.transfer.files import (
    ImportFile,
    SkippedFile,
    files_in,
    read_import_file,
    read_own_file,
    write_file,
)
from app.ops.transfer.frontmatter import front_matter, split_front_matter, with_front_matter
from app.ops.transfer.manifest import ExportManifest, content_hash
from app.ops.transfer.marked import marked_entry, read_marked
from app.ops.transfer.memory_md import exported_memory_md
from app.ops.transfer.records import ExportReport, Problem, TransferError, check_user
from app.ops.transfer.user_records import (
    card_records,
    diary_records,
    event_records,
    fact_records,
    profile_records,
    session_records,
    task_records,
)
from app.timeutil import to_rfc3339

__all__ = ["PROFILE_FILE", "HISTORY_FILE", "FORGOTTEN_FILE", "MEMORY_FILE", "FACTS_DIR",
           "CARDS_DIR", "DIARY_DIR", "TASKS_DIR", "SESSIONS_DIR", "TASK_KEYS", "SESSION_KEYS",
           "EVENT_KEYS", "FACT_KEYS", "FACT_EXTRA_KEYS", "FACT_VERSION_KEYS", "CARD_KEYS",
           "CARD_EXTRA_KEYS", "MAX_FILE_BYTES", "looks_like_markdown_export", "export_markdown",
           "read_markdown"]

PROFILE_FILE, HISTORY_FILE, FORGOTTEN_FILE = "profile.md", "history.md", "forgotten.md"
MEMORY_FILE = "MEMORY.md"
FACTS_DIR, CARDS_DIR, DIARY_DIR, TASKS_DIR = "facts", "cards", "diary", "tasks"
SESSIONS_DIR = "sessions"
# A scheduled task's front matter: its JSON lines record without the prompt (the body).
TASK_KEYS = ("id", "name", "schedule", "cron_expr", "source", "is_oneshot", "is_paused",
             "is_trusted", "next_run_at", "last_run_at", "created_at", "updated_at", "timezone")
# A session's front matter, and the fields of each of its messages (their text is quoted).
SESSION_KEYS = ("id", "title", "started_at", "last_event_at", "ended_at")
EVENT_KEYS = ("uuid", "role", "created_at", "importance", "original_length", "tool_call_id",
              "tool_name", "tool_calls_json", "compacted", "card", "distilled_at",
              "consolidated_at")
# A current fact's front matter; then, only when set, what most facts leave empty.
FACT_KEYS = ("id", "category", "key", "source", "created_at", "updated_at", "importance")
FACT_EXTRA_KEYS = ("source_event_uuid", "access_count", "last_accessed_at")
# The fields of a fact version in history.md and forgotten.md (its value is quoted).
FACT_VERSION_KEYS = FACT_KEYS + FACT_EXTRA_KEYS + (
    "superseded_at", "superseded_by", "deleted_at", "forgotten_hash")
CARD_KEYS = ("id", "session_id", "keywords", "level", "is_extractive", "importance",
             "event_count", "folded_into", "created_at", "updated_at")
CARD_EXTRA_KEYS = ("first_event_uuid", "last_event_uuid", "access_count", "last_accessed_at")
# An imported file larger than this is skipped: Hilo's own files hold one value capped
# at a few KB (a diary day, a few dozen entries; the profile, its keys).
MAX_FILE_BYTES = 8 * 1024 * 1024

_DIARY_MARKER = re.compile(r"^<!-- hilo-diary (\{.*\}) -->$")
_SLUG = re.compile(r"[^\w]+", re.UNICODE)
_PLAIN_KEY = re.compile(r'^[^\s"`:][^:\n]*$')
# The only files an export may remove as stale: a manifest that names anything else
# (a path out of the folder) is not obeyed.
_REMOVABLE = re.compile(r"^(?:(?:facts|cards|diary|tasks|sessions)/[^/\\]+\.md|MEMORY\.md)$")
_DIRECTORIES = (FACTS_DIR, CARDS_DIR, DIARY_DIR, TASKS_DIR, SESSIONS_DIR)


def looks_like_markdown_export(folder: Path) -> bool:
    return os.path.lexists(folder / PROFILE_FILE) or any(
        (folder / d).is_dir() for d in _DIRECTORIES)


# -- export ---------------------------------------------------------------------------------


def _slug(text: str, fallback: str) -> str:
    return _SLUG.sub("-", text.casefold()).strip("-_")[:60].strip("-_") or fallback


def _named(directory: str, files: list[tuple[str, str, str]]) -> dict[str, str]:
    """Relative path → content of (stem, what the record is, content) files.

    Stems two records share get a hash of what each record is, never a row id: the same
    memory gets the same names in any database, so exporting an imported memory again
    writes the same files.
    """
    shared = Counter(stem for stem, _, _ in files)
    named: dict[str, str] = {}
    for stem, identity, content in files:
        if shared[stem] > 1:
            stem += "-" + hashlib.sha256(identity.encode("utf-8", "replace")).hexdigest()[:8]
        name, n = f"{directory}/{stem}.md", 1
        while name in named:  # two records alike in everything an import tells apart
            n += 1
            name = f"{directory}/{stem}-{n}.md"
        named[name] = content
    return named


def _with_extras(record: dict, keys: tuple[str, ...], extras: tuple[str, ...]) -> dict:
    """The front matter of a record: `keys`, then those of `extras` that are set."""
    head = {k: record[k] for k in keys}
    head.update((k, record[k]) for k in extras if record.get(k))
    return head


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _profile_markdown(user_id: str, entries: list[dict]) -> str:
    lines = ["# Profile", ""]
    meta, deleted = {}, {}
    for entry in entries:
        key = entry["key"]
        dates = {"source": entry["source"], "created_at": entry["created_at"],
                 "updated_at": entry["updated_at"]}
        if entry["source_event_uuid"]:
            dates["source_event_uuid"] = entry["source_event_uuid"]
        if entry["deleted_at"]:  # kept so that no worker learns the key again
            deleted[key] = {"value": entry["value"], **dates, "deleted_at": entry["deleted_at"]}
            continue
        shown = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
        first, *rest = entry["value"].split("\n")
        lines.append(f"- {shown}: {first}")
        lines.extend(f"  {line}" if line else "" for line in rest)
        meta[key] = dates
    head = {"hilo": "profile", "user_id": user_id, "keys": meta}
    if deleted:
        head["deleted"] = deleted
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


def _session_markdown(session: dict, events: list[dict]) -> str:
    title = f" — {_one_line(session['title'])}" if session["title"] else ""
    lines = [f"# Session {_one_line(session['id'])}{title}"]
    for event in events:
        lines += ["", f"## {event['created_at'][:16].replace('T', ' ')} UTC · {event['role']}",
                  *marked_entry("event", {k: event[k] for k in EVENT_KEYS}, event["content"])]
    # Not trimmed like other files: a message's last line may end in spaces.
    return front_matter({"hilo": "session", **{k: session[k] for k in SESSION_KEYS}}) \
        + "\n" + "\n".join(lines) + "\n"


def _fact_versions_markdown(title: str, intro: str, facts: list[dict]) -> str:
    lines = [f"# {title}", "", intro]
    for fact in facts:
        when = fact["superseded_at"] or fact["deleted_at"]
        lines += ["", f"## {fact['category']}/{_one_line(fact['key'])} · "
                      f"{fact['created_at'][:10]} to {when[:10]}",
                  *marked_entry("fact", {k: fact[k] for k in FACT_VERSION_KEYS}, fact["value"])]
    return "\n".join(lines) + "\n"


def _fact_files(con: apsw.Connection, user_id: str, files: dict[str, str]) -> int:
    """facts/ (current facts), history.md (earlier versions), forgotten.md (tombstones)."""
    current, history, forgotten = [], [], []
    facts = list(fact_records(con, user_id))
    for fact in facts:
        if fact["superseded_at"]:
            history.append(fact)
        elif fact["deleted_at"]:
            forgotten.append(fact)
        else:
            stem = f"{fact['created_at'][:10]}-{fact['category']}-{_slug(fact['key'], 'fact')}"
            current.append((stem, f"{fact['category']}\x1f{fact['key']}", with_front_matter(
                _with_extras(fact, FACT_KEYS, FACT_EXTRA_KEYS), fact["value"])))
    files.update(_named(FACTS_DIR, current))
    files[HISTORY_FILE] = _fact_versions_markdown(
        "Fact history", "Each earlier value of a fact, from when it was stated to when "
        "another replaced it.", history)
    files[FORGOTTEN_FILE] = _fact_versions_markdown(
        "Deleted and forgotten facts", "What you deleted or forgot: Hilo keeps a deleted "
        "fact's key, and of a forgotten fact only hashes of its key and value, so that it "
        "never learns it again.",
        forgotten)
    return len(facts)


def _session_files(con: apsw.Connection, user_id: str, files: dict[str, str]) -> Counter:
    by_session: dict[str, list[dict]] = defaultdict(list)
    written: Counter = Counter()
    for event in event_records(con, user_id):
        by_session[event["session_id"]].append(event)
        written["event"] += 1
    named = []
    for session in session_records(con, user_id):
        stem = f"{session['started_at'][:10]}-{_slug(session['id'], 'session')}"
        named.append((stem, session["id"],
                      _session_markdown(session, by_session.get(session["id"], []))))
        written["session"] += 1
    files.update(_named(SESSIONS_DIR, named))
    return written


def _markdown_files(config: Config, con: apsw.Connection,
                    user_id: str) -> tuple[dict[str, str], Counter]:
    """Relative path → content of every file of the export."""
    files: dict[str, str] = {}
    written = _session_files(con, user_id, files)
    profile = list(profile_records(con, user_id))
    files[PROFILE_FILE] = _profile_markdown(user_id, profile)
    written["profile"] = len(profile)
    written["fact"] = _fact_files(con, user_id, files)

    cards = []
    for card in card_records(con, user_id):
        topic = card["keywords"].split(",")[0] if card["keywords"] else card["summary"][:40]
        stem = f"{card['created_at'][:10]}-{_slug(topic, 'card')}"
        head = _with_extras(card, CARD_KEYS, CARD_EXTRA_KEYS)
        head["is_extractive"] = bool(head["is_extractive"])
        cards.append((stem, f"{card['session_id']}\x1f{card['created_at']}\x1f{card['summary']}",
                      with_front_matter(head, card["summary"])))
        written["card"] += 1
    files.update(_named(CARDS_DIR, cards))

    by_day: dict[str, list[dict]] = defaultdict(list)
    for entry in diary_records(con, user_id):
        by_day[entry["created_at"][:10]].append(entry)
        written["diary"] += 1
    for day, entries in by_day.items():
        files[f"{DIARY_DIR}/{day}.md"] = _diary_markdown(day, entries)

    tasks = []
    for task in task_records(con, user_id):
        head = {k: task[k] for k in TASK_KEYS}
        for flag in ("is_oneshot", "is_paused", "is_trusted"):
            head[flag] = bool(head[flag])
        tasks.append((_slug(task["name"], "task"),
                      f"{task['name']}\x1f{task['schedule']}\x1f{task['prompt']}",
                      with_front_matter(head, task["prompt"])))
        written["task"] += 1
    files.update(_named(TASKS_DIR, tasks))
    memory_md = exported_memory_md(config)
    if memory_md is not None:
        files[MEMORY_FILE] = memory_md
        written["memory_md"] = 1
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
        files, written = _markdown_files(config, con, user_id)
    contents = {relative: text.encode("utf-8") for relative, text in files.items()}
    manifest = ExportManifest.read(out_dir)
    to_write = _files_to_write(out_dir, contents, manifest, overwrite)

    for directory in _DIRECTORIES:
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
        yield {"source": "user", **info, "type": "profile", "key": key,
               "value": "\n".join(lines).strip(), "_where": where}
    deleted = head.get("deleted") if isinstance(head.get("deleted"), dict) else {}
    for key, info in deleted.items():
        if isinstance(info, dict):
            yield {**info, "type": "profile", "key": key, "_where": where}
        else:
            yield Problem(where, f"deleted key {key!r}: expected its fields")


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
    # Messages before what names them (cards, facts), facts before their history.
    for item in _front_matter_files(folder, SESSIONS_DIR):
        if isinstance(item, Problem):
            yield item
        else:
            yield from _parse_session(item[0], item[2], item[3])
    for directory, kind in ((CARDS_DIR, "card"), (FACTS_DIR, "fact")):
        for item in _front_matter_files(folder, directory):
            if isinstance(item, Problem):
                yield item
                continue
            where, file, head, body = item
            modified = to_rfc3339(datetime.fromtimestamp(file.modified, UTC))
            record = {"source": "user", "created_at": modified, **head, "type": kind,
                      "_where": where}
            record.setdefault("updated_at", record["created_at"])
            record["value" if kind == "fact" else "summary"] = body.strip()
            yield record
    for name in (HISTORY_FILE, FORGOTTEN_FILE):
        text = _top_file(folder, name)
        if isinstance(text, Problem):
            yield text
        elif text is not None:
            for item in read_marked(text, "fact", name):
                yield item if isinstance(item, Problem) else {
                    **item[0], "type": "fact", "value": item[1], "_where": name}
    profile = _top_file(folder, PROFILE_FILE)
    if isinstance(profile, Problem):
        yield profile
    elif profile is not None:
        try:
            yield from _parse_profile(profile, PROFILE_FILE)
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
    memory_md = _top_file(folder, MEMORY_FILE)
    if memory_md is not None:
        yield memory_md if isinstance(memory_md, Problem) else {
            "type": "memory_md", "text": memory_md, "_where": MEMORY_FILE}


def _top_file(folder: Path, name: str) -> str | Problem | None:
    """The text of a file at the top of the folder; None when there is none."""
    if not os.path.lexists(folder / name):
        return None
    try:
        return read_import_file(folder / name, MAX_FILE_BYTES).text
    except SkippedFile as exc:
        return _problem(name, exc)


def _parse_session(where: str, head: dict, body: str) -> Iterator[dict | Problem]:
    """A session file: the session, then each of its messages."""
    if head.get("id") is None:
        yield Problem(where, "the front-matter names no session id")
        return
    yield {**{k: head.get(k) for k in SESSION_KEYS}, "type": "session", "_where": where}
    for item in read_marked(body, "event", where):
        yield item if isinstance(item, Problem) else {
            **item[0], "type": "event", "session_id": head["id"], "content": item[1],
            "_where": where}


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
