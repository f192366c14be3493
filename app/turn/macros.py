"""Macros: tool chains learned from what the agent did, so a chain the model always
follows can be offered (`hilo chat`) or run (a trusted task) without asking it again.

A macro says: a call of `trigger_tool` whose arguments (their canonical JSON) match
`trigger_args_pattern` (fnmatch) was regularly followed, in the same turn, by a call of
`next_tool` with `next_args`. `support` counts the times it was; `confidence` is the
share of the trigger's successful calls it followed. Learning (`learn_macros`, the
workers' job) reads the stored tool events — an assistant event's tool calls, the tool
events answering them — and is a pure function of them: run twice, same table. Only
Hilo's own calls that a person approved or that ran in a trusted run teach (their result
events' origin is "hilo_tool_approved", app/turn/agent.py): never a client's history,
whose tool calls look the same, nor a call the model made that nobody approved. Calls
whose result was an error (refused, denied, failed) teach nothing. A macro the user
removed stays as a tombstone and is never learned again.
"""

from __future__ import annotations

import fnmatch
import glob
import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import apsw

from app.errors import NotFound
from app.model.tool_calls import stored_tool_calls
from app.timeutil import utc_now
from app.turn.tools.registry import ERROR_PREFIX

__all__ = ["MacroNotFound", "Macro", "LearnCounts", "canonical_arguments", "Call",
           "TEACHING_ORIGIN", "observed_chains", "learn_macros", "list_macros", "find_macro",
           "macro_used", "remove_macro", "users_with_tool_events"]


class MacroNotFound(NotFound):
    """No macro with that id for this user."""


