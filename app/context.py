"""Context assembly: the messages a model receives for one turn, always within budget.

The system prompt carries the layers — bootstrap MEMORY.md, profile, relevant facts
with their dates, relevant context cards, the last diary entry — then come the sliding
window of recent events and the new user message. The budget is
`num_ctx − reply_reserve` tokens and is never exceeded: when it is tight, layers are
filled in a fixed priority (bootstrap, profile, window, facts, cards, diary), each
taking whole items while they fit, so the same inputs always give the same context.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import apsw

from app.bootstrap import read_bootstrap  # noqa: F401 — the turn and doctor read it here
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
from app.retrieval import Candidate, Query, make_query, search
from app.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, estimate_tokens

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with a long-term memory of this user. Use what you "
    "remember when it helps; do not recite it unprompted."
)
PRIORITY = ("bootstrap", "profile", "window", "facts", "cards", "events", "diary")
HEADERS = {
    "bootstrap": "## What the user wants you to always know",
    "profile": "## About the user",
    "facts": "## Relevant facts (with the date they were last stated)",
    "cards": "## Summaries of earlier conversation",
    "events": "## Earlier messages that may be related",
    "diary": "## The previous session",
}
TRUNCATION_MARKER = " […]"


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
        return self.messages[0]["content"]


def _fact_line(fact: Fact) -> str:
    return f"- [{fact.date}] ({fact.category}) {fact.key}: {fact.value}"


def _card_line(card: Card) -> str:
    keywords = f" (keywords: {card.keywords})" if card.keywords else ""
    return f"- [{card.created_at[:10]}] {card.summary}{keywords}"


# Raw messages quoted from the past are cut to this many characters each.
EVENT_LINE_CHARS = 300


def _event_line(con: apsw.Connection, user_id: str, event_id: int) -> str | None:
    row = con.execute("SELECT created_at, role, content FROM events WHERE id = ? AND user_id = ?",
                      (event_id, user_id)).fetchone()
    if row is None:
        return None
    created_at, role, content = row
    content = " ".join(content.split())
    if len(content) > EVENT_LINE_CHARS:
        content = content[:EVENT_LINE_CHARS] + TRUNCATION_MARKER
    return f"- [{created_at[:10]}] {role}: {content}"


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

    def take_section(self, name: str, header: str, lines: list[str]) -> tuple[str, LayerReport]:
        """As many lines as fit under the header; nothing at all if not even one does."""
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
        return block + "".join(kept), report


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
) -> BuiltContext:
    """The messages for one turn: system prompt with layers, the window, the user message.

    `window` is the session's recent un-compacted events (oldest first), without the
    new user message. `query` carries the text's embedding when an embedder is
    configured (make_query); without it retrieval uses keywords, importance and recency.
    """
    query = query or make_query(user_id, text)
    model = model or config.llm.chat_model
    mem = config.memory
    total = config.llm.num_ctx - config.llm.reply_reserve
    base = (client_system or DEFAULT_SYSTEM_PROMPT).strip()
    # One ratio for the whole build, so a calibration landing mid-way cannot skew it.
    ratio = counter.chars_per_token(model)
    budget = _Budget(ratio, total)

    # The system and user messages always go; if together they overflow, the system
    # prompt is held to half the budget and the user text gets the rest, both cut.
    budget.left -= 2 * MESSAGE_OVERHEAD_TOKENS
    base = _fit_text(ratio, base, max(0, budget.left) // 2)
    budget.left -= budget.cost(base)
    user_text = _fit_text(ratio, text, budget.left)
    budget.left -= budget.cost(user_text)

    reports: dict[str, LayerReport] = {}
    sections: dict[str, str] = {}

    capped = _fit_text(ratio, bootstrap, mem.bootstrap_max_tokens) if bootstrap else ""
    sections["bootstrap"], reports["bootstrap"] = budget.take_section(
        "bootstrap", HEADERS["bootstrap"], capped.splitlines() if capped else [])

    profile = [f"{p.key}: {p.value}" for p in list_profile(con, user_id)]
    sections["profile"], reports["profile"] = budget.take_section(
        "profile", HEADERS["profile"], profile)

    # The window keeps the newest events: walk back from the end while they fit.
    recent = window[-mem.window_events:] if mem.window_events else []
    kept_window: list[dict] = []
    spent = 0
    for event in reversed(recent):
        cost = budget.cost(event.content) + MESSAGE_OVERHEAD_TOKENS
        if spent + cost > budget.left:
            break
        kept_window.insert(0, {"role": event.role, "content": event.content})
        spent += cost
    budget.left -= spent
    reports["window"] = LayerReport("window", len(recent), len(kept_window), spent)

    facts, fact_candidates, facts_fallback = _relevant(con, query, "fact", mem.facts_k)
    sections["facts"], reports["facts"] = budget.take_section(
        "facts", HEADERS["facts"], [_fact_line(f) for f in facts])

    cards, card_candidates, cards_fallback = _relevant(con, query, "card", mem.cards_k)
    sections["cards"], reports["cards"] = budget.take_section(
        "cards", HEADERS["cards"], [_card_line(c) for c in cards])

    # When the compiled layers know nothing relevant, quote the raw past (compacted
    # events included), leaving out what the window already shows.
    event_candidates: list[Candidate] = []
    if facts_fallback and cards_fallback and mem.cards_k:
        in_window = {e.id for e in window}
        event_candidates = [
            c for c in search(con, user_id, text, "event", mem.cards_k + len(in_window) + 1,
                              query=query)
            if c.id not in in_window][: mem.cards_k]
    event_lines = [line for c in event_candidates
                   if (line := _event_line(con, user_id, c.id)) is not None]
    sections["events"], reports["events"] = budget.take_section(
        "events", HEADERS["events"], event_lines)

    diary = last_diary(con, user_id, exclude_session=session_id, limit=mem.diary_k)
    sections["diary"], reports["diary"] = budget.take_section(
        "diary", HEADERS["diary"], [f"[{d.created_at[:10]}] {d.entry}" for d in diary])

    system = base + "".join(sections[name] for name in PRIORITY if name in sections)
    messages = [{"role": "system", "content": system}, *kept_window,
                {"role": "user", "content": user_text}]
    tokens = sum(budget.cost(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    explain = {
        "budget": total,
        "tokens": tokens,
        "model": model,
        "chars_per_token": round(ratio, 3),
        "user_text_truncated": user_text != text,
        "layers": [reports[name].to_dict() for name in PRIORITY],
        "facts": _explain_items(facts, fact_candidates, facts_fallback, reports["facts"]),
        "cards": _explain_items(cards, card_candidates, cards_fallback, reports["cards"]),
        "events": [c.explain() for c in event_candidates[: reports["events"].included]],
        "window": [e.id for e in recent[len(recent) - len(kept_window):]],
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
