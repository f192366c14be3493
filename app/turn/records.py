"""Turn records: what each model call of a turn was sent, kept for the turn inspector.

A record is small and holds no text: the prompt's size by layer (estimated tokens), what
was recalled into it and why (ids with their rank in each retrieval stream, the fused
score), the window's event ids, the stretch (app/turn/context.py), and the model
server's own counts — the prompt, the part of it found in the server's cache, the reply —
and the engine's own time for the call (app/model/usage.py; the wall time when the
server reports none), which the queue view sets learning's cost against.
The conversation is in the events; a recalled fact forgotten since is looked up by id
and shows as gone, so forgetting leaves no copy here.

Written after the reply through the front-end's writer without waiting for the commit
(`record_turn`): the person never waits for it, and a record that fails to store is
logged and lost, never the turn.

The records are also where recall counts come from: the worker folds the records written
since its last fold into each recalled fact's and card's access_count (`count_recalls`),
so the chat writes nothing more per turn for them, and consolidation's rule that keeps
often-read facts reads real counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apsw

from app.events import Event
from app.log import get_logger
from app.memory import add_reads
from app.model.messages import message_text
from app.model.stream import ChatReply
from app.model.token_count import MESSAGE_OVERHEAD_TOKENS, estimate_tokens
from app.model.usage import EngineTime
from app.sanitize import redact_secrets
from app.timeutil import utc_now
from app.turn.context import LAYOUT, NOTE_CLOSE, NOTE_OPEN, BuiltContext
from app.writer import Writer

__all__ = ["log", "INSTRUCTIONS", "PROMPT_PARTS", "prompt_layers", "turn_record", "record_turn",
           "TurnRecord", "list_turn_records", "get_turn_record", "COUNT_BATCH", "count_recalls",
           "fold_recall_counts", "recalls_not_counted"]

log = get_logger(__name__)

# The system prompt's own words, before the layers (Hilo's default or the client's).
INSTRUCTIONS = "instructions"
# The prompt in the order it is sent: the system prompt's parts, then the messages (the
# window's own notes, recalled for earlier messages, count as window), then the memory
# recalled for this message and the message itself.
PROMPT_PARTS = (INSTRUCTIONS, *LAYOUT, "window", "note", "message")


def _note_of(text: str) -> str:
    """The memory note a message opens with (app/turn/context.py), or ""."""
    if not text.startswith(NOTE_OPEN):
        return ""
    end = text.find(NOTE_CLOSE)
    return text[:end + len(NOTE_CLOSE)] if end >= 0 else ""


def prompt_layers(context: BuiltContext) -> list[dict]:
    """The prompt's estimated tokens by part, in the order sent (PROMPT_PARTS)."""
    ratio = context.explain.get("chars_per_token") or 1.0

    def cost(message: dict) -> int:
        calls = message.get("tool_calls")
        return (estimate_tokens(message_text(message), ratio) + MESSAGE_OVERHEAD_TOKENS
                + (estimate_tokens(str(calls), ratio) if calls else 0))

    tokens = dict.fromkeys(PROMPT_PARTS, 0)
    items: dict[str, int] = {}
    for layer in context.explain.get("layers", []):
        if layer["name"] in LAYOUT:
            tokens[layer["name"]], items[layer["name"]] = layer["tokens"], layer["items"]
    tokens[INSTRUCTIONS] = max(0, cost(context.messages[0])
                               - sum(tokens[name] for name in LAYOUT))
    *earlier, last = context.messages[1:] or [{"role": "user", "content": ""}]
    tokens["window"], items["window"] = sum(cost(m) for m in earlier), len(earlier)
    tokens["note"] = estimate_tokens(_note_of(message_text(last)), ratio)
    tokens["message"] = cost(last) - tokens["note"]
    return [{"name": name, "tokens": tokens[name], "items": items.get(name)}
            for name in PROMPT_PARTS]


