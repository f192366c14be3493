"""LoCoMo retrieval benchmark: does Hilo find the turns that answer a question?

Every turn of a LoCoMo conversation is stored as an event through Hilo's write path
(prepare_event + insert_event on a Writer; one Hilo user per conversation, one session
per LoCoMo session, content "[date] Speaker: text", plus "[photo: caption]" when the
turn shared a photo, the session's date as created_at), then embedded with the local
embedder (all-MiniLM-L6-v2) by the embed job. For each question (categories 1-4), the
top 10 events are mapped back to their dia_ids and scored against the question's
evidence: recall@5, recall@10 and hit@10, for
  bm25     FTS5 BM25 alone;
  rule     the reference REPL's rule: words of >= 4 characters OR'ed, top 4, else recent;
  vector   cosine over the stored vectors alone;
  session  the session stream alone (BM25 and vector evidence spread to the turns
           around it in its session: not a single stream, shown for transparency);
  fusion   every stream of app.retrieval.STREAMS fused by weighted RRF (app.retrieval.RRF_K).
Development conversations (conv-26, 30, 41, 42, 43, 44) are where anything was tuned;
the held-out ones (conv-47, 48, 49, 50) are reported separately, never tuned on.

    python -m tests.bench.locomo [--quick] [--json] [--data PATH] [--tune]
                                 [--no-date] [--no-captions]

--quick runs two development conversations and does not touch BENCHMARKS.md.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import apsw

from app.config import Config
from app.db import Durability, connect_readonly
from app.embedders import LocalEmbedder
from app.events import insert_event, prepare_event
from app.fts import build_match_query
from app.retrieval import (RRF_K, SESSION_SPREAD, STREAMS, WEIGHTS, Query, bm25_stream,
                           make_query, search, session_stream, vector_stream)
from app.timeutil import to_rfc3339
from app.writer import Writer
from tests.bench.report import REPO_ROOT, emit, parser, percentile
from workers.embed import embed_pending

DEFAULT_DATA = Path("../shared/data/locomo/locomo10.json")
DEVELOPMENT = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44")
HELD_OUT = ("conv-47", "conv-48", "conv-49", "conv-50")
QUICK = ("conv-26", "conv-30")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
K = 10
METHODS = ("bm25", "rule", "vector", "session", "fusion")
SINGLE_STREAMS = ("bm25", "vector")
_EVIDENCE = re.compile(r"D(\d+):(\d+)")
# Image captioners open with boilerplate ("a photo of ..."; LoCoMo's are BLIP's).
_CAPTION_BOILERPLATE = re.compile(
    r"^(?:a|an)\s+(?:photo|photograph|photography|picture|image)\s+of\s+", re.IGNORECASE)


@dataclass
class Conversation:
    sample_id: str
    # dia_id, session, speaker, text, time, caption of the photo shared in the turn ("" if none)
    turns: list[tuple[str, int, str, str, datetime, str]]
    questions: list[tuple[str, int, set[str]]]  # question, category, evidence dia_ids
    skipped_questions: int = 0


@dataclass
class Scores:
    recall5: list[float] = field(default_factory=list)
    recall10: list[float] = field(default_factory=list)
    hit10: list[float] = field(default_factory=list)

    def add(self, ranked: list[str], evidence: set[str]) -> None:
        self.recall5.append(len(evidence & set(ranked[:5])) / len(evidence))
        self.recall10.append(len(evidence & set(ranked[:10])) / len(evidence))
        self.hit10.append(float(bool(evidence & set(ranked[:10]))))

    def summary(self) -> dict:
        n = len(self.recall10)
        mean = (lambda xs: round(sum(xs) / n, 3)) if n else (lambda xs: None)
        return {"n": n, "recall@5": mean(self.recall5), "recall@10": mean(self.recall10),
                "hit@10": mean(self.hit10)}


def parse_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as UTC."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


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
                turns.append((turn["dia_id"], n, turn["speaker"], turn["text"],
                              start + timedelta(seconds=i), turn.get("blip_caption") or ""))
        known = {t[0] for t in turns}
        c = Conversation(sample_id, turns, [])
        for qa in raw["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = parse_evidence(qa.get("evidence", [])) & known
            if not evidence:
                c.skipped_questions += 1
                continue
            c.questions.append((qa["question"], qa["category"], evidence))
        conversations.append(c)
    return conversations


def turn_content(speaker: str, text: str, when: datetime, index_date: bool,
                 caption: str = "") -> str:
    """What the user sent: the text and, for a shared photo, its caption (a chat front-end
    would store the description its vision model gave; LoCoMo ships BLIP's)."""
    date = f"[{when.day} {when:%B %Y}] " if index_date else ""
    photo = f" [photo: {_CAPTION_BOILERPLATE.sub('', caption.strip())}]" if caption.strip() else ""
    return f"{date}{speaker}: {text}{photo}"


def ingest(writer: Writer, config: Config, conv: Conversation, index_date: bool,
           captions: bool) -> dict[int, str]:
    """Store every turn through the write path; returns event id -> dia_id."""
    jobs = []
    for dia_id, session, speaker, text, when, caption in conv.turns:
        event = prepare_event(config, conv.sample_id, f"session_{session}", "user",
                              turn_content(speaker, text, when, index_date,
                                           caption if captions else ""),
                              created_at=to_rfc3339(when))
        jobs.append((dia_id, writer.submit_nowait(lambda con, e=event: insert_event(con, e))))
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


def run_split(conversations: list[Conversation], embedder: LocalEmbedder, workdir: Path,
              index_date: bool, captions: bool = True,
              weight_sets: dict[str, dict[str, float]] | None = None) -> dict:
    config = Config()
    scores = {m: defaultdict(Scores) for m in METHODS}
    latency: dict[str, list[float]] = {m: [] for m in METHODS}
    query_embed_ms: list[float] = []
    tuning: dict[str, Scores] = {}
    ingest_seconds = embed_seconds = 0.0
    turns = 0
    with Writer(workdir / "memory.sqlite3", Durability.NORMAL) as writer:
        dia_of: dict[int, str] = {}
        began = time.perf_counter()
        for conv in conversations:
            dia_of.update(ingest(writer, config, conv, index_date, captions))
            turns += len(conv.turns)
        ingest_seconds = time.perf_counter() - began
        began, cpu = time.perf_counter(), time.process_time()
        while embed_pending(writer, embedder, limit=4096, batch_size=64):
            pass
        embed_seconds = time.perf_counter() - began
        embed_cpu_seconds = time.process_time() - cpu
        con = connect_readonly(writer.path)
        try:
            for conv in conversations:
                for question, category, evidence in conv.questions:
                    began = time.perf_counter()
                    query = make_query(conv.sample_id, question, embedder)
                    query_embed_ms.append((time.perf_counter() - began) * 1000)
                    for method in METHODS:
                        began = time.perf_counter()
                        ids = retrieve(con, method, query)
                        latency[method].append((time.perf_counter() - began) * 1000)
                        ranked = [dia_of[i] for i in ids]
                        scores[method][category].add(ranked, evidence)
                        scores[method][0].add(ranked, evidence)
                    for name, weights in (weight_sets or {}).items():
                        ranked = [dia_of[i] for i in retrieve(con, "fusion", query, weights)]
                        tuning.setdefault(name, Scores()).add(ranked, evidence)
        finally:
            con.close()
    return {
        "conversations": [c.sample_id for c in conversations],
        "turns": turns,
        "questions": sum(len(c.questions) for c in conversations),
        "skipped_questions": sum(c.skipped_questions for c in conversations),
        "ingest_seconds": round(ingest_seconds, 2),
        "embed_seconds": round(embed_seconds, 2),
        "embed_ms_per_turn": round(embed_seconds * 1000 / turns, 2) if turns else None,
        "embed_cpu_seconds": round(embed_cpu_seconds, 2),
        "query_embedding_ms_p50": round(percentile(query_embed_ms, 50), 2),
        "methods": {
            m: {"overall": scores[m][0].summary(),
                "categories": {CATEGORIES[c]: scores[m][c].summary() for c in CATEGORIES},
                "latency_ms_p50": round(percentile(latency[m], 50), 2),
                "latency_ms_p95": round(percentile(latency[m], 95), 2)}
            for m in METHODS
        },
        **({"tuning": {n: t.summary() for n, t in tuning.items()}} if tuning else {}),
    }


def best_single_stream(split: dict) -> tuple[str, float]:
    return max(((m, split["methods"][m]["overall"]["recall@10"]) for m in SINGLE_STREAMS),
               key=lambda pair: pair[1])


def markdown(results: dict) -> str:
    parts = [
        "Evidence recall of the top 10 events (LoCoMo categories 1-4; turn units). "
        "Embedder: local all-MiniLM-L6-v2. Latency is per question and excludes "
        "embedding the question (its p50 is given separately).",
        f"Turn content: `{results['turn_content']}`. RRF k = {results['rrf_k']}; fusion "
        f"weights: {results['weights']}; session spread: {results['session_spread']}.",
        "Single streams: bm25, vector (rule is the reference REPL's). The session stream "
        "is not one: it combines BM25 and vector evidence and spreads it to the turns "
        "around each turn in its session; it carries the fusion's text evidence, so the "
        "two are close.",
        "",
        "| split | fusion R@10 | best single stream R@10 | session stream R@10 | fusion p50 ms |",
        "|---|---|---|---|---|",
    ]
    for split, r in results["splits"].items():
        name, best = best_single_stream(r)
        m = r["methods"]
        parts.append(f"| {split} | {m['fusion']['overall']['recall@10']} | {best} ({name}) | "
                     f"{m['session']['overall']['recall@10']} | {m['fusion']['latency_ms_p50']} |")
    for split, r in results["splits"].items():
        parts.append(f"\n### {split}: {', '.join(r['conversations'])}\n\n"
                     f"{r['turns']:,} turns, {r['questions']:,} questions "
                     f"({r['skipped_questions']} skipped: no usable evidence). "
                     f"Ingest {r['ingest_seconds']} s; embedding {r['embed_seconds']} s "
                     f"({r['embed_ms_per_turn']} ms/turn; {r['embed_cpu_seconds']} s of CPU); "
                     f"question embedding p50 {r['query_embedding_ms_p50']} ms.\n")
        head = "| method | " + " | ".join(
            ["overall R@5", "overall R@10", "overall hit@10",
             *[f"{name} R@10" for name in CATEGORIES.values()], "p50 ms", "p95 ms"]) + " |"
        rows = [head, "|" + "---|" * (head.count("|") - 1)]
        for m, s in r["methods"].items():
            o = s["overall"]
            cats = [str(s["categories"][name]["recall@10"]) for name in CATEGORIES.values()]
            rows.append(f"| {m} | {o['recall@5']} | {o['recall@10']} | {o['hit@10']} | "
                        + " | ".join(cats) + f" | {s['latency_ms_p50']} | {s['latency_ms_p95']} |")
        parts.append("\n".join(rows))
        if r.get("tuning"):
            parts.append("\nFusion weights tried (development only), overall R@10:\n")
            parts.append("\n".join(f"- {name}: {t['recall@10']}"
                                   for name, t in r["tuning"].items()))
    return "\n".join(parts) + "\n"


def tuning_grid() -> dict[str, dict[str, float]]:
    """The fusion weights (app.retrieval.WEIGHTS) and a grid around them."""
    grid = {"chosen": dict(WEIGHTS),
            "no session stream, BM25 1, vector 0.25 (the old fusion)": {
                **WEIGHTS, "session": 0.0, "bm25": 1.0, "vector": 0.25}}
    for raw in (0.0, 0.05, 0.1, 0.25, 0.5):
        grid[f"session 1, BM25 = vector = {raw}"] = {**WEIGHTS, "bm25": raw, "vector": raw}
    for importance, recency in ((0.0, 0.0), (0.25, 0.3), (0.25, 1.0)):
        grid[f"importance {importance}, recency {recency}"] = {
            **WEIGHTS, "importance": importance, "recency": recency}
    return grid


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="locomo10.json (relative paths are from the repository root)")
    p.add_argument("--no-date", action="store_true",
                   help="do not prefix each turn with its session date")
    p.add_argument("--no-captions", action="store_true",
                   help="leave out the captions of the photos shared in turns")
    p.add_argument("--tune", action="store_true",
                   help="also score a grid of fusion weights (development conversations only)")
    args = p.parse_args()
    path = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    if not path.exists():
        raise SystemExit(f"LoCoMo data not found at {path}: pass --data PATH to locomo10.json")
    index_date, captions = not args.no_date, not args.no_captions
    splits = {"development": DEVELOPMENT} if not args.quick else {"development (quick)": QUICK}
    if not args.quick:
        splits["held out"] = HELD_OUT
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])  # model loading is not ingest time
    content = ("[8 May 2023] " if index_date else "") + "Speaker: text" + (
        " [photo: caption]" if captions else "")
    results = {"k": K, "embedder": embedder.model, "turn_content": content, "rrf_k": RRF_K,
               "weights": dict(WEIGHTS), "session_spread": list(SESSION_SPREAD), "splits": {}}
    for name, ids in splits.items():
        with tempfile.TemporaryDirectory() as tmp:
            grid = tuning_grid() if args.tune and ids != HELD_OUT else None
            results["splits"][name] = run_split(load(path, ids), embedder, Path(tmp), index_date,
                                                captions, grid)
    emit(args, "locomo", results, markdown(results))


if __name__ == "__main__":
    main()
