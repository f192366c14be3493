"""Context assembly: the messages a model receives for one turn, always within budget.

The system prompt carries the layers — bootstrap MEMORY.md, profile, the last diary
entry, relevant facts with their dates, relevant context cards, and as many of the
best-ranked past messages as the budget still holds — then come the sliding window of
recent events and the new user message. The budget is `num_ctx − reply_reserve` tokens
and is never exceeded: layers are filled in a fixed priority (bootstrap, profile,
window, facts, cards, diary, events), each taking whole items while they fit, so the
same inputs always give the same context. The past messages come last in priority
because they take whatever room is left.

Layout follows the local model's prompt cache: a server re-evaluates only what follows
the longest prefix it has seen, so the layers that stay the same from turn to turn
(bootstrap, profile, diary) open the layers and what is retrieved for this turn (facts,
cards, past messages) closes them.

A client of `hilo serve` that sends its own history gets that history instead of the
window, as it sent it and never cut: the layers join its system prompt (or open one)
and take what room the history leaves. Its `num_ctx`, when it names one, sets the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import apsw

from app.bootstrap import read_bootstrap  # noqa: F401 — the turn and doctor read it here
from app.chat_formats import (
    SYSTEM_ROLES,
    events_as_messages,
    image_count,
    message_text,
    with_text_appended,
)
from app.config import Config
from app.events import Event
from app.memory import (
    Card,
    Fact,
    cards_by_ids,
    facts_by_ids,
    last_diary,
    list_cards,
    list_facts,
    list_profile,
)
from app.retrieval import STREAM_DEPTH, Candidate, Query, make_query, search
from app.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, estimate_tokens

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with a long-term memory of this user. Use what you "
    "remember when it helps; do not recite it unprompted."
)
PRIORITY = ("bootstrap", "profile", "window", "facts", "cards", "diary", "events")
# Where each system-prompt layer goes: stable ones first, this turn's retrieval last.
LAYOUT = ("bootstrap", "profile", "diary", "facts", "cards", "events")
HEADERS = {
    "bootstrap": "## What the user wants you to always know",
    "profile": "## About the user",
    "facts": "## Relevant facts (with the date they were last stated)",
    "cards": "## Summaries of earlier conversation",
    "events": "## Earlier messages that may be related (oldest first)",
    "diary": "## The previous session",
}
TRUNCATION_MARKER = " […]"
# What an image in a client's message is reckoned to cost (llava encodes one as 576 tokens,
# gemma3 as 256): the layers must leave it room.
IMAGE_TOKENS = 576


@dataclass
class LayerReport:
    name: str
    available: int  # items the layer had to offer
    included: int  # items that fit
    tokens: int

    @property
    def status(self) -> str:
        if self.available == 0:
            return "empty"
        if self.included == self.available:
            return "included"
        return "truncated" if self.included else "dropped"

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "items": self.included,
                "of": self.available, "tokens": self.tokens}


@dataclass
class BuiltContext:
    messages: list[dict]
    tokens: int
    budget: int
    explain: dict = field(default_factory=dict)

    @property
    def system_prompt(self) -> str:
        return message_text(self.messages[0])


def _fact_line(fact: Fact) -> str:
    return f"- [{fact.date}] ({fact.category}) {fact.key}: {fact.value}"


def _card_line(card: Card) -> str:
    keywords = f" (keywords: {card.keywords})" if card.keywords else ""
    return f"- [{card.created_at[:10]}] {card.summary}{keywords}"


# A message quoted from the past is cut to this many characters: one pasted log must not
# take the room of a dozen messages (LoCoMo's turns: 99 % under 340 characters).
EVENT_LINE_CHARS = 500
# How deep the past messages are searched for quoting: first the fusion's own depth, so
# the search shares the BM25 and vector reads of the session stream; twice that only
# when everything found fills less than LOOK_DEEPER_BELOW of the room left (short
# messages). On LoCoMo (tests/bench/locomo.py, quick) context recall is 0.933 with one
# look, 0.935 with this, 0.938 looking 100 deep every time, which costs ~2 ms a turn at
# 10^5 events.
QUOTE_DEPTHS = (STREAM_DEPTH, 2 * STREAM_DEPTH)
LOOK_DEEPER_BELOW = 0.75
# Less room than this many tokens holds no quoted line worth having (date, role, words).
MIN_EVENT_LINE_TOKENS = 12


@dataclass(frozen=True)
class _PastEvent:
    id: int
    session_id: str
    created_at: str
    role: str
    content: str
    compacted: bool

    def line(self) -> str:
        content = " ".join(self.content.split())
        if len(content) > EVENT_LINE_CHARS:
            content = content[:EVENT_LINE_CHARS] + TRUNCATION_MARKER
        return f"- [{self.created_at[:10]}] {self.role}: {content}"


def _past_events(con: apsw.Connection, user_id: str, ids: list[int]) -> dict[int, _PastEvent]:
    if not ids:
        return {}
    rows = con.execute(
        "SELECT id, session_id, created_at, role, content, compacted FROM events "
        f"WHERE +user_id = ? AND id IN ({','.join('?' * len(ids))})", (user_id, *ids))
    return {row[0]: _PastEvent(*row[:5], bool(row[5])) for row in rows}


def _relevant(con: apsw.Connection, query: Query, kind: str, k: int):
    """Top-k relevant items, or the k most recent when nothing matches."""
    user_id = query.user_id
    if k <= 0:
        return [], [], False
    candidates: list[Candidate] = search(con, user_id, query.text, kind, k, query=query)
    ids = [c.id for c in candidates]
    if kind == "fact":
        items = facts_by_ids(con, user_id, ids) or list_facts(con, user_id, limit=k)
    else:
        items = cards_by_ids(con, user_id, ids) or list_cards(con, user_id, limit=k)
    return items, candidates, not ids


class _Budget:
    """Token accounting: items are taken whole, in order, while they fit."""

    def __init__(self, chars_per_token: float, total: int) -> None:
        self.chars_per_token, self.left = chars_per_token, total

    def cost(self, text: str) -> int:
        return estimate_tokens(text, self.chars_per_token)

    def take_section(self, name: str, header: str, lines: list[str], *,
                     shown_in: list | None = None) -> tuple[str, LayerReport]:
        """As many lines as fit under the header; nothing at all if not even one does.

        Lines are taken in the order given (best first); with `shown_in` (one sort key
        per line) the lines kept are shown in that order instead."""
        report = LayerReport(name, len(lines), 0, 0)
        if not lines:
            return "", report
        block = f"\n\n{header}\n"
        spent = self.cost(block)
        kept = []
        for line in lines:
            line_cost = self.cost(line + "\n")
            if spent + line_cost > self.left:
                break
            kept.append(line + "\n")
            spent += line_cost
        if not kept:
            return "", report
        self.left -= spent
        report.included, report.tokens = len(kept), spent
        if shown_in is not None:
            kept = [line for _, line in sorted(zip(shown_in, kept), key=lambda pair: pair[0])]
        return block + "".join(kept), report


def _message_cost(budget: _Budget, message: dict) -> int:
    """A client's message as sent: its text, tool calls and images."""
    cost = budget.cost(message_text(message)) + MESSAGE_OVERHEAD_TOKENS
    if message.get("tool_calls"):
        cost += budget.cost(str(message["tool_calls"]))
    return cost + image_count(message) * IMAGE_TOKENS