def _recalled(explain: dict) -> list[dict]:
    """What was recalled into the prompt and why: the stretch's layers (recalled at its
    first turn) and this message's note, each with its ranks per stream."""
    continued = explain.get("stretch", {}).get("turn") == "continued"
    recalled = []
    for kind in ("facts", "cards", "events"):
        for item in explain.get(kind, []):
            recalled.append({"kind": kind[:-1], "id": item["id"],
                             "where": "stretch" if continued else "layers",
                             "why": item.get("why", "relevant"),
                             "ranks": item.get("ranks", {}), "score": item.get("score")})
    for item in explain.get("note_why", []):
        recalled.append({"kind": item["kind"], "id": item["id"], "where": "note",
                         "why": "relevant to this message", "ranks": item["ranks"],
                         "score": item["score"]})
    return recalled


def _expected_cached(explain: dict, layers: list[dict]) -> int | None:
    """What the server's cache should hold of this prompt: a continued stretch repeats
    the last prompt word for word and adds this message (and its note); a new one is
    read anew from where it differs, which Hilo does not know."""
    if explain.get("stretch", {}).get("turn") != "continued":
        return None
    return sum(layer["tokens"] for layer in layers if layer["name"] not in ("note", "message"))


def turn_record(context: BuiltContext) -> dict:
    """The record's JSON part for a built context."""
    explain = context.explain
    layers = prompt_layers(context)
    return {"layers": layers, "recalled": _recalled(explain),
            "window": explain.get("window", []), "diary": explain.get("diary", []),
            "stretch": explain.get("stretch", {}), "outside": explain.get("outside", []),
            "chars_per_token": explain.get("chars_per_token"),
            "user_text_truncated": explain.get("user_text_truncated", False),
            "expected_cached": _expected_cached(explain, layers)}


