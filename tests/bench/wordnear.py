"""Word neighbours from the memory's own vocabulary (issue 28), development conversations only.

Evidence that shares no word with the question ("What are her hobbies?" against a turn
about painting) is out of reach of the keyword stream, and the question's vector is
swamped by the rest of the sentence. This bench tries a new signal: the question's
words related, one by one, to the words the memory already holds.

Vocabulary (`Vocabulary.build`): the words of the user's events as the full-text index
reads them (FTS5's porter tokenizer: one entry per stem, embedded through the surface
form it is most often written in), less stop words (app.fts), words holding a digit,
words of fewer than 3 letters, and words in fewer than MIN_ROWS events or in more than
MAX_SHARE of them. Each is embedded once, batched, by the local embedder
(all-MiniLM-L6-v2), into one normalised matrix.

Neighbours (`Vocabulary.neighbours`): for each word of the focused question
(make_query's `searched`), the vocabulary words nearest it by cosine (k of them, at
least `floor`), less its own stem and the question's other words. A question word found
in the vocabulary takes its stored vector; the others are embedded then (one batch).

Two uses, both measured against the product's fusion on the same stores:
  stream  (a) an extra match stream "wordnear": events ranked by the sum over neighbour
          words of cosine x that word's BM25 term (FTS5 bm25() of the word alone), fused
          at `--weight`; optionally (`--session`) also counted as evidence in the session
          stream (so it spreads to the turns around it) at `--session-weight`.
  bm25    (b) the BM25 stream itself re-ranked by BM25 of the question's words plus
          `--lam` x the stream above's score (so it reaches the session stream, whose
          evidence is BM25 and vectors).

    python -m tests.bench.wordnear [--workdir DIR] [--use stream|bm25|none]
                                   [--k K] [--floor F] [--weight W] [--lam L]
                                   [--session] [--session-weight S] [--max-share M]

    python -m tests.bench.wordnear --diagnose   (the signal's reach over k x floor)

Result (issue 28, LoCoMo development, all-MiniLM-L6-v2, vocabulary of 363-664 stems per
conversation at MAX_SHARE 0.05): nothing wins, not taken into the product. The product
(--use none) here: context recall 0.7155 (multi-hop 0.385, temporal 0.788, open-domain
0.407, single-hop 0.840), fusion R@2 0.572, R@10 0.790 (as tests/bench/locomo.py).
Context recall / R@2 / R@10 with the neighbours:
  stream k5 floor 0.6 at weight 0.1 / 0.25 / 0.5 / 1: 0.7155 / 0.7162 / 0.7187 / 0.7058;
    R@2 0.573 / 0.574 / 0.563 / 0.530, R@10 0.790 / 0.792 / 0.788 / 0.774
    (the 0.1 at floor 0.5)
  stream k10 floor 0.4 / 0.5, weight 0.25: 0.7180 / 0.7137, R@2 0.575 / 0.572,
    R@10 0.793 / 0.794;  k3 floor 0.7 weight 0.5: 0.7178, 0.576, 0.785
  stream as session evidence too (weight 0.25, 0.5 there): 0.7130, 0.563, 0.784; only
    as session evidence at 0.25 / 1: 0.7162 / 0.7000, R@2 0.569 / 0.557
  bm25 k5 floor 0.6, lam 0.1 / 0.3 / 1: 0.7129 / 0.7150 / 0.7100, R@2 0.569 / 0.568 /
    0.563, R@10 0.788 / 0.791 / 0.779;  k10 floor 0.5 lam 0.3: 0.7181, 0.568, 0.791
  expanding only the question's words held by <= 2 events (--rare 2), or by none: within
    0.002 of the product (few focused questions hold such words)
The best, +0.003 of context recall (k5 floor 0.6 weight 0.5; k10 floor 0.4 weight 0.25
with R@2 +0.003, R@10 +0.004), is far from the +0.02 asked; open-domain context recall
gains up to 0.03 where multi-hop and single-hop lose. Why (--diagnose): a quarter of the
evidence turns share no stem with the focused question and all their stems are in the
vocabulary, but at floor 0.6 the neighbours reach 21 % of them (and 4 % of the other
events: lift 5), at 0.4-0.5 33-56 % (9-30 %: lift 1.9-3.5); of the evidence fusion
leaves out of its top 10, the neighbour stream ranks only 3-8 % in its own top 10 and
4-23 % in its top 50, so even a perfect fusion of it would add under 2 % of the
evidence. The words are related in general ("hobbies": activities, things, games), not
to what this person does. Cost per question: the lookup (question words x vocabulary
matrix) 0.16-0.53 ms p50; embedding the question's words the vocabulary lacks 2.8-5.8 ms
(one batch; the product would embed them with the question); the stream's FTS reads
0.2-1 ms (2 ms at k10 floor 0.4). Fusion p50 (as timed here, word embedding included)
3.0 ms without, 7-11 ms with (on a shared 2-core machine: noisy).

Prints one JSON document: context recall at the default settings (all and by category,
and tokens), fusion R@2 / R@10 (all and by category), and the cost per question of the
neighbour lookup (the matrix product), of embedding the question words the vocabulary
lacks, and of the stream's FTS reads, p50 and p95 in ms. The stores (ltr.prepare) and
the vocabularies' vectors are kept in --workdir and reused.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import numpy as np

from app.config import Config
from app.db import connect_readonly
from app.fts import STOP_WORDS, quote_term, terms
from app.model.embedders import LOCAL_MODEL
from app.model.token_count import TokenCounter
from app.recall import fusion
from app.recall import streams as recall_streams
from app.recall.bm25 import TOKENIZER, bm25_stream
from app.recall.fusion import search
from app.recall.query import Query
from app.recall.state import Recall
from app.turn.context import ContextRequest, build_context
from tests.bench import local_embedders
from tests.bench.locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    DEVELOPMENT,
    QUESTION_SESSION,
    K,
    context_recall,
    load,
)
from tests.bench.ltr import prepare, product_query
from tests.bench.report import REPO_ROOT, percentile

# A vocabulary word is held by at least MIN_ROWS events and at most MAX_SHARE of them.
MIN_ROWS = 2
MAX_SHARE = 0.05
MIN_LETTERS = 3
_SURFACE = ("unicode61", ["remove_diacritics", "2"])


def _tokenizer(con: apsw.Connection, spec: tuple[str, list[str]]):
    tokenize = con.fts5_tokenizer(*spec)
    return lambda text: tokenize(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                                 include_offsets=False, include_colocated=False)


def _content_word(word: str) -> bool:
    return (len(word) >= MIN_LETTERS and word not in STOP_WORDS
            and not any(c.isdigit() for c in word))


@dataclass
class Vocabulary:
    """The memory's content words: stems, the surface form embedded, rows holding each,
    and their vectors (normalised, one row per stem)."""

    stems: list[str]
    surfaces: list[str]
    rows_holding: np.ndarray
    vectors: np.ndarray
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {stem: i for i, stem in enumerate(self.stems)}

    @classmethod
    def build(cls, con: apsw.Connection, user_id: str, embedder, max_share: float = MAX_SHARE,
              cache: Path | None = None) -> Vocabulary:
        surface_of = _tokenizer(con, _SURFACE)
        stem_of = _tokenizer(con, TOKENIZER)
        stems: dict[str, str] = {}  # surface -> stem
        holding: Counter[str] = Counter()
        written: dict[str, Counter[str]] = defaultdict(Counter)
        events = 0
        for (content,) in con.execute("SELECT content FROM events WHERE user_id = ?", (user_id,)):
            events += 1
            seen = set()
            for word in surface_of(content):
                if word not in stems:
                    stems[word] = (stem_of(word) or [""])[0]
                stem = stems[word]
                if _content_word(word) and stem not in STOP_WORDS:
                    written[stem][word] += 1
                    seen.add(stem)
            holding.update(seen)
        ceiling = max_share * events
        kept = sorted(s for s, n in holding.items() if MIN_ROWS <= n <= ceiling)
        surfaces = [written[s].most_common(1)[0][0] for s in kept]
        vectors = None
        if cache is not None and cache.exists():
            stored = np.load(cache, allow_pickle=False)
            if list(stored["surfaces"]) == surfaces:
                vectors = stored["vectors"]
        if vectors is None:
            vectors = np.asarray(embedder.embed(surfaces), dtype=np.float32) if surfaces \
                else np.zeros((0, 384), np.float32)
            if cache is not None:
                np.savez(cache, surfaces=np.array(surfaces), vectors=vectors)
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return cls(kept, surfaces, np.array([holding[s] for s in kept]), vectors)

    def neighbours(self, con: apsw.Connection, embedder, searched: str, k: int, floor: float,
                   costs: dict[str, list[float]], rare: int | None = None) -> dict[str, float]:
        """Neighbour word (surface form) -> its best cosine to one of the question's words;
        with `rare`, only the words held by at most that many events are expanded (the
        others match as they are)."""
        stem_of = _tokenizer(con, TOKENIZER)
        asked = [(w, (stem_of(w) or [""])[0]) for w in terms(searched) if _content_word(w)]
        own = {stem for _, stem in asked}
        if rare is not None:
            held = _rows_holding(con, [w for w, _ in asked])
            asked = [(w, stem) for w, stem in asked if held[w] <= rare]
        if not asked or not len(self.stems):
            return {}
        missing = [w for w, stem in asked if stem not in self.index]
        began = time.perf_counter()
        embedded = dict(zip(missing, np.asarray(embedder.embed(missing), np.float32), strict=True)) \
            if missing else {}
        costs["embed words ms"].append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        queries = np.stack([self.vectors[self.index[stem]] if stem in self.index
                            else embedded[w] / max(np.linalg.norm(embedded[w]), 1e-12)
                            for w, stem in asked])
        sims = queries @ self.vectors.T  # question words x vocabulary
        found: dict[str, float] = {}
        for row in sims:
            top = np.argpartition(-row, min(k + len(own), len(row) - 1))[:k + len(own)]
            taken = 0
            for i in top[np.argsort(-row[top])]:
                if taken == k or row[i] < floor:
                    break
                if self.stems[i] in own:
                    continue
                taken += 1
                word = self.surfaces[i]
                found[word] = max(found.get(word, 0.0), float(row[i]))
        costs["lookup ms"].append((time.perf_counter() - began) * 1000)
        return found


def _rows_holding(con: apsw.Connection, words: list[str]) -> dict[str, int]:
    return {w: con.execute("SELECT count(*) FROM events_fts WHERE events_fts MATCH ?",
                           (quote_term(w),)).fetchone()[0] for w in words}


_TERM_SQL = ("SELECT e.id, bm25(events_fts) FROM events_fts JOIN events e ON e.id = "
             "events_fts.rowid WHERE events_fts MATCH ? AND e.user_id = ?")


def neighbour_scores(con: apsw.Connection, user_id: str, neighbours: dict[str, float],
                     costs: dict[str, list[float]]) -> dict[int, float]:
    """Each event's sum over the neighbour words of cosine x the word's BM25 term (FTS5's
    bm25() of the word alone, negated: higher is better)."""
    began = time.perf_counter()
    scores: dict[int, float] = defaultdict(float)
    for word, cosine in neighbours.items():
        for event_id, bm25 in con.execute(_TERM_SQL, (quote_term(word), user_id)):
            scores[event_id] += cosine * -bm25
    costs["stream fts ms"].append((time.perf_counter() - began) * 1000)
    return scores


@dataclass
class Setting:
    use: str  # "stream", "bm25" or "none"
    k: int = 5
    floor: float = 0.6
    weight: float = 0.25  # the stream's weight in the fusion
    lam: float = 0.3  # the neighbours' share in the BM25 stream
    session: bool = False  # also evidence in the session stream
    session_weight: float = 0.5
    rare: int | None = None  # expand only the question's words held by at most this many events


class Patched:
    """The fusion with the setting's neighbours in it (a context manager), for one
    conversation's memory."""

    def __init__(self, setting: Setting, vocab: Vocabulary, embedder,
                 costs: dict[str, list[float]]) -> None:
        self.setting, self.vocab, self.embedder, self.costs = setting, vocab, embedder, costs

    def scores(self, con: apsw.Connection, query: Query) -> dict[int, float]:
        """The neighbour score of every event holding a neighbour word (once per query)."""
        def compute() -> dict[int, float]:
            s = self.setting
            words = self.vocab.neighbours(con, self.embedder, query.searched, s.k, s.floor,
                                          self.costs, s.rare)
            return neighbour_scores(con, query.user_id, words, self.costs)
        return query.ranked(("wordnear scores",), compute)  # type: ignore[return-value]

    def stream(self, con: apsw.Connection, query: Query, kind, depth: int) -> list[int]:
        if kind != "event":
            return []
        return query.ranked_to(("wordnear", kind), depth,
                               lambda d: recall_streams._ranked(self.scores(con, query), d))

    def bm25(self, con: apsw.Connection, query: Query, kind, depth: int) -> list[int]:
        if kind != "event":
            return bm25_stream(con, query, kind, depth)

        def ranks(d: int) -> list[int]:
            scores: dict[int, float] = defaultdict(float)
            if query.match is not None:
                for event_id, bm25 in con.execute(_TERM_SQL, (query.match, query.user_id)):
                    scores[event_id] -= bm25
            for event_id, score in self.scores(con, query).items():
                scores[event_id] += self.setting.lam * score
            return recall_streams._ranked(scores, d)
        return query.ranked_to(("bm25", kind), depth, ranks)

    def evidence(self, con: apsw.Connection, query: Query, kind) -> dict[int, float]:
        """The session stream's evidence (recall_streams.session_evidence) plus the
        wordnear stream's reciprocal ranks at `session_weight`."""
        found = self._saved[4](con, query, kind)
        if kind == "event":
            k = recall_streams.SESSION_EVIDENCE_K
            for rank, event_id in enumerate(self.stream(con, query, kind,
                                                        recall_streams.SESSION_DEPTH), 1):
                found[event_id] += self.setting.session_weight / (k + rank)
        return found

    def __enter__(self) -> Patched:
        s = self.setting
        self._saved = (dict(fusion.STREAMS), dict(fusion.WEIGHTS), fusion.MATCH_STREAMS,
                       recall_streams.bm25_stream, recall_streams.session_evidence)
        if s.use == "stream":
            fusion.STREAMS["wordnear"] = self.stream
            fusion.WEIGHTS["wordnear"] = s.weight
            fusion.MATCH_STREAMS = fusion.MATCH_STREAMS | {"wordnear"}
            if s.session:
                recall_streams.session_evidence = self.evidence
        elif s.use == "bm25":
            fusion.STREAMS["bm25"] = self.bm25
            recall_streams.bm25_stream = self.bm25
        return self

    def __exit__(self, *exc) -> None:
        streams_, weights, match, bm25, evidence = self._saved
        fusion.STREAMS.clear()
        fusion.STREAMS.update(streams_)
        fusion.WEIGHTS.clear()
        fusion.WEIGHTS.update(weights)
        fusion.MATCH_STREAMS = match
        recall_streams.bm25_stream = bm25
        recall_streams.session_evidence = evidence


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def _memories(workdir: Path, embedder, max_share: float):
    """Each development conversation, its stored memory (open), its event ids' dia_ids
    and its vocabulary."""
    stores = prepare(workdir, embedder)
    for conv in load((REPO_ROOT / DEFAULT_DATA).resolve(), DEVELOPMENT):
        db, dia_of = stores[conv.sample_id]
        con = connect_readonly(db)
        try:
            yield conv, con, dia_of, Vocabulary.build(
                con, conv.sample_id, embedder, max_share,
                workdir / f"{conv.sample_id}.vocab-{max_share}.npz")
        finally:
            con.close()


