"""LoCoMo benchmark: what does the model get told, and does Hilo find the turns that
answer a question?

Each LoCoMo conversation becomes one Hilo user and is stored as a chat would store it
(the product form): every turn an event through Hilo's write path (prepare_event +
insert_event on a Writer), the speaker who opens the first session as role `user` and
the other as `assistant`, the turn's text exactly as said, the session's start time as
`created_at` (a second per turn keeps their order), one Hilo session per LoCoMo session,
and the user's name in the profile (what "my name is Caroline" or `hilo memory profile
set name Caroline` stores). Photos are left out: a chat client sends an image beside
the text, Hilo stores the text and does not caption images, so LoCoMo's BLIP captions
are not in what Hilo knows. The assistant has no name Hilo could know. Events are then
embedded with the local embedder (all-MiniLM-L6-v2) by the embed job.

For each question (categories 1-4):
  context  the context `build_context` gives the model (default num_ctx and budget, the
           question as the new user message of a new session): context recall is the
           share of the question's evidence turns whose whole text is in it; answer
           recall also counts a turn quoted in part when the part shows every sentence
           of it holding a word of the gold answer; also the tokens it used and its
           build time. "context, no embedder" is the same with
           the vector stream silent (an embedder that is down or not configured);
           "context, budget filled" gives the first message as much memory as the
           budget holds (`[memory] fill_first_message = true`) instead of
           `[memory] retrieved_max_tokens`; "context, auto at N tokens/s" what
           "auto" gives it on an engine reading N prompt tokens a second (a fixed
           extra reading time, `first_message_extra_seconds`). Found, not told: of
           the evidence turns in the fusion's top 10, the share the context shows
           not at all (neither whole nor a sentence of it).
  ranking  the top 10 events mapped back to their dia_ids: recall@2, @5, @10, hit@10 for
    bm25     FTS5 BM25 alone;
    rule     the reference REPL's rule: words of >= 4 characters OR'ed, top 4, else recent;
    vector   cosine over the stored vectors alone;
    session  the session stream alone (BM25 and vector evidence spread to the turns
             around it in its session: not a single stream, shown for transparency);
    fusion   every stream of app.recall.fusion.STREAMS fused by weighted RRF;
    search_memory  `hilo memory search`'s hits (they must lose nothing against fusion).
Latency is per question with a fresh Query for each method (nothing cached between
them) and excludes embedding the question (its p50 is given separately).

Development conversations (conv-26, 30, 41, 42, 43, 44) are where anything was chosen;
the held-out ones (conv-47, 48, 49, 50) are run once a change has been chosen, and every
run that scores them is appended to tests/bench/heldout_runs.jsonl (report.py).
`--jobs 2` scores the two splits in a process each.

`--form legacy` stores the form earlier versions of this benchmark used, for comparison
only: every turn as role `user` with content "[8 May 2023] Speaker: text [photo:
caption]" (`--no-date`, `--no-captions` drop parts of it) and no profile.

    python -m tests.bench.locomo [--quick] [--json] [--data PATH] [--split SPLIT]
                                 [--form product|legacy] [--no-date] [--no-captions]
                                 [--tune] [--local-model NAME] [--jobs N]

--local-model measures another local embedder from tests/bench/local_embedders.py
(development only; the shipped one is the default).
--quick runs two development conversations; neither it nor `--split development`
touches BENCHMARKS.md.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw

from app.config import Config
from app.db import Durability, connect_readonly
from app.events import insert_event, prepare_event
from app.fts import build_match_query
from app.learn.embed import embed_pending
from app.memory import set_profile
from app.model.embedders import LOCAL_MODEL, Embedder
from app.model.token_count import TokenCounter
from app.recall import streams as recall_streams
from app.recall.fusion import RRF_K, STREAMS, WEIGHTS, search, search_memory
from app.recall.query import Query, focus_question
from app.recall.sentences import sentences
from app.recall.state import Recall
from app.recall.streams import SESSION_SPREAD, bm25_stream, session_stream, vector_stream
from app.timeutil import to_rfc3339
from app.turn.context import ContextRequest, build_context
from app.writer import Writer
from tests.bench import local_embedders
from tests.bench.report import REPO_ROOT, emit, parser, percentile, record_held_out

DEFAULT_DATA = Path("../shared/data/locomo/locomo10.json")
DEVELOPMENT = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44")
HELD_OUT = ("conv-47", "conv-48", "conv-49", "conv-50")
QUICK = ("conv-26", "conv-30")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
K = 10
METHODS = ("bm25", "rule", "vector", "fusion, question as asked", "session", "fusion",
           "fusion, no embedder")
# These search the question as asked; the others get the product's query (make_query
# with the memory: the user's name and common names left out, labels read).
PLAIN_METHODS = ("bm25", "rule", "vector", "fusion, question as asked")
# Each context: `[memory] fill_first_message`, and the engine's reading speed (prompt
# tokens a second) that "auto" sizes the first message by. "context" is the default
# before any speed is known; the "auto" ones give the first message a fixed extra
# reading time (`first_message_extra_seconds`) on a CPU's and a faster engine.
CONTEXTS: dict[str, tuple[str, float | None]] = {
    "context": ("auto", None), "context, no embedder": ("auto", None),
    "context, budget filled": ("true", None),
    "context, auto at 60 tokens/s": ("auto", 60.0),
    "context, auto at 500 tokens/s": ("auto", 500.0)}
# The new user message goes to a session of its own: nothing of it is in the window.
QUESTION_SESSION = "locomo-question"
_EVIDENCE = re.compile(r"D(\d+):(\d+)")
# Image captioners open with boilerplate ("a photo of ..."; LoCoMo's are BLIP's).
_CAPTION_BOILERPLATE = re.compile(
    r"^(?:a|an)\s+(?:photo|photograph|photography|picture|image)\s+of\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    when: datetime
    caption: str  # of the photo shared in the turn ("" if none)


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]  # dia_ids
    answer: str = ""


@dataclass
class Conversation:
    sample_id: str
    user: str  # the speaker who opens the first session
    assistant: str
    turns: list[Turn]
    questions: list[Question]
    skipped_questions: int = 0
    user_name: str | None = None  # what the profile says the user is called
    asked_at: datetime | None = None  # when the questions are asked (None: after the last turn)


@dataclass
class Scores:
    """Per-question scores of one method; means on demand."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add_ranking(self, ranked: list[str], evidence: frozenset[str]) -> None:
        for k in (2, 5, 10):
            self.values[f"recall@{k}"].append(len(evidence & set(ranked[:k])) / len(evidence))
        self.values["hit@10"].append(float(bool(evidence & set(ranked[:10]))))

    def add(self, name: str, value: float) -> None:
        self.values[name].append(value)

    def summary(self) -> dict:
        n = max((len(v) for v in self.values.values()), default=0)
        return {"n": n, **{name: round(sum(v) / len(v), 3) if v else None
                           for name, v in self.values.items()}}