def record_turn(writer: Writer, context: BuiltContext, message: Event,
                reply_event: Event | None, reply: ChatReply | None,
                error: Exception | None = None, engine: EngineTime | None = None) -> None:
    """Queue the turn's record on `writer` and return at once (module docstring);
    `engine`: the call's engine time, when it is known."""
    row = (message.user_id, message.session_id, message.id,
           reply_event.id if reply_event else None, utc_now(),
           context.explain.get("model") or "", context.tokens, context.budget,
           reply.prompt_eval_count if reply else None,
           reply.prompt_cached_count if reply else None,
           reply.eval_count if reply else None,
           redact_secrets(str(error)).text if error is not None else None,
           json.dumps(turn_record(context), separators=(",", ":")),
           None if engine is None else round(engine.total_ms, 3),
           None if engine is None else engine.clock)

    def write(con: apsw.Connection) -> None:
        try:
            con.execute(
                "INSERT INTO turn_records (user_id, session_id, event_id, reply_event_id, "
                "created_at, model, tokens, budget, prompt_tokens, cached_tokens, "
                "reply_tokens, error, record_json, engine_ms, engine_clock) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
        except apsw.Error as exc:  # the inspector loses a record; the turn loses nothing
            log.warning("turn_record.not_stored", event_id=message.id, error=str(exc))

    try:
        writer.submit_nowait(write)
    except Exception as exc:  # noqa: BLE001 — a closed writer: the turn itself is stored or reported
        log.warning("turn_record.not_queued", event_id=message.id, error=str(exc))


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnRecord:
    """One stored record, as the inspector reads it."""

    id: int
    session_id: str
    event_id: int
    reply_event_id: int | None
    created_at: str
    model: str
    tokens: int
    budget: int
    prompt_tokens: int | None
    cached_tokens: int | None
    reply_tokens: int | None
    error: str | None
    engine_ms: float | None  # the engine's time for the call (engine_clock "wall": Hilo's)
    engine_clock: str | None
    record: dict

    @property
    def cached_share(self) -> float | None:
        """Of the prompt the server read, the share its cache already held."""
        if not self.prompt_tokens or self.cached_tokens is None:
            return None
        return min(1.0, self.cached_tokens / self.prompt_tokens)

    def to_dict(self) -> dict[str, Any]:
        fields = {k: v for k, v in self.__dict__.items() if k != "record"}
        return {**fields, **self.record, "cached_share": self.cached_share}


_COLUMNS = ("id, session_id, event_id, reply_event_id, created_at, model, tokens, budget, "
            "prompt_tokens, cached_tokens, reply_tokens, error, engine_ms, engine_clock, "
            "record_json")


def _record(row: tuple) -> TurnRecord:
    return TurnRecord(*row[:-1], json.loads(row[-1]))


def list_turn_records(con: apsw.Connection, user_id: str, *, limit: int = 50,
                      before: int | None = None,
                      session_id: str | None = None) -> list[TurnRecord]:
    """The user's turn records, newest first; `before` an id pages back."""
    where, args = ["user_id = ?"], [user_id]
    if before is not None:
        where.append("id < ?")
        args.append(before)
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    rows = con.execute(f"SELECT {_COLUMNS} FROM turn_records WHERE {' AND '.join(where)} "
                       "ORDER BY id DESC LIMIT ?", (*args, limit))
    return [_record(row) for row in rows]


def get_turn_record(con: apsw.Connection, user_id: str, record_id: int) -> TurnRecord | None:
    row = con.execute(f"SELECT {_COLUMNS} FROM turn_records WHERE user_id = ? AND id = ?",
                      (user_id, record_id)).fetchone()
    return _record(row) if row else None


# -- recall counts ------------------------------------------------------------------------

# Where an item counts as recalled: a new stretch's layers, or a message's note (a
# continued stretch shows what its first turn recalled: one recall, not one per turn).
_RECALLS = ("layers", "note")
_COUNTED = ("fact", "card")
# Records folded per transaction: a backlog (a worker long gone) is folded in steps.
COUNT_BATCH = 2000


def count_recalls(con: apsw.Connection) -> int:
    """Fold the turn records written since the last fold into the recalled facts' and
    cards' read counts, and move the mark past them; run inside the writer's transaction,
    so two workers never count a record twice. Returns the records folded."""
    row = con.execute("SELECT counted_through FROM recall_counts WHERE id = 1").fetchone()
    rows = list(con.execute(
        "SELECT id, user_id, created_at, record_json FROM turn_records WHERE id > ? "
        "ORDER BY id LIMIT ?", (row[0] if row else 0, COUNT_BATCH)))
    if not rows:
        return 0
    reads: dict[tuple[str, str], dict[int, tuple[int, str]]] = {}
    for _, user_id, created_at, record_json in rows:
        for item in json.loads(record_json).get("recalled", []):
            if item.get("where") in _RECALLS and item.get("kind") in _COUNTED:
                counts = reads.setdefault((user_id, item["kind"]), {})
                times, _ = counts.get(item["id"], (0, ""))
                counts[item["id"]] = (times + 1, created_at)
    for (user_id, kind), counts in reads.items():
        add_reads(con, user_id, kind, counts)
    con.execute("INSERT INTO recall_counts (id, counted_through, counted_at) VALUES (1, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET counted_through = excluded.counted_through, "
                "counted_at = excluded.counted_at", (rows[-1][0], utc_now()))
    return len(rows)


def fold_recall_counts(writer: Writer) -> int:
    """count_recalls until every record is folded; the records folded."""
    folded = total = writer.submit(count_recalls)
    while folded == COUNT_BATCH:
        folded = writer.submit(count_recalls)
        total += folded
    return total


def recalls_not_counted(con: apsw.Connection, user_id: str, kind: str, item_id: int) -> int:
    """How often the item was recalled in turns the worker has not counted yet (the
    memory page adds them to its count)."""
    row = con.execute("SELECT counted_through FROM recall_counts WHERE id = 1").fetchone()
    return con.execute(
        "SELECT count(*) FROM turn_records t, json_each(t.record_json, '$.recalled') r "
        "WHERE t.user_id = ? AND t.id > ? AND r.value ->> 'kind' = ? AND r.value ->> 'id' = ? "
        "AND r.value ->> 'where' IN ('layers', 'note')",
        (user_id, row[0] if row else 0, kind, item_id)).fetchone()[0]