def run(setting: Setting, workdir: Path, embedder, max_share: float) -> dict:
    """Context recall (default settings) and fusion R@2 / R@10 on the development
    conversations with the setting in place, and the lookup's costs."""
    config = Config()
    figures: dict[str, list[float]] = defaultdict(list)
    costs: dict[str, list[float]] = defaultdict(list)
    vocabulary_sizes = {}
    for conv, con, dia_of, vocab in _memories(workdir, embedder, max_share):
        vocabulary_sizes[conv.sample_id] = len(vocab.stems)
        stored = {dia_of[i]: c for i, c in con.execute("SELECT id, content FROM events")}
        recall = Recall()
        with Patched(setting, vocab, embedder, costs):
            for q in conv.questions:
                groups = ("all", CATEGORIES[q.category])
                query = product_query(con, conv, q, embedder, recall)
                began = time.perf_counter()
                top = [dia_of[c.id] for c in search(con, conv.sample_id, q.text, "event",
                                                    K, query=query)]
                costs["fusion ms"].append((time.perf_counter() - began) * 1000)
                for g in groups:
                    figures[f"R@2 {g}"].append(len(q.evidence & set(top[:2])) / len(q.evidence))
                    figures[f"R@10 {g}"].append(len(q.evidence & set(top)) / len(q.evidence))
                query = product_query(con, conv, q, embedder, recall)
                built = build_context(con, config, TokenCounter(), ContextRequest(
                    conv.sample_id, q.text, session_id=QUESTION_SESSION, window=[],
                    query=query))
                value = context_recall(built.messages, [stored[d] for d in sorted(q.evidence)])
                for g in groups:
                    figures[f"context {g}"].append(value)
                figures["tokens"].append(built.tokens)
    return {"setting": setting.__dict__, "max_share": max_share,
            "vocabulary": vocabulary_sizes,
            **{name: _mean(v) for name, v in sorted(figures.items())},
            **{f"{name} p50": round(percentile(v, 50), 3) for name, v in costs.items()},
            **{f"{name} p95": round(percentile(v, 95), 3) for name, v in costs.items()}}


