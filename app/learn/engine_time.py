"""What learning costs the engine, beside what the chat costs it.

Learning runs on the same small model as the chat, on the same cores, so its cost is
counted in the engine's own seconds (app/model/usage.py), not in calls: one looping call
costs more than a hundred short ones.

- `record_call`: each learning call as it ended → one row of `learning_calls`, queued on
  the worker's writer without waiting (one small write per call, none per token).
- `engine_spend`: over a window, the chat's turns and their engine seconds (the turn
  records the front-end writes anyway: app/turn/records.py) against learning's engine
  seconds: learning's seconds per chat turn, and its ratio to the chat's own.
- `share_check`: before each learning call on the chat's own server, whether learning's
  engine seconds, with that call counted at what the recent calls of its job took, stay
  within `[learn] engine_share` of the chat's over the same window; `share_hold`: the one
  line the owner reads while learning waits for that credit.
- `learning_stall`: whether the learning model has stopped answering — since when, and
  how many calls went unanswered — for `hilo queue status`, the queue page and `hilo
  doctor`: one line, so a dead model is visible without reading logs.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

import apsw

from app.log import get_logger
from app.model.usage import ANSWERED, FAILED, PAST_DEADLINE, TOO_LONG, JsonCall
from app.timeutil import parse_rfc3339, to_rfc3339
from app.writer import Writer

__all__ = ["log", "SPEND_WINDOW", "DETAIL_CHARS", "UNANSWERED", "TYPICAL_OF", "record_call",
           "EngineSpend", "engine_spend", "ShareCheck", "share_check", "ShareHold", "share_hold",
           "LearningStall", "learning_stall"]

log = get_logger(__name__)

# The window the queue view sums over: a day of conversations and what was learned of them.
SPEND_WINDOW = timedelta(hours=24)
DETAIL_CHARS = 500
# Outcomes that mean the model gave no answer at all; a reply cut at its output limit
# was an answer, however useless.
UNANSWERED = (PAST_DEADLINE, FAILED)
# A call about to be made is counted at the median engine time of this many recent calls
# of its job (of any job, when its own has none yet).
TYPICAL_OF = 5


def record_call(writer: Writer, call: JsonCall) -> None:
    """Queue the call's row on `writer` and return at once; a row that cannot be stored
    is logged and lost, never the learning (the client's on_json_call must not raise)."""
    # start-up: `hilo queue status` reads these rows and never writes one
    from app.model.json_modes import server_key
    from app.sanitize import redact_secrets

    row = (to_rfc3339(datetime.fromtimestamp(call.started_at, UTC)), call.job,
           server_key(call.url), call.model, call.outcome, call.prompt_tokens,
           call.cached_tokens, call.reply_tokens, round(call.engine_ms, 3),
           call.engine.clock if call.engine else "wall", round(call.wall_ms, 3),
           call.budget.max_tokens, call.budget.deadline_seconds,
           redact_secrets(call.detail).text[:DETAIL_CHARS] or None)

    def write(con: apsw.Connection) -> None:
        try:
            con.execute(
                "INSERT INTO learning_calls (created_at, job, server, model, outcome, "
                "prompt_tokens, cached_tokens, reply_tokens, engine_ms, engine_clock, wall_ms, "
                "max_tokens, deadline_seconds, detail) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
        except apsw.Error as exc:
            log.warning("learning_call.not_stored", job=call.job, error=str(exc))

    try:
        writer.submit_nowait(write)
    except Exception as exc:  # noqa: BLE001 — a closed writer: the call itself is done
        log.warning("learning_call.not_queued", job=call.job, error=str(exc))


@dataclass(frozen=True)
class EngineSpend:
    """The engine's seconds over a window: the chat's, and learning's beside them."""

    since: str  # the window's start (RFC 3339)
    chat_turns: int  # chat calls with a reply, whose engine time is known
    chat_engine_s: float
    learning_calls: int
    learning_engine_s: float
    longest_learning_call_s: float
    over_budget: int  # learning calls cut at their output limit or deadline

    @property
    def learning_per_turn_s(self) -> float | None:
        return self.learning_engine_s / self.chat_turns if self.chat_turns else None

    @property
    def chat_per_turn_s(self) -> float | None:
        return self.chat_engine_s / self.chat_turns if self.chat_turns else None

    @property
    def ratio(self) -> float | None:
        """Learning's engine time per chat turn over the chat's own (target ≤ 0.5)."""
        return self.learning_engine_s / self.chat_engine_s if self.chat_engine_s else None

    def line(self) -> str:
        """In one line for a person: learning's engine seconds per chat turn beside the
        chat's own."""
        calls = f"{self.learning_calls} learning call" + ("" if self.learning_calls == 1 else "s")
        cut = f", {self.over_budget} cut at their budget" if self.over_budget else ""
        detail = (f"{calls}, the longest {self.longest_learning_call_s:.1f} s{cut}"
                  if self.learning_calls else "no learning call")
        if self.learning_per_turn_s is None or self.chat_per_turn_s is None:
            return (f"Learning, last 24 h: {self.learning_engine_s:.1f} s of the engine "
                    f"({detail}); no chat turn to set it against")
        ratio = f"{self.ratio:.2f}×" if self.ratio is not None else "-"
        return (f"Learning, last 24 h: {self.learning_per_turn_s:.1f} s of the engine per chat "
                f"turn, {ratio} the chat's own {self.chat_per_turn_s:.1f} s "
                f"({self.chat_turns} turns; {detail})")

    def to_dict(self) -> dict:
        rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        return {**rounded, **{name: None if value is None else round(value, 3) for name, value in (
            ("learning_per_turn_s", self.learning_per_turn_s),
            ("chat_per_turn_s", self.chat_per_turn_s), ("ratio", self.ratio))}}


def engine_spend(con: apsw.Connection, now: datetime | None = None,
                 window: timedelta = SPEND_WINDOW) -> EngineSpend:
    """What the chat and learning cost the engine since `now - window` (every user's:
    they share the engine)."""
    since = to_rfc3339((now or datetime.now(UTC)) - window)
    turns, chat_ms = con.execute(
        "SELECT count(*), coalesce(sum(engine_ms), 0) FROM turn_records "
        "WHERE created_at >= ? AND engine_ms IS NOT NULL AND error IS NULL",
        (since,)).fetchone()
    calls, learning_ms, longest, cut = con.execute(
        "SELECT count(*), coalesce(sum(engine_ms), 0), coalesce(max(engine_ms), 0), "
        "coalesce(sum(outcome IN (?, ?)), 0) FROM learning_calls WHERE created_at >= ?",
        (TOO_LONG, PAST_DEADLINE, since)).fetchone()
    return EngineSpend(since, turns, chat_ms / 1000, calls, learning_ms / 1000, longest / 1000,
                       cut)


@dataclass(frozen=True)
class ShareCheck:
    """Whether learning may make its next call and stay within its share of the engine."""

    share: float  # [learn] engine_share
    chat_engine_s: float  # over the window
    learning_engine_s: float
    next_call_s: float  # the call about to be made, at its job's recent typical cost

    @property
    def allows(self) -> bool:
        if self.share <= 0:
            return False
        if self.chat_engine_s <= 0:  # no chat to set it against (an import, the memory API)
            return True
        return self.learning_engine_s + self.next_call_s <= self.share * self.chat_engine_s

    def line(self) -> str:
        return (f"learning has used {self.learning_engine_s:.1f} s of the engine against the "
                f"chat's {self.chat_engine_s:.1f} s over the last 24 h; its share is "
                f"{self.share:g}× and its next call would take about {self.next_call_s:.1f} s")


def share_check(con: apsw.Connection, share: float, job: str | None = None,
                now: datetime | None = None, window: timedelta = SPEND_WINDOW) -> ShareCheck:
    """Learning's spend against `share` of the chat's over the window, with the next call
    of `job` counted at the median of its job's last TYPICAL_OF calls that ran."""
    spend = engine_spend(con, now, window)
    ran = (ANSWERED, TOO_LONG, PAST_DEADLINE)
    recent: list[float] = []
    if job is not None:
        recent = [ms for (ms,) in con.execute(
            "SELECT engine_ms FROM learning_calls WHERE job = ? AND outcome IN (?, ?, ?) "
            "ORDER BY id DESC LIMIT ?", (job, *ran, TYPICAL_OF))]
    if not recent:
        recent = [ms for (ms,) in con.execute(
            "SELECT engine_ms FROM learning_calls WHERE outcome IN (?, ?, ?) "
            "ORDER BY id DESC LIMIT ?", (*ran, TYPICAL_OF))]
    typical = statistics.median(recent) / 1000 if recent else 0.0
    return ShareCheck(share, spend.chat_engine_s, spend.learning_engine_s, typical)


@dataclass(frozen=True)
class ShareHold:
    """Learning waiting for its share: how many of the people's turns wait."""

    share: float
    waiting_turns: int

    def line(self) -> str:
        turns = f"{self.waiting_turns} turn" + ("" if self.waiting_turns == 1 else "s")
        return (f"learning is holding to its share ({self.share:g}× the chat's engine time): "
                f"{turns} wait")

    def to_dict(self) -> dict:
        return {**asdict(self), "line": self.line()}


def share_hold(con: apsw.Connection, share: float,
               now: datetime | None = None) -> ShareHold | None:
    """Whether learning's share is spent (no credit for a typical call) while turns wait to
    be learned; None when it is not holding anything back."""
    if share_check(con, share, None, now).allows:
        return None
    (waiting,) = con.execute("SELECT count(*) FROM events WHERE distilled_at IS NULL "
                             "AND role = 'user'").fetchone()
    return ShareHold(share, waiting) if waiting else None


@dataclass(frozen=True)
class LearningStall:
    """A learning model that has stopped answering: since when, and what became of the
    calls since."""

    server: str
    answered_last_at: str | None  # its last answer (None: it never answered one)
    unanswered: int  # calls since then with no answer
    past_deadline: int  # of those, cut at their deadline
    deadline_seconds: float
    first_unanswered_at: str
    chats_answered: bool  # the latest chat turn got its reply

    def line(self, now: datetime | None = None) -> str:
        """One line for a person: what is wrong, since when, and that chats still work."""
        since = _clock(self.answered_last_at or self.first_unanswered_at, now)
        n, late = self.unanswered, self.past_deadline
        deadline = f"past {'its' if late == 1 else 'their'} {self.deadline_seconds:g} s deadline"
        calls = f"{n} call" + ("" if n == 1 else "s")
        how = (f"{calls} {deadline}" if late == n else f"{calls} failed" if not late
               else f"{calls}: {late} {deadline}, {n - late} failed")
        answered = ("has not answered a learning call since " + since if self.answered_last_at
                    else "has answered none of its learning calls since " + since)
        chats = "; chats still work" if self.chats_answered else ""
        return (f"learning: the model at {self.server} {answered} ({how}){chats}; "
                "what it was asked is learned by rule meanwhile")

    def to_dict(self) -> dict:
        return {**asdict(self), "line": self.line()}


def learning_stall(con: apsw.Connection) -> LearningStall | None:
    """The learning model whose latest calls got no answer, if any (the server of the
    most recent learning call)."""
    last = con.execute("SELECT server FROM learning_calls ORDER BY id DESC LIMIT 1").fetchone()
    if last is None:
        return None
    (server,) = last
    (answered_id, answered_at) = con.execute(
        "SELECT max(id), max(created_at) FROM learning_calls WHERE server = ? AND outcome IN "
        "(?, ?)", (server, ANSWERED, TOO_LONG)).fetchone()
    unanswered, past_deadline, deadline, first_at = con.execute(
        "SELECT count(*), coalesce(sum(outcome = ?), 0), max(deadline_seconds), min(created_at) "
        "FROM learning_calls WHERE server = ? AND id > ? AND outcome IN (?, ?)",
        (PAST_DEADLINE, server, answered_id or 0, *UNANSWERED)).fetchone()
    if not unanswered:
        return None
    latest = con.execute("SELECT reply_event_id IS NOT NULL AND error IS NULL FROM turn_records "
                         "ORDER BY id DESC LIMIT 1").fetchone()
    return LearningStall(server, answered_at, unanswered, past_deadline, deadline or 0.0,
                         first_at, bool(latest and latest[0]))


def _clock(moment: str, now: datetime | None = None) -> str:
    """A time as a person reads it in a status line: the local time of day, with its date
    when it was not today."""
    local = parse_rfc3339(moment).astimezone()
    today = (now or datetime.now(UTC)).astimezone().date()
    return local.strftime("%H:%M" if local.date() == today else "%Y-%m-%d %H:%M")