def parse_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as UTC."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def parse_evidence(items: list[str]) -> set[str]:
    """Repair "D8:6; D9:17", "D30:05" and drop "D" without a number."""
    return {f"D{a}:{int(b)}" for item in items for a, b in _EVIDENCE.findall(str(item))}


def load(path: Path, wanted: tuple[str, ...]) -> list[Conversation]:
    data = {c["sample_id"]: c for c in json.loads(path.read_text(encoding="utf-8"))}
    conversations = []
    for sample_id in wanted:
        raw = data[sample_id]
        conv = raw["conversation"]
        turns = []
        sessions = sorted(int(k.split("_")[1]) for k in conv
                          if re.fullmatch(r"session_\d+", k) and conv[k])
        for n in sessions:
            start = parse_date(conv[f"session_{n}_date_time"])
            for i, turn in enumerate(conv[f"session_{n}"]):
                # Turns a second apart keep their order within the session.
                turns.append(Turn(turn["dia_id"], n, turn["speaker"], turn["text"],
                                  start + timedelta(seconds=i), turn.get("blip_caption") or ""))
        speakers = (conv["speaker_a"], conv["speaker_b"])
        user = turns[0].speaker
        c = Conversation(sample_id, user, next(s for s in speakers if s != user), turns, [],
                         user_name=user)
        known = {t.dia_id for t in turns}
        for qa in raw["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = parse_evidence(qa.get("evidence", [])) & known
            if not evidence:
                c.skipped_questions += 1
                continue
            c.questions.append(Question(qa["question"], qa["category"], frozenset(evidence),
                                        str(qa.get("answer", ""))))
        conversations.append(c)
    return conversations


@dataclass(frozen=True)
class Form:
    """How turns are stored: as the product stores a chat, or the legacy variant."""

    name: str
    index_date: bool = True
    captions: bool = True

    @property
    def described(self) -> str:
        if self.name == "product":
            return ("product: the turn's text as said; role user (the speaker who opens "
                    "the conversation) or assistant; created_at the session's start; "
                    "the user's name in the profile; no photo captions")
        date = "[8 May 2023] " if self.index_date else ""
        photo = " [photo: caption]" if self.captions else ""
        return f"legacy: `{date}Speaker: text{photo}`, every turn role user, no profile"

    def role(self, conv: Conversation, turn: Turn) -> str:
        if self.name == "legacy":
            return "user"
        return "user" if turn.speaker == conv.user else "assistant"

    def content(self, turn: Turn) -> str:
        if self.name == "product":
            return turn.text
        when = turn.when
        date = f"[{when.day} {when:%B %Y}] " if self.index_date else ""
        caption = turn.caption.strip() if self.captions else ""
        photo = f" [photo: {_CAPTION_BOILERPLATE.sub('', caption)}]" if caption else ""
        return f"{date}{turn.speaker}: {turn.text}{photo}"


def ingest(writer: Writer, config: Config, conv: Conversation, form: Form) -> dict[int, str]:
    """Store every turn through the write path; returns event id -> dia_id."""
    if form.name == "product" and conv.user_name:
        writer.submit(lambda con: set_profile(con, conv.sample_id, "name", conv.user_name,
                                              source="user", worker="user"))
    jobs = []
    for turn in conv.turns:
        event = prepare_event(config, conv.sample_id, f"session_{turn.session}",
                              form.role(conv, turn), form.content(turn),
                              created_at=to_rfc3339(turn.when), origin="typed")
        jobs.append((turn.dia_id, writer.submit_nowait(lambda con, e=event: insert_event(con, e))))
    return {job.result().id: dia_id for dia_id, job in jobs}


_RECENT_SQL = "SELECT id FROM events WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?"
_RULE_SQL = ("SELECT e.id FROM events_fts JOIN events e ON e.id = events_fts.rowid "
             "WHERE events_fts MATCH ? AND e.user_id = ? ORDER BY bm25(events_fts) LIMIT 4")


def reference_rule(con: apsw.Connection, query: Query) -> list[int]:
    """The reference REPL: words of >= 4 characters OR'ed, top 4; nothing -> 4 recent."""
    match = build_match_query(query.text, min_length=4)
    found = [r[0] for r in con.execute(_RULE_SQL, (match, query.user_id))] if match else []
    return found or [r[0] for r in con.execute(_RECENT_SQL, (query.user_id, 4))]


def retrieve(con: apsw.Connection, method: str, query: Query,
             weights: dict[str, float] | None = None) -> list[int]:
    if method == "rule":
        return reference_rule(con, query)
    streams = STREAMS
    if method != "fusion":  # one stream, in its own order whatever its weight in the fusion
        streams = {method: {"bm25": bm25_stream, "vector": vector_stream,
                            "session": session_stream}[method]}
        weights = {method: 1.0}
    return [c.id for c in search(con, query.user_id, query.text, "event", K, streams,
                                 query=query, weights=weights)]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _told(messages: list[dict]) -> str:
    return "\n".join(_flat(m["content"]) for m in messages)


def context_recall(messages: list[dict], evidence_texts: list[str]) -> float:
    """The share of the evidence turns whose whole text is in the messages."""
    told = _told(messages)
    return sum(_flat(text) in told for text in evidence_texts) / len(evidence_texts)


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_WORD = re.compile(r"[a-z0-9]+")
_NOT_CONTENT = frozenset(
    "the and for with that this was were are has have had her his she him they them their "
    "you your not but from about what when where who how yes its it's also".split())


def _content_words(text: str) -> set[str]:
    """Lower-case words of three letters or more, less a few function words and a plural s."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w
            for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _NOT_CONTENT}


def told(messages: list[dict], text: str) -> bool:
    """Whether the messages show the turn at all: whole, or some of its sentences quoted."""
    said, flat = _told(messages), _flat(text)
    return flat in said or any(len(s) > 1 and s in said for s in sentences(flat))


def answer_recall(messages: list[dict], evidence_texts: list[str], answer: str) -> float:
    """The share of the evidence turns that the messages show whole, or whose every
    sentence holding a word of the gold answer they show (a quote of the sentences that
    answer). A turn none of whose sentences holds a word of the answer ("7 May 2023",
    said as "yesterday") counts only whole."""
    told, wanted = _told(messages), _content_words(answer)
    shown = 0
    for text in evidence_texts:
        flat = _flat(text)
        answering = [s for s in _SENTENCE_END.split(flat) if wanted & _content_words(s)]
        shown += flat in told or (bool(answering) and all(s in told for s in answering))
    return shown / len(evidence_texts)


@dataclass
class SplitRun:
    """Scores by method and category (0: all), latencies by method."""

    scores: dict[str, dict[int, Scores]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Scores)))
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # By context: evidence turns the fusion ranked in its top 10, and of those the ones
    # the context does not show at all (not whole, not a sentence of them).
    found: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    categories: dict[int, str] = field(default_factory=lambda: dict(CATEGORIES))

    def add(self, method: str, category: int, name: str, value: float) -> None:
        for c in (0, category):
            self.scores[method][c].add(name, value)

    def add_ranking(self, method: str, category: int, ranked: list[str],
                    evidence: frozenset[str]) -> None:
        for c in (0, category):
            self.scores[method][c].add_ranking(ranked, evidence)

    def summary(self, method: str) -> dict:
        found, untold = self.found.get(method, (0, 0))
        return {"overall": self.scores[method][0].summary(),
                **({"found_not_told": round(untold / found, 3)} if found else {}),
                "categories": {name: self.scores[method][c].summary()
                               for c, name in self.categories.items()},
                "latency_ms_p50": round(percentile(self.latency[method], 50), 2),
                "latency_ms_p95": round(percentile(self.latency[method], 95), 2)}


Variant = Callable[[apsw.Connection, Query], list[int]]


def _ms(began: float) -> float:
    return (time.perf_counter() - began) * 1000


def score_conversation(con: apsw.Connection, conv: Conversation, dia_of: dict[int, str],
                       embedder: Embedder, run: SplitRun, query_embed_ms: list[float],
                       variants: dict[str, Variant] | None) -> None:
    """Every question of one conversation, asked a minute after its last turn."""
    configs = {fill: Config().replace(memory={"fill_first_message": fill})
               for fill in ("auto", "true")}
    user = conv.sample_id
    asked_at = conv.asked_at or conv.turns[-1].when + timedelta(minutes=1)
    stored = {dia_of[event_id]: content for event_id, content
              in con.execute("SELECT id, content FROM events")}
    recall = Recall()  # kept across the questions, as a server keeps its own
    for q in conv.questions:
        began = time.perf_counter()
        question_vector = local_embedders.embed_question(embedder, q.text)
        query_embed_ms.append(_ms(began))
        began = time.perf_counter()
        searched, labels = focus_question(con, user, q.text, asked_at, recall=recall)
        focus_ms = _ms(began)
        # make_query embeds the searched words; not timed, as the question's embedding.
        vector = (question_vector if searched == q.text
                  else local_embedders.embed_question(embedder, searched))

        # A fresh Query for every method: nothing one computed may be reused by the next.
        def plain() -> Query:
            return Query(user, q.text, recall=recall, vector=question_vector,  # noqa: B023 — called at once
                         model=embedder.model)

        def product(with_vector: bool = True) -> Query:
            return Query(user, q.text, recall=recall, searched=searched, labels=labels,  # noqa: B023 — called at once
                         vector=vector if with_vector else None,  # noqa: B023 — called at once
                         model=embedder.model if with_vector else None)

        top: dict[str, list[str]] = {}
        for method in METHODS:
            query = plain() if method in PLAIN_METHODS else product(method != "fusion, no embedder")
            began = time.perf_counter()
            ids = retrieve(con, method.split(",")[0], query)
            extra = 0.0 if method in PLAIN_METHODS else focus_ms
            run.latency[method].append(_ms(began) + extra)
            top[method] = [dia_of[i] for i in ids]
            run.add_ranking(method, q.category, top[method], q.evidence)
        # `hilo memory search`: what ranks highest, each with why; it must lose nothing
        # against the fusion's top 10.
        hits = search_memory(con, user, q.text, K, recall=recall, embedder=embedder,
                             now=asked_at)
        run.add_ranking("search_memory", q.category,
                        [dia_of[h.id] for h in hits if h.kind == "event"], q.evidence)
        evidence_texts = [stored[d] for d in sorted(q.evidence)]
        for name, (fill, speed) in CONTEXTS.items():
            with_vector = name != "context, no embedder"
            query = product(with_vector)
            began = time.perf_counter()
            built = build_context(con, configs[fill], TokenCounter(), ContextRequest(
                user, q.text, session_id=QUESTION_SESSION, window=[], query=query,
                prompt_speed=speed))
            run.latency[name].append(_ms(began) + focus_ms)
            found = q.evidence & set(top["fusion" if with_vector else "fusion, no embedder"][:K])
            run.found[name][0] += len(found)
            run.found[name][1] += sum(not told(built.messages, stored[d]) for d in found)
            run.add(name, q.category, "context recall",
                    context_recall(built.messages, evidence_texts))
            run.add(name, q.category, "answer recall",
                    answer_recall(built.messages, evidence_texts, q.answer))
            run.add(name, q.category, "tokens", built.tokens)
            run.add(name, q.category, "events quoted", len(built.explain["events"]))
        for name, variant in (variants or {}).items():
            ranked = [dia_of[i] for i in variant(con, product())][:K]
            run.add_ranking(name, q.category, ranked, q.evidence)


def run_split(conversations: list[Conversation], embedder: Embedder, workdir: Path,
              form: Form, variants: dict[str, Variant] | None = None,
              categories: dict[int, str] = CATEGORIES) -> dict:
    config = Config()
    run = SplitRun(categories=dict(categories))
    query_embed_ms: list[float] = []
    turns = 0
    ingest_seconds = embed_seconds = embed_cpu_seconds = 0.0
    for conv in conversations:
        # One memory file per user, as Hilo keeps them: word statistics are the user's own.
        path = workdir / f"{conv.sample_id}.sqlite3"
        with Writer(path, Durability.NORMAL) as writer:
            began = time.perf_counter()
            dia_of = ingest(writer, config, conv, form)
            ingest_seconds += time.perf_counter() - began
            turns += len(conv.turns)
            began, cpu = time.perf_counter(), time.process_time()
            while embed_pending(writer, embedder, limit=4096, batch_size=64):
                pass
            embed_seconds += time.perf_counter() - began
            embed_cpu_seconds += time.process_time() - cpu
        con = connect_readonly(path)
        try:
            score_conversation(con, conv, dia_of, embedder, run, query_embed_ms, variants)
        finally:
            con.close()
    return {
        "conversations": [c.sample_id for c in conversations],
        "roles": {c.sample_id: {"user": c.user, "assistant": c.assistant}
                  for c in conversations},
        "turns": turns,
        "questions": sum(len(c.questions) for c in conversations),
        "skipped_questions": sum(c.skipped_questions for c in conversations),
        "ingest_seconds": round(ingest_seconds, 2),
        "embed_seconds": round(embed_seconds, 2),
        "embed_ms_per_turn": round(embed_seconds * 1000 / turns, 2) if turns else None,
        "embed_cpu_seconds": round(embed_cpu_seconds, 2),
        "query_embedding_ms_p50": round(percentile(query_embed_ms, 50), 2),
        "contexts": {name: run.summary(name) for name in CONTEXTS},
        "methods": {m: run.summary(m) for m in (*METHODS, "search_memory")},
        **({"variants": {n: run.summary(n) for n in variants}} if variants else {}),
    }


def _table(head: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _ranking_rows(methods: dict, categories: list[str]) -> list[list]:
    rows = []
    for m, s in methods.items():
        o = s["overall"]
        timed = s["latency_ms_p50"] == s["latency_ms_p50"]  # not NaN: measured
        rows.append([m, o["recall@2"], o["recall@5"], o["recall@10"], o["hit@10"],
                     *[s["categories"][name].get("recall@10", "–") for name in categories],
                     *((s["latency_ms_p50"], s["latency_ms_p95"]) if timed else ("–", "–"))])
    return rows


ABOUT = (
    "Context recall: the share of a question's evidence turns whose whole text is in the "
    "messages `build_context` gives the model (num_ctx {num_ctx}, {budget} tokens after the "
    "reply reserve; the question as the new user message of a new session; no facts, cards "
    "or diary: they need a model); found, not told: of the evidence turns the fusion ranks "
    "in its top 10, the share the context shows not at all (neither whole nor a sentence "
    "of it). R@k: evidence recall of the top k events ({questions_asked}; turn units). "
    "Embedder: local {embedder}. Latencies are per question, a fresh Query per method, "
    "without embedding the question (its p50 is given separately). The auto contexts give "
    "the first message `retrieved_max_tokens` plus what an engine reading that many prompt "
    "tokens a second reads in `first_message_extra_seconds` ({extra_seconds} s).")


def markdown(results: dict, about: str = ABOUT) -> str:
    categories = results["categories"]
    held = results.get("held_out_runs")
    record = ("Development conversations are where everything was chosen; the held-out "
              "runs are on the record in `tests/bench/heldout_runs.jsonl`: "
              f"{held['count']} so far, this one on {held['date']} at {held['commit']}."
              if held else "Development conversations are where everything was chosen; "
              "no held-out split in this run.")
    parts = [
        f"Stored form: {results['form']}.",
        about.format(**results),
        f"RRF k = {results['rrf_k']}; fusion weights: {results['weights']}; session "
        f"spread: {results['session_spread']}; a message's own evidence where it asks: "
        f"{results['asking_weight']}; between a question and its reply: "
        f"{results['answer_spread']}.",
        record,
        "",
        _table(["split", "context recall", "context tokens (mean)", "found, not told",
                "context recall, auto at 500 tokens/s", "context recall, budget filled",
                "fusion R@2", "fusion R@5", "fusion R@10", "BM25 R@2", "BM25 R@10",
                "context p50 ms", "fusion p50 ms"],
               [[split,
                 r["contexts"]["context"]["overall"]["context recall"],
                 r["contexts"]["context"]["overall"]["tokens"],
                 r["contexts"]["context"].get("found_not_told", "–"),
                 r["contexts"]["context, auto at 500 tokens/s"]["overall"]["context recall"],
                 r["contexts"]["context, budget filled"]["overall"]["context recall"],
                 *[r["methods"]["fusion"]["overall"][f"recall@{k}"] for k in (2, 5, 10)],
                 r["methods"]["bm25"]["overall"]["recall@2"],
                 r["methods"]["bm25"]["overall"]["recall@10"],
                 r["contexts"]["context"]["latency_ms_p50"],
                 r["methods"]["fusion"]["latency_ms_p50"]]
                for split, r in results["splits"].items()]),
    ]
    for split, r in results["splits"].items():
        roles = "; ".join(f"{c} user {v['user']}, assistant {v['assistant']}"
                          for c, v in r["roles"].items())
        if results["form"].startswith("legacy"):
            roles = "every turn role user"
        shown = r["conversations"] if len(r["conversations"]) <= 12 else [
            *r["conversations"][:12], f"… ({len(r['conversations'])} in all)"]
        parts.append(f"\n### {split}: {', '.join(shown)}\n\n"
                     f"{r['turns']:,} turns, {r['questions']:,} questions "
                     f"({r['skipped_questions']} skipped: no usable evidence). "
                     + (f"Roles: {roles}. " if len(r["roles"]) <= 12 else "")
                     + f"Ingest {r['ingest_seconds']} s; embedding {r['embed_seconds']} s "
                     f"({r['embed_ms_per_turn']} ms/turn; {r['embed_cpu_seconds']} s of CPU); "
                     f"question embedding p50 {r['query_embedding_ms_p50']} ms.\n")
        parts.append(_table(
            ["context", "recall", *[f"{name} recall" for name in categories],
             "answer recall", "found, not told", "tokens (mean)", "events quoted (mean)",
             "build p50 ms", "build p95 ms"],
            [[name, s["overall"]["context recall"],
              *[s["categories"][c].get("context recall", "–") for c in categories],
              s["overall"]["answer recall"], s.get("found_not_told", "–"),
              s["overall"]["tokens"], s["overall"]["events quoted"],
              s["latency_ms_p50"], s["latency_ms_p95"]]
             for name, s in r["contexts"].items()]))
        parts.append("")
        head = ["method", "R@2", "R@5", "R@10", "hit@10",
                *[f"{name} R@10" for name in categories], "p50 ms", "p95 ms"]
        parts.append(_table(head, _ranking_rows(r["methods"], categories)))
        if r.get("variants"):
            parts.append("\nVariants tried (development only):\n")
            parts.append(_table(head, _ranking_rows(r["variants"], categories)))
    return "\n".join(parts) + "\n"


def tuning_variants() -> dict[str, Variant]:
    """Fusion weights around app.recall.fusion.WEIGHTS."""
    grid: dict[str, dict[str, float]] = {"chosen": dict(WEIGHTS),
                                         "no labels stream": {**WEIGHTS, "labels": 0.0}}
    for labels in (0.5, 2.0):
        grid[f"labels {labels}"] = {**WEIGHTS, "labels": labels}
    for raw in (0.0, 0.25):
        grid[f"BM25 = vector = {raw}"] = {**WEIGHTS, "bm25": raw, "vector": raw}
    grid["importance 0, recency 0"] = {**WEIGHTS, "importance": 0.0, "recency": 0.0}
    variants: dict[str, Variant] = {
        name: (lambda con, query, w=weights: retrieve(con, "fusion", query, w))
        for name, weights in grid.items()}
    settings = [(f"messages that ask weigh {a}", "ASKING_WEIGHT", a) for a in (1.0, 0.0)]
    settings += [(f"question and reply spread {a}", "ANSWER_SPREAD", a) for a in (0.4, 0.6)]
    for name, setting, value in settings:
        variants[name] = (lambda con, query, s=setting, v=value:
                          _with_stream_setting(s, v, con, query))
    return variants


def _with_stream_setting(name: str, value: float, con: apsw.Connection,
                         query: Query) -> list[int]:
    """The fusion with one of app.recall.streams' settings changed."""
    chosen = getattr(recall_streams, name)
    setattr(recall_streams, name, value)
    try:
        return retrieve(con, "fusion", query)
    finally:
        setattr(recall_streams, name, chosen)


def bench_results(make_embedder: Callable[[], Embedder], form: Form,
                  splits: dict[str, tuple[Callable[[], list[Conversation]], str]],
                  categories: dict[int, str], questions_asked: str, tune: bool = False,
                  jobs: int = 1) -> dict:
    """Every split (name -> its loader and role) scored, each with an embedder of its
    own (`make_embedder`), in `jobs` processes at once; the settings beside them."""
    config = Config()
    results = {"k": K, "form": form.described, "num_ctx": config.llm.num_ctx,
               "budget": config.llm.num_ctx - config.llm.reply_reserve, "rrf_k": RRF_K,
               "weights": dict(WEIGHTS), "session_spread": list(SESSION_SPREAD),
               "asking_weight": recall_streams.ASKING_WEIGHT,
               "answer_spread": recall_streams.ANSWER_SPREAD,
               "categories": list(categories.values()), "questions_asked": questions_asked,
               "extra_seconds": config.memory.first_message_extra_seconds,
               "splits": {}}

    def scored(loader: Callable[[], list[Conversation]], role: str) -> tuple[str, dict]:
        embedder = make_embedder()
        embedder.embed(["warm up"])  # model loading is not ingest time
        with tempfile.TemporaryDirectory() as tmp:
            variants = tuning_variants() if tune and role == "development" else None
            split = run_split(loader(), embedder, Path(tmp), form, variants, categories)
        return embedder.model, {"role": role, **split}

    if jobs > 1 and len(splits) > 1:
        done = _in_processes({name: (lambda split=split: scored(*split))
                              for name, split in splits.items()}, jobs)
    else:
        done = {name: scored(*split) for name, split in splits.items()}
    for name in splits:
        results["embedder"], results["splits"][name] = done[name]
    return results


def _in_processes(calls: dict[str, Callable[[], tuple[str, dict]]],
                  jobs: int) -> dict[str, tuple[str, dict]]:
    """Each call in a forked process of its own, at most `jobs` at a time: a split
    scores alone, so on a shared machine two of them get twice the CPU between them."""
    context = multiprocessing.get_context("fork")
    done: dict[str, tuple[str, dict]] = {}
    pending = list(calls.items())
    while pending:
        batch, pending = pending[:jobs], pending[jobs:]
        running = []
        for name, call in batch:
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=lambda c=call, s=send: s.send(c()), daemon=True)
            process.start()
            running.append((name, process, receive))
        for name, process, receive in running:
            done[name] = receive.recv()
            process.join()
            if process.exitcode:
                raise SystemExit(f"scoring {name} failed (exit code {process.exitcode})")
    return done


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="locomo10.json (relative paths are from the repository root)")
    p.add_argument("--split", choices=("both", "development", "held-out"), default="both",
                   help="which conversations (only `both` is recorded in BENCHMARKS.md)")
    p.add_argument("--form", choices=("product", "legacy"), default="product",
                   help="how turns are stored (legacy: the earlier benchmark's variant)")
    p.add_argument("--no-date", action="store_true",
                   help="legacy form: do not prefix each turn with its session date")
    p.add_argument("--no-captions", action="store_true",
                   help="legacy form: leave out the captions of the photos shared in turns")
    p.add_argument("--local-model", choices=list(local_embedders.CANDIDATES),
                   default=LOCAL_MODEL, help="the local embedder to measure")
    p.add_argument("--jobs", type=int, default=1,
                   help="score this many splits at once, each in a process of its own")
    p.add_argument("--tune", action="store_true",
                   help="also score fusion weight variants (development conversations only)")
    args = p.parse_args()
    path = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    if not path.exists():
        raise SystemExit(f"LoCoMo data not found at {path}: pass --data PATH to locomo10.json")
    form = Form(args.form, not args.no_date, not args.no_captions)
    if args.quick:
        splits = {"development (quick)": (QUICK, "development")}
    else:
        splits = {"development": (DEVELOPMENT, "development"),
                  "held out": (HELD_OUT, "held-out")}
        if args.split != "both":
            splits = {k: v for k, v in splits.items() if v[1] == args.split}
            args.no_write = True  # a partial run does not replace the recorded one
    if form.name != "product":
        args.no_write = True  # BENCHMARKS.md records the product's form
    if args.local_model != LOCAL_MODEL:
        args.no_write = True  # BENCHMARKS.md records the shipped embedder
    runs = {name: (lambda ids=ids: load(path, ids), role) for name, (ids, role) in splits.items()}
    results = bench_results(lambda: local_embedders.make(args.local_model), form, runs,
                            CATEGORIES, "LoCoMo categories 1-4", args.tune, args.jobs)
    if any(role == "held-out" for _, role in splits.values()):
        results["held_out_runs"] = record_held_out("locomo", results)
    emit(args, "locomo", results, markdown(results))


if __name__ == "__main__":
    main()