def _quotable_events(con: apsw.Connection, query: Query, session_id: str,
                     window: list[Event], budget: _Budget) -> tuple[list[Candidate],
                                                                   list[_PastEvent]]:
    """The best-ranked past events worth quoting, best first: not in the window, and not
    the live part of this session (its un-compacted events: the window shows the recent
    ones, and the message being answered is among them)."""
    if budget.left < MIN_EVENT_LINE_TOKENS:
        return [], []
    in_window = {e.id for e in window}
    kept: list[Candidate] = []
    found: dict[int, _PastEvent] = {}
    for depth in QUOTE_DEPTHS:
        candidates = search(con, query.user_id, query.text, "event", depth, query=query)
        found = _past_events(con, query.user_id, [c.id for c in candidates])
        kept = [c for c in candidates if c.id in found and c.id not in in_window
                and (found[c.id].session_id != session_id or found[c.id].compacted)]
        wanted = budget.cost(HEADERS["events"]) + sum(budget.cost(found[c.id].line() + "\n")
                                                     for c in kept)
        if len(candidates) < depth or wanted > LOOK_DEEPER_BELOW * budget.left:
            break
    return kept, [found[c.id] for c in kept]


def _fit_text(ratio: float, text: str, max_tokens: int) -> str:
    """The longest prefix of text (cut at a line or word) within max_tokens."""
    if estimate_tokens(text, ratio) <= max_tokens:
        return text
    chars = int(max_tokens * ratio) - len(TRUNCATION_MARKER) - 1
    while chars > 0:
        cut = text[:chars]
        space = max(cut.rfind("\n"), cut.rfind(" "))
        if space > chars // 2:
            cut = cut[:space]
        candidate = cut.rstrip() + TRUNCATION_MARKER
        if estimate_tokens(candidate, ratio) <= max_tokens:
            return candidate
        chars -= max(1, chars // 20)
    return ""


def build_context(
    con: apsw.Connection,
    config: Config,
    counter: TokenCounter,
    user_id: str,
    text: str,
    *,
    session_id: str,
    window: list[Event],
    bootstrap: str = "",
    client_system: str | None = None,
    model: str | None = None,
    query: Query | None = None,
    history: list[dict] | None = None,
    num_ctx: int | None = None,
    api: str | None = None,
    show_window: bool = True,
) -> BuiltContext:
    """The messages for one turn: system prompt with layers, the window, the user message.

    `window` is the session's recent un-compacted events (oldest first), without the
    new user message. `query` carries the text's embedding when an embedder is
    configured (make_query); without it retrieval uses keywords, importance and recency.

    `history` is a client's own messages, sent on as they are in place of `text`: the
    layers go into its leading system message (or a new one), the window after that
    message; `text` is then only what retrieval looks for. Without `show_window` the
    window is not sent (the client's history holds it) but still kept out of the quoted
    past. `num_ctx` is the client's context window; `api` ("ollama" or "openai") the
    shape of the window's messages, by default the model server's.
    """
    query = query or make_query(user_id, text, con=con)
    model = model or config.llm.chat_model
    mem = config.memory
    reserve = config.llm.reply_reserve if num_ctx is None else min(config.llm.reply_reserve,
                                                                   num_ctx // 2)
    total = (num_ctx or config.llm.num_ctx) - reserve
    # One ratio for the whole build, so a calibration landing mid-way cannot skew it.
    ratio = counter.chars_per_token(model)
    budget = _Budget(ratio, total)

    opening = None
    if history is None:
        # The system and user messages always go; if together they overflow, the system
        # prompt is held to half the budget and the user text gets the rest, both cut.
        base = (client_system or DEFAULT_SYSTEM_PROMPT).strip()
        budget.left -= 2 * MESSAGE_OVERHEAD_TOKENS
        base = _fit_text(ratio, base, max(0, budget.left) // 2)
        budget.left -= budget.cost(base)
        user_text = _fit_text(ratio, text, budget.left)
        budget.left -= budget.cost(user_text)
        tail = [{"role": "user", "content": user_text}]
    else:
        # The client's messages all go, uncut; the layers get what room they leave.
        if history and history[0].get("role") in SYSTEM_ROLES:
            opening, tail = history[0], list(history[1:])
        else:
            tail = list(history)
        base = message_text(opening) if opening is not None else DEFAULT_SYSTEM_PROMPT
        user_text = text
        budget.left -= (budget.cost(base) + MESSAGE_OVERHEAD_TOKENS
                        + sum(_message_cost(budget, m) for m in tail))

    reports: dict[str, LayerReport] = {}
    sections: dict[str, str] = {}

    capped = _fit_text(ratio, bootstrap, mem.bootstrap_max_tokens) if bootstrap else ""
    sections["bootstrap"], reports["bootstrap"] = budget.take_section(
        "bootstrap", HEADERS["bootstrap"], capped.splitlines() if capped else [])

    profile = [f"{p.key}: {p.value}" for p in list_profile(con, user_id)]
    sections["profile"], reports["profile"] = budget.take_section(
        "profile", HEADERS["profile"], profile)

    # The window keeps the newest events: walk back from the end while they fit.
    recent = window[-mem.window_events:] if mem.window_events and show_window else []
    kept_events: list[Event] = []
    spent = 0
    for event in reversed(recent):
        cost = budget.cost(event.content + (event.tool_calls_json or "")) + MESSAGE_OVERHEAD_TOKENS
        if spent + cost > budget.left:
            break
        kept_events.insert(0, event)
        spent += cost
    budget.left -= spent
    kept_window = events_as_messages(kept_events, api or config.llm.provider)
    reports["window"] = LayerReport("window", len(recent), len(kept_events), spent)

    facts, fact_candidates, facts_fallback = _relevant(con, query, "fact", mem.facts_k)
    sections["facts"], reports["facts"] = budget.take_section(
        "facts", HEADERS["facts"], [_fact_line(f) for f in facts])

    cards, card_candidates, cards_fallback = _relevant(con, query, "card", mem.cards_k)
    sections["cards"], reports["cards"] = budget.take_section(
        "cards", HEADERS["cards"], [_card_line(c) for c in cards])

    diary = last_diary(con, user_id, exclude_session=session_id, limit=mem.diary_k)
    sections["diary"], reports["diary"] = budget.take_section(
        "diary", HEADERS["diary"], [f"[{d.created_at[:10]}] {d.entry}" for d in diary])

    # Whatever room the compiled layers leave goes to the raw past (compacted events
    # included), best-ranked first, shown in the order they were said.
    event_candidates, past = _quotable_events(con, query, session_id, window, budget)
    sections["events"], reports["events"] = budget.take_section(
        "events", HEADERS["events"], [e.line() for e in past],
        shown_in=[(e.created_at, e.id) for e in past])

    layers = "".join(sections[name] for name in LAYOUT)
    system = ({"role": "system", "content": base + layers} if opening is None
              else with_text_appended(opening, layers))
    messages = [system, *kept_window, *tail]
    tokens = sum(_message_cost(budget, m) for m in messages)

    explain = {
        "budget": total,
        "tokens": tokens,
        "model": model,
        "chars_per_token": round(ratio, 3),
        "user_text_truncated": user_text != text,
        "client_messages": None if history is None else len(history),
        "layers": [reports[name].to_dict() for name in PRIORITY],
        "facts": _explain_items(facts, fact_candidates, facts_fallback, reports["facts"]),
        "cards": _explain_items(cards, card_candidates, cards_fallback, reports["cards"]),
        "events": [c.explain() for c in event_candidates[: reports["events"].included]],
        "window": [e.id for e in kept_events],
        "diary": [d.session_id for d in diary[: reports["diary"].included]],
    }
    return BuiltContext(messages, tokens, total, explain)


def _explain_items(items, candidates: list[Candidate], fallback: bool,
                   report: LayerReport) -> list[dict]:
    by_id = {c.id: c for c in candidates}
    explained = []
    for item in items[: report.included]:
        entry = {"id": item.id, "why": "most recent (nothing matched)" if fallback else "relevant"}
        if item.id in by_id:
            entry.update(by_id[item.id].explain())
        explained.append(entry)
    return explained