def diagnose(workdir: Path, embedder, max_share: float,
             grid: list[tuple[int, float]]) -> dict:
    """How far the signal can reach: of the evidence turns sharing no stem with the
    focused question ("unshared"), the share holding a neighbour word, against the share
    of the other events holding one (lift = the first over the second); the share of
    the unshared evidence whose stems are in the vocabulary at all; and of the evidence
    the product's fusion leaves out of its top 10 ("missed"), the share the neighbour
    stream ranks in its own top 10 and top 50."""
    tallies: dict[str, list[float]] = defaultdict(list)
    for conv, con, dia_of, vocab in _memories(workdir, embedder, max_share):
        stem_of = _tokenizer(con, TOKENIZER)
        stems_of = {dia_of[i]: set(stem_of(c)) for i, c in
                    con.execute("SELECT id, content FROM events")}
        recall = Recall()
        for q in conv.questions:
            query = product_query(con, conv, q, embedder, recall)
            asked = {t for w in terms(query.searched) for t in stem_of(w)}
            unshared = [d for d in q.evidence if not stems_of[d] & asked]
            others = [d for d in stems_of if d not in q.evidence]
            tallies["unshared share"].append(len(unshared) / len(q.evidence))
            for d in unshared:
                tallies["unshared in vocabulary"].append(
                    float(any(s in vocab.index for s in stems_of[d])))
            fused = {dia_of[c.id] for c in search(con, conv.sample_id, q.text, "event", K,
                                                  query=query)}
            missed = [d for d in q.evidence if d not in fused]
            for k, floor in grid:
                words = vocab.neighbours(con, embedder, query.searched, k, floor,
                                         defaultdict(list))
                near = {t for w in words for t in stem_of(w)}
                name = f"k{k} floor{floor}"
                order = [dia_of[i] for i in recall_streams._ranked(
                    neighbour_scores(con, conv.sample_id, words, defaultdict(list)), 50)]
                for d in missed:
                    tallies[f"{name} missed at 10"].append(float(d in order[:10]))
                    tallies[f"{name} missed at 50"].append(float(d in order))
                tallies[f"{name} words"].append(len(near))
                for d in unshared:
                    tallies[f"{name} unshared reached"].append(float(bool(stems_of[d] & near)))
                tallies[f"{name} others reached"].append(
                    sum(bool(stems_of[d] & near) for d in others) / max(len(others), 1))
    found = {name: _mean(v) for name, v in tallies.items()}
    for k, floor in grid:
        name = f"k{k} floor{floor}"
        if found[f"{name} others reached"]:
            found[f"{name} lift"] = round(found[f"{name} unshared reached"]
                                          / found[f"{name} others reached"], 2)
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hilo-wordnear")
    p.add_argument("--use", choices=("stream", "bm25", "none"), default="stream")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--floor", type=float, default=0.6)
    p.add_argument("--weight", type=float, default=0.25)
    p.add_argument("--lam", type=float, default=0.3)
    p.add_argument("--session", action="store_true")
    p.add_argument("--session-weight", type=float, default=0.5)
    p.add_argument("--max-share", type=float, default=MAX_SHARE)
    p.add_argument("--rare", type=int, default=None,
                   help="expand only the question's words held by at most this many events")
    p.add_argument("--diagnose", action="store_true",
                   help="the reach of the neighbours over a grid of k and floor, no run")
    args = p.parse_args()
    embedder = local_embedders.make(LOCAL_MODEL)
    if args.diagnose:
        grid = [(k, f) for k in (3, 5, 10) for f in (0.4, 0.5, 0.6, 0.7)]
        print(json.dumps(diagnose(args.workdir, embedder, args.max_share, grid), indent=1))
        return
    setting = Setting(args.use, args.k, args.floor, args.weight, args.lam, args.session,
                      args.session_weight, args.rare)
    print(json.dumps(run(setting, args.workdir, embedder, args.max_share), indent=1))


if __name__ == "__main__":
    main()
