"""How memory records, search hits and scheduled tasks read as text, for the CLI and the REPL.

Two forms of the same records live here side by side:

- rows, for the `hilo memory` and `hilo tasks` listings: one record a line, fixed fields
  first, so grep and cut can take them apart (a fact's row says when it was superseded);
- lines, for the REPL's slash commands, read in the middle of a conversation.

Nothing here prints or imports a front-end: the callers decide where text goes and how
it is styled. Imports stay light (the CLI's start-up pays for this module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.timeutil import parse_rfc3339

# Annotations only: app.recall.fusion and app.tasks load the search and cron parsing.
if TYPE_CHECKING:
    from app.memory import Card, DiaryEntry, Fact, ProfileEntry
    from app.recall.fusion import SearchHit
    from app.tasks.delivery import RunReport
    from app.tasks.runs import TaskLog
    from app.tasks.store import ScheduledTask
    from app.turn.macros import Macro

__all__ = ["HIT_ROW_CHARS", "ago", "profile_line", "EXCERPT_CHARS", "excerpt", "fact_text",
           "fact_row", "EDIT_VERBS", "edited_text", "as_of_text", "hit_row", "macro_row",
           "task_row", "task_log_rows", "fact_line", "card_line", "diary_line", "hit_line",
           "task_lines", "task_reply_lines"]

HIT_ROW_CHARS = 200  # a search hit's text in a `hilo memory search` row


def ago(seconds: float | None) -> str:
    """A duration as people say it: "42 s", "3 min 5 s", "2 h 10 min", "4 d 1 h"."""
    if seconds is None:
        return "-"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


# -- both ------------------------------------------------------------------------------------


def profile_line(entry: ProfileEntry) -> str:
    return f"{entry.key}: {entry.value}"


# Of a recalled text, what a line of /explain shows.
EXCERPT_CHARS = 80


def excerpt(text: str, chars: int = EXCERPT_CHARS) -> str:
    """`text` on one line, cut to `chars` with "…"."""
    line = " ".join(text.split())
    return line if len(line) <= chars else line[:chars - 1].rstrip() + "…"


def fact_text(fact: Fact) -> str:
    """The fact itself, as the context and search results show it."""
    return f"{fact.category} · {fact.key}: {fact.value}"


# -- rows: `hilo memory`, `hilo tasks` ----------------------------------------------------------


def fact_row(fact: Fact) -> str:
    return (f"#{fact.id} [{fact.date}] ({fact.category}) {fact.key}: {fact.value}"
            + (" (superseded)" if fact.superseded_at else "")
            + (" (deleted)" if fact.deleted_at else ""))


# What a user's edit did, as `hilo memory add|edit|set-profile` say it.
EDIT_VERBS = {"insert": "Added", "update": "Updated", "unchanged": "Unchanged",
              "supersede": "Updated (the old value is kept as history)",
              "history": "Kept as history (a newer value was said since)"}


def edited_text(action: str, fact: Fact | None) -> str:
    """`hilo memory add` and `edit`: what was done to which fact."""
    if fact is None:
        return f"Nothing stored ({action})"
    return f"{EDIT_VERBS.get(action, action)}: {fact_row(fact)}"


def as_of_text(moment: str, profile: dict[str, str], facts: list[Fact]) -> str:
    """`hilo memory as-of`: the profile, then the facts, as they were at `moment`."""
    lines = [f"As of {moment}", "Profile:"]
    lines += [f"  {key}: {value}" for key, value in profile.items()] or ["  (empty)"]
    lines += ["Facts:"] + ([f"  {fact_row(f)}" for f in facts] or ["  (no facts)"])
    return "\n".join(lines)


def hit_row(hit: SearchHit, explain: bool = False) -> str:
    row = f"{hit.kind} #{hit.id} [{hit.created_at[:10]}] {hit.text[:HIT_ROW_CHARS]}"
    row += f"\n    ({hit.why.text()})"
    if explain:
        row += f"  ranks={hit.candidate.ranks} score={hit.candidate.score:.4f}"
    return row


def macro_row(macro: Macro) -> str:
    return (f"#{macro.id} {macro.trigger_tool} {macro.trigger_args_pattern} → {macro.next_tool} "
            f"{macro.next_args}  confidence={macro.confidence:.2f} seen={macro.support} "
            f"used={macro.used_count}")


def task_row(task: ScheduledTask, description: str, zone: str) -> str:
    """A task and who added it; then, indented, `description` (the schedule in words,
    with its next run), its last run in `zone`'s time, and its last error."""
    from app.tasks.schedule import local_text, time_zone  # start-up: croniter, cron-descriptor

    marks = [mark for mark, on in (("paused", task.is_paused), ("trusted", task.is_trusted))
             if on]
    row = (f"#{task.id}  {task.name}  [{task.original_schedule}]"
           + "".join(f"  ({mark})" for mark in marks) + f"  {task.added_by}")
    row += f"\n      {description}"
    if task.last_run_at:
        last = local_text(parse_rfc3339(task.last_run_at).replace(second=0, microsecond=0),
                          time_zone(zone))
        row += f"\n      last run: {last}" + (f", {task.last_status}" if task.last_status else "")
    if task.last_error:
        row += f"\n      last error: {task.last_error}"
    return row


def task_log_rows(log: TaskLog) -> list[str]:
    """A task's runs, then the messages of its session."""
    return ([f"run {r.scheduled_for} {r.status}" + (f": {r.error}" if r.error else "")
             + (f" (not delivered: {r.notify_error})" if r.notify_error else "")
             for r in log.runs]
            + [f"  {e.created_at[:16]} {e.role}: {e.content}" for e in log.events])


# -- lines: the REPL ----------------------------------------------------------------------------


def fact_line(fact: Fact) -> str:
    return f"#{fact.id}  [{fact.date}] {fact_text(fact)}"


def card_line(card: Card) -> str:
    keywords = f"  (keywords: {card.keywords})" if card.keywords else ""
    return f"#{card.id}  [{card.created_at[:10]}] {card.summary}{keywords}"


def diary_line(entry: DiaryEntry) -> str:
    return f"[{entry.created_at[:10]}] {entry.session_id}: {entry.entry}"


def hit_line(hit: SearchHit) -> str:
    return f"{hit.kind} #{hit.id}  [{hit.created_at[:10]}] {hit.text}"


def task_lines(task: ScheduledTask, description: str) -> list[tuple[str, str | None]]:
    """A task, `description` (the schedule in words, with its next run) and its last error,
    as (text, style) lines: the state plain, the description dim, an error yellow."""
    paused = "  (paused)" if task.is_paused else ""  # the next run is in the description
    lines: list[tuple[str, str | None]] = [
        (f"#{task.id}  {task.name}: {task.original_schedule}{paused}", None),
        (f"      {description}", "dim"),
    ]
    if task.last_error:
        lines.append((f"      last error: {task.last_error}", "yellow"))
    return lines


def task_reply_lines(report: RunReport) -> list[tuple[str, str | None]]:
    """A scheduled task's run as the REPL tells it: which task and when (this machine's
    local time), then its reply, or why it failed in yellow."""
    when = ""
    if report.finished_at:
        when = f" at {parse_rfc3339(report.finished_at).astimezone():%H:%M}"
    head = f"⏰ Task #{report.task_id} {report.name}{when}:"
    return [(head, "bold"), (report.text, None if report.status == "done" else "yellow")]