@dataclass(frozen=True)
class Macro:
    id: int
    user_id: str
    trigger_tool: str
    trigger_args_pattern: str
    next_tool: str
    next_args: str
    confidence: float
    support: int
    used_count: int
    created_at: str
    updated_at: str

    @property
    def next_arguments(self) -> Any:
        return json.loads(self.next_args)

    def describe(self) -> str:
        return (f"after {self.trigger_tool} {self.trigger_args_pattern} → "
                f"{self.next_tool} {self.next_args}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LearnCounts:
    learned: int = 0  # new macros
    updated: int = 0  # macros whose confidence or support changed
    dropped: int = 0  # macros no longer seen often enough

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def canonical_arguments(arguments: Any) -> str:
    """Arguments as one JSON text, keys sorted: how calls are compared."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


Call = tuple[str, str]  # (tool, canonical arguments)


# The origin of a tool result that may teach: Hilo ran the call with a person's yes, or
# in a trusted run.
TEACHING_ORIGIN = "hilo_tool_approved"


def observed_chains(con: apsw.Connection, user_id: str) -> tuple[Counter, Counter]:
    """(how often each successful approved call followed another in a turn, how often each
    such call succeeded) over the user's stored tool events."""
    pairs: Counter = Counter()
    calls: Counter = Counter()
    session = None
    turn: list[dict[str, Any]] = []

    def close_turn() -> None:
        done = [c for c in turn if c["ok"]]
        calls.update(c["call"] for c in done)
        pairs.update((a["call"], b["call"]) for a, b in zip(turn, turn[1:], strict=False) if a["ok"] and b["ok"])
        turn.clear()

    rows = con.execute(
        "SELECT session_id, id, role, content, tool_call_id, tool_name, tool_calls_json, "
        "origin FROM events WHERE user_id = ? AND session_id IN "
        "(SELECT DISTINCT session_id FROM events WHERE user_id = ? AND role = 'tool') "
        "ORDER BY session_id, id", (user_id, user_id))
    for session_id, event_id, role, content, call_id, tool_name, calls_json, origin in rows:
        made = stored_tool_calls(calls_json) if role == "assistant" else []
        if session_id != session or role in ("user", "system") or (role == "assistant"
                                                                    and not made):
            close_turn()
            session = session_id
        for index, call in enumerate(made):
            turn.append({"id": call.get("id") or f"call_{event_id}_{index}",
                         "name": str(call.get("name") or ""),
                         "call": (str(call.get("name") or ""),
                                  canonical_arguments(call.get("arguments"))),
                         "ok": False, "answered": False})
        if role == "tool":
            answered = next((c for c in turn if not c["answered"] and c["id"] == call_id), None)
            if answered is None:
                answered = next((c for c in turn if not c["answered"]
                                 and (not tool_name or c["name"] == tool_name)), None)
            if answered is not None:
                answered["answered"] = True
                answered["ok"] = (origin == TEACHING_ORIGIN
                                  and not content.startswith(ERROR_PREFIX))
    close_turn()
    return pairs, calls


def learn_macros(con: apsw.Connection, user_id: str, *, min_support: int) -> LearnCounts:
    """Bring the user's macros in line with their tool events (inside the writer's
    transaction): chains seen at least `min_support` times are added or updated, learned
    ones seen less are dropped, removed ones stay removed."""
    pairs, calls = observed_chains(con, user_id)
    now = utc_now()
    current = {(row[1], row[2], row[3], row[4]): (row[0], row[5], row[6], row[7])
               for row in con.execute(
                   "SELECT id, trigger_tool, trigger_args_pattern, next_tool, next_args, "
                   "confidence, support, removed_at FROM macros WHERE user_id = ?", (user_id,))}
    learned = updated = 0
    keep: set[tuple[str, str, str, str]] = set()
    for ((tool, args), (next_tool, next_args)), support in pairs.items():
        if support < min_support:
            continue
        key = (tool, glob.escape(args), next_tool, next_args)
        keep.add(key)
        confidence = round(min(1.0, support / calls[(tool, args)]), 4)
        found = current.get(key)
        if found is None:
            con.execute(
                "INSERT INTO macros (user_id, trigger_tool, trigger_args_pattern, next_tool, "
                "next_args, confidence, support, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (user_id, *key, confidence, support, now, now))
            learned += 1
        elif found[3] is None and (found[1], found[2]) != (confidence, support):
            con.execute("UPDATE macros SET confidence = ?, support = ?, updated_at = ? "
                        "WHERE id = ?", (confidence, support, now, found[0]))
            updated += 1
    dropped = 0
    for key, (macro_id, _, _, removed_at) in current.items():
        if key not in keep and removed_at is None:
            con.execute("DELETE FROM macros WHERE id = ?", (macro_id,))
            dropped += 1
    return LearnCounts(learned, updated, dropped)


_COLUMNS = ("id, user_id, trigger_tool, trigger_args_pattern, next_tool, next_args, confidence, "
            "support, used_count, created_at, updated_at")


def list_macros(con: apsw.Connection, user_id: str) -> list[Macro]:
    """The user's macros (not the removed ones), most confident first."""
    return [Macro(*row) for row in con.execute(
        f"SELECT {_COLUMNS} FROM macros WHERE user_id = ? AND removed_at IS NULL "
        "ORDER BY confidence DESC, support DESC, id", (user_id,))]


def find_macro(con: apsw.Connection, user_id: str, tool: str, arguments: Any, *,
               confidence: float, min_support: int) -> Macro | None:
    """The most confident macro this call triggers, at least as confident and as often
    seen as asked; None when there is none."""
    args = canonical_arguments(arguments)
    for row in con.execute(
            f"SELECT {_COLUMNS} FROM macros WHERE user_id = ? AND trigger_tool = ? "
            "AND removed_at IS NULL AND confidence >= ? AND support >= ? "
            "ORDER BY confidence DESC, support DESC, id", (user_id, tool, confidence, min_support)):
        macro = Macro(*row)
        if fnmatch.fnmatchcase(args, macro.trigger_args_pattern):
            return macro
    return None


def macro_used(con: apsw.Connection, macro_id: int) -> None:
    con.execute("UPDATE macros SET used_count = used_count + 1 WHERE id = ?", (macro_id,))


def remove_macro(con: apsw.Connection, user_id: str, macro_id: int) -> Macro:
    """Remove a macro for good (a tombstone keeps it from being learned again)."""
    row = con.execute(f"SELECT {_COLUMNS} FROM macros WHERE id = ? AND user_id = ? "
                      "AND removed_at IS NULL", (macro_id, user_id)).fetchone()
    if row is None:
        raise MacroNotFound(f"no macro #{macro_id}: `hilo macros list` shows their ids")
    con.execute("UPDATE macros SET removed_at = ? WHERE id = ?", (utc_now(), macro_id))
    return Macro(*row)


def users_with_tool_events(con: apsw.Connection) -> list[str]:
    return [row[0] for row in con.execute(
        "SELECT DISTINCT user_id FROM events WHERE role = 'tool' ORDER BY user_id")]
