"""Context assembly: the messages a model receives for one turn, always within budget.

The system prompt carries the layers — bootstrap MEMORY.md, profile, the last diary
entry, relevant facts with their dates, relevant context cards, and the best-ranked past
messages — then come the window of recent events and the new user message. The budget
is `num_ctx − reply_reserve` tokens and is never exceeded: layers are filled in a fixed
priority (bootstrap, profile, window, facts, cards, diary, events), each taking whole
items while they fit, so the same inputs always give the same context.

Layout follows the local model's prompt cache. A server keeps the last prompt it read
(and what it wrote after it) and re-evaluates only what follows the longest prefix it
has seen, which on a CPU is most of the wait before the first token. So a session's
prompt is built in stretches (`ContextPlan`, kept by the caller between turns):

- A stretch's first turn builds the system prompt: the stable layers first (bootstrap,
  profile, diary), then what is retrieved for that message (facts, cards, past
  messages), at most `[memory] retrieved_max_tokens` — or, for a conversation's first
  message, what `[memory] fill_first_message` says: as much as the budget holds, or
  ("auto", the default) as much as the engine reads in a configured extra time.
  The window starts there.
- The stretch's later turns keep that system prompt, word for word, and the
  conversation grows append-only: the window keeps every event since the stretch began,
  compacted into cards or not. What is retrieved for a new message — facts, cards and
  past messages with evidence of relevance that the prompt does not show yet, at most
  `retrieved_max_tokens` — goes into that message, just before its text, and stays
  there on later turns. So a turn reads anew only its own message and that note.
- When the next turn would not fit, the stretch ends and a new one starts from the
  current message: one large step rather than a sliding window that changes the prompt
  at every turn. So does a change that takes back what the prompt shows (a fact
  forgotten or corrected, a profile key deleted, from any process: the memory
  generation, app/memory/provenance.py, and app/turn/corrected.py): it leaves the very
  next prompt, which app/turn/corrected.py's rule builds; a session whose prompt shows
  none of it keeps its stretch (and the server's cache of it).

Nothing recalled repeats what the prompt already says: no past message whose words its
messages hold, and no fact or card learned from messages of this session that it holds
word for word (a client resends its history, compacted into cards or not).

A client of `hilo serve` that sends its own history gets that history instead of the
window, as it sent it and never cut: the layers join its system prompt (or open one),
notes go into its messages as they do in the window, and the layers take what room the
history leaves. Its `num_ctx`, when it names one, sets the budget.

A built context says which of what it shows is content from outside (`outside`: a page,
a client's tool result, an import, or memory learned from one — the trust rules), from
the items' own provenance, so the turn knows it may not act on it unasked
(app/turn/agent.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import apsw

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
    memory_generation,
)
from app.memory.bootstrap import read_bootstrap
from app.model.messages import (
    SYSTEM_ROLES,
    image_count,
    message_text,
    quotes_retrieved_documents,
    with_text_appended,
    with_text_prepended,
)
from app.model.token_count import MESSAGE_OVERHEAD_TOKENS, TokenCounter, estimate_tokens
from app.model.tool_calls import events_as_messages
from app.recall.fusion import STREAM_DEPTH, Candidate, matching, search, search_ahead
from app.recall.query import Query, make_query
from app.recall.state import Recall
from app.turn.carried import Carried, saying_more
from app.turn.corrected import corrected_conversation, corrected_items, takes_back_shown
from app.turn.quotes import TRUNCATION_MARKER, Quote, pack_quotes, quotable_events

__all__ = ["DEFAULT_SYSTEM_PROMPT", "PRIORITY", "LAYOUT", "RETRIEVED", "GROWTH_SHARE", "NOTE_OPEN",
           "NOTE_CLOSE", "HEADERS", "IMAGE_TOKENS", "LayerReport", "ContextPlan", "BuiltContext",
           "ContextRequest", "build_context", "read_bootstrap"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with a long-term memory of this user. Use what you "
    "remember when it helps; do not recite it unprompted."
)
PRIORITY = ("bootstrap", "profile", "window", "facts", "cards", "diary", "events")
# Where each system-prompt layer goes: stable ones first, this turn's retrieval last.
LAYOUT = ("bootstrap", "profile", "diary", "facts", "cards", "events")
# What is retrieved for one message, in the order a note shows it.
RETRIEVED = ("facts", "cards", "events")
# A new stretch (after a conversation's first message) leaves this share of the budget
# free, for the turns it will hold.
GROWTH_SHARE = 4
# A note: memory retrieved for one message, placed just before its text.
NOTE_OPEN, NOTE_CLOSE = "<memory>\n", "\n</memory>\n\n"
HEADERS = {
    "bootstrap": "## What the user wants you to always know",
    "profile": "## About the user",
    "facts": "## Relevant facts (with the date they were last stated)",
    "cards": "## Summaries of earlier conversation",
    "events": "## Earlier messages (oldest first)",
    "diary": "## The previous session",
}
# What an image in a client's message is reckoned to cost (llava encodes one as 576 tokens,
# gemma3 as 256): the layers must leave it room.
IMAGE_TOKENS = 576


@dataclass
class LayerReport:
    name: str
    available: int  # items the layer had to offer
    included: int  # items that fit
    tokens: int
    kept: list[int] = field(default_factory=list)  # which ones, by their place in the offer
    # Of those, the ones in a shorter form, and which (app/turn/quotes.py: Quote.form).
    shortened: dict[int, str] = field(default_factory=dict)

    def chosen(self, items: list) -> list:
        """The offered items that went in, best first."""
        return [items[i] for i in self.kept]

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


@dataclass(frozen=True)
class ContextPlan:
    """What a session's prompt has shown since its stretch began, so the next turn's
    prompt starts with the same text (the model server's cache then holds all of it).

    A function of the turns that made it; lost, the next turn starts a new stretch."""

    key: tuple  # what the stretch was built for: model, budget, system prompt, mode
    layers: str  # the system prompt's layers, word for word
    shown: frozenset[str]  # what the prompt shows: "fact:3", "card:9", "event:41"
    notes: tuple[tuple[str, str], ...] = ()  # (message key, its note)
    window_start: int | None = None  # the first event the window shows (window mode)
    explain: dict = field(default_factory=dict, compare=False)  # the stretch's first build
    outside: frozenset[str] = frozenset()  # what the layers and notes show from outside
    # The memory generation (app/memory/provenance.py) its layers and notes were read at:
    # a change since that takes back what it shows ends the stretch.
    generation: int = 0


@dataclass
class BuiltContext:
    messages: list[dict]
    tokens: int
    budget: int
    explain: dict = field(default_factory=dict)
    plan: ContextPlan | None = None  # give it to the session's next turn
    # What it shows from outside ("fact:3", "event:41", "message:2" of a client's history).
    outside: frozenset[str] = frozenset()

    @property
    def system_prompt(self) -> str:
        return message_text(self.messages[0])

    @property
    def outside_content(self) -> bool:
        """Whether it holds content from outside: a turn on it acts only on a fresh yes."""
        return bool(self.outside)

    def reading(self, events: list[Event]) -> BuiltContext:
        """This context with `events` after it (an agent turn's own calls and results so
        far), as far as what it holds from outside goes."""
        outside = self.outside | frozenset(_outside_items("event", events))
        if outside == self.outside:
            return self
        return replace(self, outside=outside, explain={**self.explain, "outside": sorted(outside)})


def _fact_line(fact: Fact) -> str:
    return f"- [{fact.date}] ({fact.category}) {fact.key}: {fact.value}"


def _card_line(card: Card) -> str:
    keywords = f" (keywords: {card.keywords})" if card.keywords else ""
    return f"- [{card.created_at[:10]}] {card.summary}{keywords}"


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
    """Token accounting: items are taken whole, in order, while they fit. `retrieval`,
    when set, is what the retrieved sections (facts, cards, past messages) may still take
    of it."""

    def __init__(self, chars_per_token: float, total: int, retrieval: int | None = None) -> None:
        self.chars_per_token, self.left, self.retrieval = chars_per_token, total, retrieval

    def cost(self, text: str) -> int:
        return estimate_tokens(text, self.chars_per_token)

    def room(self, retrieved: bool = False) -> int:
        if retrieved and self.retrieval is not None:
            return min(self.left, self.retrieval)
        return self.left

    def take_section(self, name: str, header: str, lines: list[str]
                     ) -> tuple[str, LayerReport]:
        """As many lines as fit under the header, in the order given (best first);
        nothing at all if not even one does. A layer the user wrote or that tells a
        story (bootstrap, profile, diary) stops at the first line that does not fit; a
        retrieved one passes over it for the shorter ones below: with a few hundred
        tokens of room, one long line would otherwise keep out every match ranked after
        it. (Past messages are packed by app/turn/quotes.py.)"""
        report = LayerReport(name, len(lines), 0, 0)
        if not lines:
            return "", report
        room = self.room(retrieved=name in RETRIEVED)
        block = f"\n\n{header}\n"
        spent = self.cost(block)
        kept: list[int] = []
        for i, line in enumerate(lines):
            line_cost = self.cost(line + "\n")
            if spent + line_cost > room:
                if name in RETRIEVED:
                    continue
                break
            kept.append(i)
            spent += line_cost
        if not kept:
            return "", report
        self.left -= spent
        if name in RETRIEVED and self.retrieval is not None:
            self.retrieval -= spent
        report.included, report.tokens, report.kept = len(kept), spent, kept
        return block + "".join(lines[i] + "\n" for i in kept), report


def _outside_items(kind: str, items: list) -> list[str]:
    """The items (facts, cards, events, diary entries) that are content from outside."""
    return [f"{kind}:{item.id}" for item in items if item.from_outside]


def _outside_messages(request: ContextRequest) -> list[str]:
    """The client's messages that are content from outside: its tools' results, and any
    message quoting documents it retrieved. (An agent turn's own results, sent after
    them, are the agent's to reckon: app/turn/agent.py.)"""
    sent = (request.history or [])[:request.history_sent]
    return [f"message:{i}" for i, m in enumerate(sent)
            if m.get("role") in ("tool", "function") or quotes_retrieved_documents(m)]


def _message_cost(budget: _Budget, message: dict) -> int:
    """A client's message as sent: its text, tool calls and images."""
    cost = budget.cost(message_text(message)) + MESSAGE_OVERHEAD_TOKENS
    if message.get("tool_calls"):
        cost += budget.cost(str(message["tool_calls"]))
    return cost + image_count(message) * IMAGE_TOKENS


def _quotable_events(con: apsw.Connection, query: Query, session_id: str,
                     window: list[Event], carried: Carried,
                     budget: _Budget) -> tuple[list[Candidate], list[Quote]]:
    """The past events worth quoting in the room the budget leaves (app/turn/quotes.py)."""
    header = budget.cost(f"\n\n{HEADERS['events']}\n")
    return quotable_events(con, query, session_id, {e.id for e in window}, carried.holds,
                           budget.room(retrieved=True) - header, budget.cost)


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


@dataclass(frozen=True)
class ContextRequest:
    """What a turn asks of build_context: whose message, in which session, and how the
    client wants its prompt.

    `window` is the session's recent un-compacted events (oldest first), without the
    new user message. `query` carries the text's embedding when an embedder is
    configured (make_query); without it retrieval uses keywords, importance and recency.
    Without a `query`, one is made here through `recall` (keywords only).

    `history` is a client's own messages, sent on as they are in place of `text`: the
    layers go into its leading system message (or a new one), the window after that
    message; `text` is then only what retrieval looks for. Without `show_window` the
    window is not sent (the client's history holds it) but still kept out of the quoted
    past. `num_ctx` is the client's context window; `api` ("ollama" or "openai") the
    shape of the window's messages, by default the model server's.

    `prompt_speed` is how fast the model server reads a prompt (app/model/prompt_speed.py):
    with `[memory] fill_first_message = "auto"` it sizes a conversation's first message.

    `plan` is what the session's previous turn returned (BuiltContext.plan): while it
    still applies the turn continues its stretch (module docstring), and `window` then
    holds every event since the plan's `window_start`. `message_id` is the stored event
    of `text`, which the next turns' windows show with its note.
    """

    user_id: str
    text: str
    session_id: str
    window: list[Event]
    bootstrap: str = ""
    client_system: str | None = None
    model: str | None = None
    query: Query | None = None
    recall: Recall | None = None
    history: list[dict] | None = None
    history_sent: int | None = None  # of `history`, how many the client sent (ClientChat.sent)
    num_ctx: int | None = None
    api: str | None = None
    show_window: bool = True
    plan: ContextPlan | None = None
    message_id: int | None = None
    prompt_speed: float | None = None  # prompt tokens a second the engine reads, if known


def build_context(con: apsw.Connection, config: Config, counter: TokenCounter,
                  request: ContextRequest) -> BuiltContext:
    """The messages for one turn: system prompt with layers, the window, the user message."""
    query = request.query
    if query is None:
        if request.recall is None:
            raise TypeError("build_context() needs the query, or the recall to make it through")
        query = make_query(request.user_id, request.text, recall=request.recall, con=con)
    # The vector searches run beside the keyword streams from here on.
    search_ahead(con, query, {"fact": config.memory.facts_k, "card": config.memory.cards_k,
                              "event": STREAM_DEPTH})
    model = request.model or config.llm.chat_model
    api = request.api or config.llm.provider
    num_ctx, history = request.num_ctx, request.history
    reserve = config.llm.reply_reserve if num_ctx is None else min(config.llm.reply_reserve,
                                                                   num_ctx // 2)
    total = (num_ctx or config.llm.num_ctx) - reserve
    # One ratio for the whole build, so a calibration landing mid-way cannot skew it.
    ratio = counter.chars_per_token(model)
    opening, tail = None, []
    if history is not None:
        if history and history[0].get("role") in SYSTEM_ROLES:
            opening, tail = history[0], list(history[1:])
        else:
            tail = list(history)
        base = (message_text(opening) if opening is not None
                else (request.client_system or DEFAULT_SYSTEM_PROMPT).strip())
    else:
        base = (request.client_system or DEFAULT_SYSTEM_PROMPT).strip()
    key = (model, total, api, _digest(base), _digest(request.bootstrap))
    window, tail = corrected_conversation(con, request.user_id, request.session_id,
                                          request.window, tail)
    request = replace(request, window=window)
    # Read first: whatever changes after it is checked again at the next turn.
    generation = memory_generation(con)
    turn = _Turn(con, config, request, query, model, api, opening, base, tail, total, ratio,
                 generation)
    plan = request.plan
    if plan is None:
        reason = "first turn"
    elif plan.key != key:
        reason = "the model, budget or system prompt changed"
    elif takes_back_shown(con, request.user_id, request.session_id, plan.shown,
                          plan.explain.get("diary", []), plan.generation):
        # What the stretch shows was forgotten or corrected: it leaves the prompt now.
        reason = "memory was forgotten or corrected"
    else:
        built = turn.continue_stretch(plan)
        if built is not None:
            return built
        reason = "the conversation outgrew the budget"
    return turn.start_stretch(key, reason)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def _message_keys(messages: list[dict]) -> list[str]:
    """What finds a message again in the next turn's prompt, shown from the window or
    sent by the client: its words, and how many earlier messages said the same."""
    seen: dict[str, int] = {}
    keys = []
    for message in messages:
        words = _digest(f"{message.get('role')}:{message_text(message)}")
        keys.append(f"{words}:{seen.get(words, 0)}")
        seen[words] = seen.get(words, 0) + 1
    return keys


def _with_note(note: str) -> str:
    return f"{NOTE_OPEN}{note}{NOTE_CLOSE}"


@dataclass
class _Taken:
    """What a new stretch took into its layers, and why: each section's text and report,
    and the items behind them (their candidates and whether they were only the latest)."""

    sections: dict[str, str] = field(default_factory=dict)
    reports: dict[str, LayerReport] = field(default_factory=dict)
    entries: list = field(default_factory=list)  # the profile
    facts: list = field(default_factory=list)
    cards: list = field(default_factory=list)
    diary: list = field(default_factory=list)
    past: list[Quote] = field(default_factory=list)
    fact_candidates: list[Candidate] = field(default_factory=list)
    card_candidates: list[Candidate] = field(default_factory=list)
    event_candidates: list[Candidate] = field(default_factory=list)
    facts_fallback: bool = False
    cards_fallback: bool = False

    def take(self, budget: _Budget, name: str, lines: list[str]) -> None:
        self.sections[name], self.reports[name] = budget.take_section(name, HEADERS[name],
                                                                      lines)

    def outside(self) -> frozenset[str]:
        """What the layers show from outside (app/memory/provenance.py)."""
        chosen = {name: self.reports[name].chosen for name in ("profile", "facts", "cards",
                                                               "diary", "events")}
        return frozenset(
            [f"profile:{p.key}" for p in chosen["profile"](self.entries) if p.from_outside]
            + _outside_items("fact", chosen["facts"](self.facts))
            + _outside_items("card", chosen["cards"](self.cards))
            + _outside_items("diary", chosen["diary"](self.diary))
            + _outside_items("event", [q.event for q in chosen["events"](self.past)]))


@dataclass
class _Turn:
    """One build: what it was asked, what that comes to, and the two ways to answer it."""

    con: apsw.Connection
    config: Config
    request: ContextRequest
    query: Query  # the request's, or one made for its text
    model: str
    api: str
    opening: dict | None  # the client's system message, which the layers join
    base: str  # the system prompt the layers follow
    tail: list[dict]  # the client's messages after its system message
    total: int  # the budget: num_ctx less the reply's reserve
    ratio: float  # characters per token
    generation: int  # the memory's, read before anything of it (app/memory/provenance.py)

    def _carried(self, said: list[dict]) -> Carried:
        """What the prompt says besides Hilo's memory: the client's system message, and
        `said`, the conversation it shows."""
        return Carried([*([self.opening] if self.opening else []), *said],
                        self.config.memory.max_message_chars)

    def _first_message(self) -> bool:
        """Nothing said before it in this conversation: no window, no earlier reply."""
        if self.request.show_window and self.request.window:
            return False
        return not any(m.get("role") == "assistant" for m in self.tail)

    def _first_message_room(self) -> tuple[bool, int | None]:
        """Whether a conversation's first message gets more memory than later ones, and
        what the retrieved sections may take (None: what the budget holds). With
        `fill_first_message = "auto"`, what the engine reads in
        `first_message_extra_seconds` beyond the default, at its measured speed; the
        default while no speed is known."""
        mem = self.config.memory
        fill = str(mem.fill_first_message).lower()  # a config made in code may say True
        if fill == "false" or not self._first_message():
            return False, mem.retrieved_max_tokens
        if fill == "true":
            return True, None
        speed = self.request.prompt_speed
        if not speed:
            return False, mem.retrieved_max_tokens
        room = mem.retrieved_max_tokens + int(speed * mem.first_message_extra_seconds)
        return True, None if room >= self.total else room

    # -- a new stretch ---------------------------------------------------------------------

    def start_stretch(self, key: tuple, reason: str) -> BuiltContext:
        first, retrieval = self._first_message_room()
        budget = _Budget(self.ratio, self.total, retrieval)
        base, user_text, tail = self._fit_message(budget)
        # Room for the conversation to grow before the next stretch: the prompt then moves
        # in large steps. A conversation's first message may fill it all.
        budget.left -= 0 if first else min(max(0, budget.left), self.total // GROWTH_SHARE)
        taken = _Taken()
        self._take_standing_layers(budget, taken)
        kept_events = self._take_window(budget, taken)
        kept_window = events_as_messages(kept_events, self.api)
        self._take_retrieved(budget, taken, self._carried([*kept_window, *tail]))

        layers = "".join(taken.sections[name] for name in LAYOUT)
        system = ({"role": "system", "content": base + layers} if self.opening is None
                  else with_text_appended(self.opening, layers))
        messages = [system, *kept_window, *tail]
        tokens = sum(_message_cost(budget, m) for m in messages)
        explain = self._explain_stretch(taken, tokens, user_text, kept_events)
        shown = frozenset(
            [f"fact:{f['id']}" for f in explain["facts"]]
            + [f"card:{c['id']}" for c in explain["cards"]]
            + [f"event:{e['id']}" for e in explain["events"]])
        window_start = kept_events[0].id if kept_events else self.request.message_id
        layers_outside = taken.outside()
        outside = layers_outside | frozenset(_outside_items("event", kept_events)
                                             + _outside_messages(self.request))
        explain["outside"] = sorted(outside)
        plan = ContextPlan(key, layers, shown, (), window_start, explain, layers_outside,
                           self.generation)
        explain["stretch"] = {"turn": "new", "why": reason}
        return BuiltContext(messages, tokens, self.total, explain, plan, outside)

    def _fit_message(self, budget: _Budget) -> tuple[str, str, list[dict]]:
        """The system prompt, the user's text and the messages after the system message,
        as they will be sent, their cost taken from the budget."""
        ratio, text = self.ratio, self.request.text
        if self.request.history is not None:
            # The client's messages all go, uncut; the layers get what room they leave.
            budget.left -= (budget.cost(self.base) + MESSAGE_OVERHEAD_TOKENS
                            + sum(_message_cost(budget, m) for m in self.tail))
            return self.base, text, self.tail
        # The system and user messages always go; if together they overflow, the system
        # prompt is held to half the budget and the user text gets the rest, both cut.
        budget.left -= 2 * MESSAGE_OVERHEAD_TOKENS
        base = _fit_text(ratio, self.base, max(0, budget.left) // 2)
        budget.left -= budget.cost(base)
        user_text = _fit_text(ratio, text, budget.left)
        budget.left -= budget.cost(user_text)
        return base, user_text, [{"role": "user", "content": user_text}]

    def _take_standing_layers(self, budget: _Budget, taken: _Taken) -> None:
        """MEMORY.md (to its cap) and the profile: what every prompt shows first."""
        mem, bootstrap = self.config.memory, self.request.bootstrap
        capped = _fit_text(self.ratio, bootstrap, mem.bootstrap_max_tokens) if bootstrap else ""
        taken.take(budget, "bootstrap", capped.splitlines() if capped else [])
        taken.entries = list_profile(self.con, self.query.user_id)
        taken.take(budget, "profile", [f"{p.key}: {p.value}" for p in taken.entries])

    def _take_window(self, budget: _Budget, taken: _Taken) -> list[Event]:
        """The newest events of the session that fit, walking back from the end."""
        mem, request = self.config.memory, self.request
        recent = (request.window[-mem.window_events:]
                  if mem.window_events and request.show_window else [])
        kept: list[Event] = []
        spent = 0
        for event in reversed(recent):
            cost = (budget.cost(event.content + (event.tool_calls_json or ""))
                    + MESSAGE_OVERHEAD_TOKENS)
            if spent + cost > budget.left:
                break
            kept.insert(0, event)
            spent += cost
        budget.left -= spent
        taken.reports["window"] = LayerReport("window", len(recent), len(kept), spent)
        return kept

    def _take_retrieved(self, budget: _Budget, taken: _Taken, carried: Carried) -> None:
        """Facts, cards and the diary, then the raw past in whatever room they leave."""
        con, mem, request, user_id = self.con, self.config.memory, self.request, self.query.user_id
        facts, taken.fact_candidates, taken.facts_fallback = _relevant(
            con, self.query, "fact", mem.facts_k)
        cards, taken.card_candidates, taken.cards_fallback = _relevant(
            con, self.query, "card", mem.cards_k)
        taken.facts, cards = saying_more(con, user_id, request.session_id, carried, facts, cards)
        # With bounded room, what matched comes first: the most recent facts and cards
        # (when none matched) take only what the past messages that matched leave.
        later = sorted(name for name, fallback in (("facts", taken.facts_fallback),
                                                   ("cards", taken.cards_fallback))
                       if fallback and budget.retrieval is not None)
        taken.cards, card_lines = corrected_items(con, user_id, "card", cards, _card_line)
        lines = {"facts": [_fact_line(f) for f in taken.facts], "cards": card_lines}
        for name in ("facts", "cards"):
            if name not in later:
                taken.take(budget, name, lines[name])
        taken.diary, diary_lines = corrected_items(
            con, user_id, "diary",
            last_diary(con, user_id, exclude_session=request.session_id, limit=mem.diary_k),
            lambda d: f"[{d.created_at[:10]}] {d.entry}")
        taken.take(budget, "diary", diary_lines)
        # Whatever room the compiled layers leave goes to the raw past (compacted events
        # included), best-ranked first, shown in the order they were said.
        taken.event_candidates, taken.past = _quotable_events(
            con, self.query, request.session_id, request.window, carried, budget)
        taken.sections["events"], taken.reports["events"] = _take_quotes(budget, taken.past)
        for name in later:
            taken.take(budget, name, lines[name])

    def _explain_stretch(self, taken: _Taken, tokens: int, user_text: str,
                         kept_events: list[Event]) -> dict:
        request, reports = self.request, taken.reports
        return {
            "budget": self.total,
            "tokens": tokens,
            "model": self.model,
            "chars_per_token": round(self.ratio, 3),
            "user_text_truncated": user_text != request.text,
            "client_messages": None if request.history is None else len(request.history),
            "layers": [reports[name].to_dict() for name in PRIORITY],
            "facts": _explain_items(taken.facts, taken.fact_candidates, taken.facts_fallback,
                                    reports["facts"]),
            "cards": _explain_items(taken.cards, taken.card_candidates, taken.cards_fallback,
                                    reports["cards"]),
            "events": _explain_quotes(reports["events"], taken.event_candidates, taken.past),
            "window": [e.id for e in kept_events],
            "diary": [d.session_id for d in reports["diary"].chosen(taken.diary)],
        }

    # -- a stretch going on ----------------------------------------------------------------

    def continue_stretch(self, plan: ContextPlan) -> BuiltContext | None:
        """The plan's prompt, word for word, this turn's message and its note after it;
        None when that would not fit the budget."""
        request = self.request
        budget = _Budget(self.ratio, self.total)
        system = ({"role": "system", "content": self.base + plan.layers} if self.opening is None
                  else with_text_appended(self.opening, plan.layers))
        shown: list[Event] = []
        window = request.window
        if request.show_window:
            if plan.window_start is None or (window and window[0].id > plan.window_start):
                return None  # the window no longer reaches the stretch's start
            shown = [e for e in window if e.id >= plan.window_start]
        said = [*events_as_messages(shown, self.api),
                *(self.tail if request.history is not None
                  else [{"role": "user", "content": request.text}])]
        keys = _message_keys(said)
        notes = dict(plan.notes)
        said = [with_text_prepended(m, _with_note(notes[k])) if k in notes else m
                for m, k in zip(said, keys, strict=True)]
        current_key = keys[-1] if said and said[-1].get("role") == "user" else None
        fixed_cost = sum(_message_cost(budget, m) for m in (system, *said))
        if fixed_cost > self.total:
            return None
        note, note_explain, note_items = "", {name: [] for name in RETRIEVED}, frozenset()
        note_outside: frozenset[str] = frozenset()
        note_why: list[dict] = []
        room = min(self.config.memory.retrieved_max_tokens,
                   self.total - fixed_cost - budget.cost(_with_note("")) - 1)
        if current_key is not None and current_key not in notes and room > 0:
            carried = self._carried(said)
            note, note_explain, note_items, note_outside, note_why = self._note(
                plan.shown, window, carried, room)
        if note:
            said[-1] = with_text_prepended(said[-1], _with_note(note))
        messages = [system, *said]
        tokens = sum(_message_cost(budget, m) for m in messages)
        if tokens > self.total:
            return None
        layers_outside = plan.outside | note_outside
        outside = layers_outside | frozenset(_outside_items("event", shown)
                                             + _outside_messages(request))
        explain = {**plan.explain, "tokens": tokens, "budget": self.total,
                   "chars_per_token": round(self.ratio, 3), "user_text_truncated": False,
                   "client_messages": None if request.history is None else len(request.history),
                   "window": [e.id for e in shown],
                   "stretch": {"turn": "continued", "notes": len(plan.notes) + bool(note)},
                   "note": note_explain, "note_why": note_why, "outside": sorted(outside)}
        notes_now = plan.notes + (((current_key, note),) if note else ())
        next_plan = replace(plan, notes=notes_now, shown=plan.shown | note_items,
                            outside=layers_outside, generation=self.generation)
        return BuiltContext(messages, tokens, self.total, explain, next_plan, outside)

    def _note(self, shown: frozenset[str], window: list[Event], carried: Carried,
              room: int) -> tuple[str, dict, frozenset[str], frozenset[str], list[dict]]:
        """What to retrieve for this message that the prompt does not show yet: facts,
        cards and past messages with evidence of relevance (words in common, or a close
        meaning), best first, within `room` tokens; last, each one's ranks (explain)."""
        con, query, mem = self.con, self.query, self.config.memory
        budget = _Budget(self.ratio, room)
        found: dict[str, list[Candidate]] = {}
        for kind, k in (("fact", mem.facts_k), ("card", mem.cards_k)):
            candidates = search(con, query.user_id, query.text, kind, k, query=query) if k else []
            found[kind] = [c for c in matching(con, query, kind, candidates)
                           if f"{kind}:{c.id}" not in shown]
        facts, cards = saying_more(
            con, query.user_id, self.request.session_id, carried,
            facts_by_ids(con, query.user_id, [c.id for c in found["fact"]]),
            cards_by_ids(con, query.user_id, [c.id for c in found["card"]]))
        sections = {}
        sections["facts"], facts_report = budget.take_section(
            "facts", HEADERS["facts"], [_fact_line(f) for f in facts])
        cards, card_lines = corrected_items(con, query.user_id, "card", cards, _card_line)
        sections["cards"], cards_report = budget.take_section("cards", HEADERS["cards"],
                                                              card_lines)
        quotable, past = _quotable_events(con, query, self.request.session_id, window, carried,
                                          budget)
        evident = {c.id for c in matching(con, query, "event", quotable)}
        past = [q for q in past if q.event.id in evident and f"event:{q.event.id}" not in shown]
        sections["events"], events_report = _take_quotes(budget, past)
        chosen = {"facts": facts_report.chosen(facts), "cards": cards_report.chosen(cards),
                  "events": [q.event for q in events_report.chosen(past)]}
        kept = {kind: [item.id for item in items] for kind, items in chosen.items()}
        items = frozenset(f"{kind[:-1]}:{i}" for kind, ids in kept.items() for i in ids)
        outside = frozenset(name for kind, found in chosen.items()
                            for name in _outside_items(kind[:-1], found))
        why = [c.explain() for c in (*found["fact"], *found["card"], *quotable)
               if f"{c.kind}:{c.id}" in items]
        return ("".join(sections[name] for name in RETRIEVED).strip("\n"), kept, items,
                outside, why)


def _take_quotes(budget: _Budget, quotes: list[Quote]) -> tuple[str, LayerReport]:
    """The past messages that fit, packed to tell what was found (app/turn/quotes.py),
    shown in the order they were said."""
    report = LayerReport("events", len(quotes), 0, 0)
    block = f"\n\n{HEADERS['events']}\n"
    room = budget.room(retrieved=True) - budget.cost(block)
    packed = pack_quotes(quotes, room, budget.chars_per_token) if quotes and room > 0 else None
    if packed is None or not packed.kept:
        return "", report
    spent = budget.cost(block) + packed.tokens
    budget.left -= spent
    if budget.retrieval is not None:
        budget.retrieval -= spent
    report.included, report.tokens = len(packed.kept), spent
    report.kept, report.shortened = packed.kept, packed.shortened
    return block + packed.text(quotes), report


def _explain_quotes(report: LayerReport, candidates: list[Candidate],
                    quotes: list[Quote]) -> list[dict]:
    """Each quoted message's ranks and score, and how much of it was quoted when not all."""
    return [{**candidates[i].explain(), **quotes[i].explain(report.shortened.get(i, "whole"))}
            for i in report.kept]


def _explain_items(items, candidates: list[Candidate], fallback: bool,
                   report: LayerReport) -> list[dict]:
    by_id = {c.id: c for c in candidates}
    explained = []
    for item in report.chosen(items):
        entry = {"id": item.id, "why": "most recent (nothing matched)" if fallback else "relevant"}
        if item.id in by_id:
            entry.update(by_id[item.id].explain())
        explained.append(entry)
    return explained
