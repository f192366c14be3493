"""Learning to rank the fusion's candidates (issue 28), development conversations only.

For each LoCoMo development question, the events fusion considers (every match
stream's top STREAM_DEPTH, as app.recall.fusion.search reads them) get features
computed from what the streams already know at query time (FEATURES): each stream's
reciprocal rank, the RRF score, the BM25 score over the query's best, the cosine and its
gap to the best, the session stream's own evidence and what the spread added, the
asking share, whether the speaker and time labels hold, the length, the age rank, the
share of the searched words held, and a few question-type interactions. Label: the
event is one of the question's evidence turns. Rankers (FITTERS: pointwise logistic
regression, pairwise RankNet-style, listwise ListNet, and boosted trees as a non-linear
ceiling) are fitted with leave-one-conversation-out cross-validation over the 6
development conversations and compared with RRF on the same candidates: R@2, R@5, R@10
per fold and pooled, by category, and context recall at the default settings with the
fold's ranker ordering search()'s events in build_context.

    python -m tests.bench.ltr [--workdir DIR] [--oracle] [--no-context]
                              [--variant FITTER:COLUMNS[:PARAM=VALUE...]]

e.g. --variant listwise:-log_words:l2=0.01:gate=1 (every feature but log_words, L2 0.01,
RRF's order kept for questions that ask what would be). Prints one JSON document. The
stores and the features are kept in --workdir (default: hilo-ltr in the temporary
directory) and reused.
The held-out conversations are never loaded. Needs scikit-learn and SciPy (in the
development venv; not dependencies of Hilo).

Result (issue 28, all-MiniLM-L6-v2, cross-validated, against RRF's 0.572 / 0.790 and
context recall 0.716): the best linear rankers gain R@2 +0.016 to +0.024 and R@10 +0.013
to +0.014, but context recall moves -0.001 to +0.010, and every variant gaining 0.02 on
R@2 loses 0.03-0.04 of open-domain R@2 (and up to 0.05 of its context recall). The gain
sits in the first places (temporal R@2 +0.06), which the context quotes anyway: in the
context's order (speaker first) R@2 gains 0.016-0.022 but R@6 only 0.004-0.008. Boosted
trees do no better (context +0.004), so the features do not hold what is missing;
ranking the evidence among the candidates first would give context recall 0.885
(--oracle), but 15 % of evidence turns are not among the candidates at all (27 % for
multi-hop) and 11 % rank below 20. Not taken into the product.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import re
import tempfile
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import numpy as np
from scipy.optimize import minimize  # development only: not dependencies of Hilo
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression

from app.config import Config
from app.db import Durability, connect_readonly
from app.fts import terms
from app.learn.embed import embed_pending
from app.model.embedders import LOCAL_MODEL
from app.model.token_count import TokenCounter
from app.recall.bm25 import FTS_SQL
from app.recall.fusion import MATCH_STREAMS, RRF_K, STREAM_DEPTH, STREAMS, WEIGHTS, fuse
from app.recall.query import Query, focus_question
from app.recall.sentences import WordsHeld
from app.recall.state import Recall
from app.recall.streams import ASKING_WEIGHT, asking_share, reach, session_evidence
from app.recall.vectors import decode_vector
from app.turn import context as turn_context
from app.turn.context import ContextRequest, build_context
from app.writer import Writer
from tests.bench import local_embedders
from tests.bench.locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    DEVELOPMENT,
    QUESTION_SESSION,
    Form,
    context_recall,
    ingest,
    load,
)
from tests.bench.report import REPO_ROOT

RANKED_STREAMS = tuple(STREAMS)
FEATURES = (
    *(f"rr_{s}" for s in RANKED_STREAMS),  # 1/(RRF_K + rank), 0 if absent
    "rrf",  # the fused RRF score (WEIGHTS)
    "bm25",  # BM25 score over the query's best (0 if no word)
    "cosine", "cosine_gap",  # cosine to the question, and the best's less it
    "own", "spread",  # the session stream's own evidence (over the best), what the spread added
    "session",  # the session stream's score over the best
    "asking",  # the share of its sentences that are questions
    "role_match",  # the question asks about one speaker, and this one said it
    "time_match",  # the question names a time, and this was said then
    "is_user",  # said by the user
    "log_words",  # log(1 + words)
    "age",  # rank from the newest over the events (0 newest, 1 oldest)
    "coverage",  # the share of the searched words it holds
    "session_mass",  # the own evidence of the candidates in its session, over the best
    "when_x_time",  # the question asks when, and the event says a time ("last week")
    "would_x_cosine",  # the question asks what would be (open-domain): the cosine
    "would_x_bm25",  # ... and the BM25 feature
    "asks_would",  # the question asks what would be (the same for every candidate)
)
_ASKS_WHEN = re.compile(r"^\s*(when|how long|what (year|month|date|day|time))\b", re.I)
_ASKS_WOULD = re.compile(r"\b(would|likely|might|could)\b", re.I)
_SAYS_TIME = re.compile(
    r"\b(yesterday|today|tomorrow|tonight|last|next|ago|week|weekend|month|year|since|"
    r"january|february|march|april|may|june|july|august|september|october|november|"
    r"december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d{4})\b", re.I)


# -- the features --------------------------------------------------------------------------

def candidates(con, query: Query, depth: int = STREAM_DEPTH):
    """search()'s ranked streams and every candidate it fuses (no limit)."""
    ranked = {name: stream(con, query, "event", depth) for name, stream in STREAMS.items()
              if name in MATCH_STREAMS}
    matched = {i for ids in ranked.values() for i in ids}
    if not matched:
        return ranked, []
    for name, stream in STREAMS.items():
        if name not in ranked:
            ranked[name] = [i if i in matched else None for i in stream(con, query, "event", depth)]
    ranked = {name: ranked[name] for name in STREAMS}
    return ranked, fuse(ranked, "event", WEIGHTS, None)


def session_parts(con, query: Query) -> tuple[dict[int, float], dict[int, float]]:
    """The session stream's own evidence per event (its asking discount applied) and what
    the spread added (app.recall.streams._session_ranks, taken apart)."""
    evidence = session_evidence(con, query, "event")
    if not evidence:
        return {}, {}
    strongest: dict[tuple[int, int], float] = defaultdict(float)
    spreads, asks = reach(con, query.user_id, list(evidence))
    for owner_id, own in evidence.items():
        for neighbour, distance, share, _ in spreads.get(owner_id, []):
            strongest[(neighbour, distance)] = max(strongest[(neighbour, distance)], share * own)
    own = {i: e * (1.0 - (1.0 - ASKING_WEIGHT) * asks.get(i, 0.0)) for i, e in evidence.items()}
    spread: dict[int, float] = defaultdict(float)
    for (neighbour, _), value in strongest.items():
        spread[neighbour] += value
    return own, dict(spread)


class Store:
    """What is known of one conversation's events before any question: role, length,
    asking share, age rank, labels, vectors."""

    def __init__(self, con, user: str, model: str) -> None:
        rows = con.execute("SELECT id, role, content FROM events WHERE user_id = ? "
                           "ORDER BY created_at DESC, id DESC", (user,)).fetchall()
        n = max(1, len(rows) - 1)
        self.role = {i: role for i, role, _ in rows}
        self.content = {i: content for i, _, content in rows}
        self.session = dict(con.execute("SELECT id, session_id FROM events WHERE user_id = ?",
                                        (user,)).fetchall())
        self.words = {i: len(content.split()) for i, _, content in rows}
        self.asking = {i: asking_share(content) for i, _, content in rows}
        self.age = {i: position / n for position, (i, _, _) in enumerate(rows)}
        self.labels = {i: set(line.split()) for i, line in
                       con.execute("SELECT id, labels FROM event_labels")}
        ids, vectors = [], []
        for owner_id, blob in con.execute(
                "SELECT owner_id, vector FROM embeddings WHERE owner_kind = 'event' AND "
                "model = ? AND user_id = ? AND vector IS NOT NULL", (model, user)):
            ids.append(owner_id)
            vectors.append(decode_vector(blob))
        matrix = np.vstack(vectors)
        self.vector_ids = np.array(ids)
        self.vectors = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def features(con, query: Query, store: Store, ranked, found) -> np.ndarray:
    """One row of FEATURES per candidate in `found` (fuse's order)."""
    ids = [c.id for c in found]
    bm25: dict[int, float] = {}
    if query.match is not None:
        bm25 = {i: -s for i, s in con.execute(FTS_SQL["event"], (query.match, query.user_id,
                                                                  10_000))}
    best_bm25 = max(bm25.values(), default=0.0) or 1.0
    cosines: dict[int, float] = {}
    if query.vector is not None:
        q = query.vector / np.linalg.norm(query.vector)
        cosines = dict(zip(store.vector_ids.tolist(), (store.vectors @ q).tolist(), strict=True))
    best_cosine = max((cosines.get(i, 0.0) for i in ids), default=0.0)
    own, spread = session_parts(con, query)
    best_own = max(own.values(), default=0.0) or 1.0
    best_session = max((own.get(i, 0.0) + spread.get(i, 0.0) for i in ids), default=0.0) or 1.0
    labels = query.labels
    held = WordsHeld(con, query.searched)
    searched = max(1, len(terms(query.searched)))
    mass: dict[str, float] = defaultdict(float)
    for i in ids:
        mass[store.session.get(i)] += own.get(i, 0.0) / best_own
    best_mass = max(mass.values(), default=0.0) or 1.0
    asks_when = float(bool(_ASKS_WHEN.search(query.text)))
    asks_would = float(bool(_ASKS_WOULD.search(query.text)))
    rows = []
    for c in found:
        i = c.id
        cosine = cosines.get(i, 0.0)
        rows.append([
            *(1.0 / (RRF_K + c.ranks[s]) if s in c.ranks else 0.0 for s in RANKED_STREAMS),
            c.score,
            bm25.get(i, 0.0) / best_bm25,
            cosine, best_cosine - cosine,
            own.get(i, 0.0) / best_own, spread.get(i, 0.0) / best_own,
            (own.get(i, 0.0) + spread.get(i, 0.0)) / best_session,
            store.asking.get(i, 0.0),
            float(labels is not None and labels.role is not None
                  and store.role.get(i) == labels.role),
            float(labels is not None and bool(labels.times) and labels.holds(
                store.labels.get(i, set()) | ({labels.role} if labels.role else set()))),
            float(store.role.get(i) == "user"),
            math.log1p(store.words.get(i, 0)),
            store.age.get(i, 1.0),
            len(held.words_in(store.content.get(i, ""))) / searched,
            mass[store.session.get(i)] / best_mass,
            asks_when * bool(_SAYS_TIME.search(store.content.get(i, ""))),
            asks_would * cosine,
            asks_would * bm25.get(i, 0.0) / best_bm25,
            asks_would,
        ])
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


# -- collecting --------------------------------------------------------------------------

def product_query(con, conv, q, embedder, recall: Recall) -> Query:
    """The query the benchmark's product methods ask (tests/bench/locomo.py)."""
    asked_at = conv.turns[-1].when + timedelta(minutes=1)
    searched, labels = focus_question(con, conv.sample_id, q.text, asked_at, recall=recall)
    vector = local_embedders.embed_question(embedder, searched)
    return Query(conv.sample_id, q.text, recall=recall, searched=searched, labels=labels,
                 vector=vector, model=embedder.model)


def prepare(workdir: Path, embedder) -> dict[str, tuple[Path, dict[int, str]]]:
    """Each development conversation stored and embedded (once: reused when present)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = (REPO_ROOT / DEFAULT_DATA).resolve()
    stores = {}
    for conv in load(path, DEVELOPMENT):
        db = workdir / f"{conv.sample_id}.sqlite3"
        ids = workdir / f"{conv.sample_id}.dia.json"
        if not ids.exists():
            db.unlink(missing_ok=True)
            with Writer(db, Durability.NORMAL) as writer:
                dia_of = ingest(writer, Config(), conv, Form("product"))
                while embed_pending(writer, embedder, limit=4096, batch_size=64):
                    pass
            ids.write_text(json.dumps(dia_of))
        stores[conv.sample_id] = (db, {int(k): v for k, v in json.loads(ids.read_text()).items()})
    return stores


def collect(workdir: Path, embedder) -> tuple[list, dict]:
    """Per question: conversation, category, evidence count, the candidates' features and
    labels (in RRF order)."""
    stores = prepare(workdir, embedder)
    conversations = {c.sample_id: c for c in load((REPO_ROOT / DEFAULT_DATA).resolve(),
                                                  DEVELOPMENT)}
    questions = []
    for sample_id, (db, dia_of) in stores.items():
        conv = conversations[sample_id]
        con = connect_readonly(db)
        recall = Recall()
        store = Store(con, sample_id, embedder.model)
        for q in conv.questions:
            query = product_query(con, conv, q, embedder, recall)
            ranked, found = candidates(con, query)
            x = features(con, query, store, ranked, found)
            y = np.array([dia_of[c.id] in q.evidence for c in found], dtype=np.float64)
            questions.append({"conv": sample_id, "category": q.category,
                              "evidence": len(q.evidence), "x": x, "y": y})
        con.close()
    return questions, stores


# -- fitting -------------------------------------------------------------------------------

class Linear:
    """score = w . (x - mean) / scale: standardised on the training rows."""

    def __init__(self, weights: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> None:
        self.weights, self.mean, self.scale = weights, mean, scale

    def score(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale) @ self.weights


def _standardise(train: list[dict], columns: np.ndarray):
    x = np.vstack([q["x"][:, columns] for q in train if len(q["x"])])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def fit_pointwise(train: list[dict], columns: np.ndarray, c: float = 1.0) -> Linear:
    """Logistic regression on every candidate."""
    mean, scale = _standardise(train, columns)
    x = np.vstack([(q["x"][:, columns] - mean) / scale for q in train if len(q["x"])])
    y = np.concatenate([q["y"] for q in train if len(q["x"])])
    model = LogisticRegression(C=c, max_iter=2000).fit(x, y)
    return Linear(model.coef_[0], mean, scale)


def fit_pairwise(train: list[dict], columns: np.ndarray, c: float = 1.0,
                 negatives: int = 30, seed: int = 0) -> Linear:
    """RankNet-style logistic regression on (evidence - other) differences within a
    question: each evidence candidate against up to `negatives` others, the
    higher-ranked by RRF first (those are what it must beat)."""
    rng = np.random.default_rng(seed)
    mean, scale = _standardise(train, columns)
    diffs = []
    for q in train:
        if not len(q["x"]) or not q["y"].any():
            continue
        x = (q["x"][:, columns] - mean) / scale
        pos, neg = np.flatnonzero(q["y"] == 1), np.flatnonzero(q["y"] == 0)
        if not len(neg):
            continue
        chosen = np.concatenate([neg[:negatives // 2], rng.choice(
            neg, size=min(len(neg), negatives - negatives // 2), replace=False)])
        for p in pos:
            diffs.append(x[p] - x[chosen])
    d = np.vstack(diffs)
    x = np.vstack([d, -d])
    y = np.concatenate([np.ones(len(d)), np.zeros(len(d))])
    model = LogisticRegression(C=c, max_iter=2000, fit_intercept=False).fit(x, y)
    return Linear(model.coef_[0], mean, scale)


def fit_listwise(train: list[dict], columns: np.ndarray, l2: float = 1e-3) -> Linear:
    """ListNet: per question, the softmax of the scores over its candidates against the
    evidence (each evidence candidate an equal share); every question weighs the same."""
    mean, scale = _standardise(train, columns)
    lists = [((q["x"][:, columns] - mean) / scale, q["y"] / q["y"].sum())
             for q in train if len(q["x"]) and q["y"].any()]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = l2 * w @ w, 2 * l2 * w
        for x, t in lists:
            s = x @ w
            s = s - s.max()
            p = np.exp(s)
            z = p.sum()
            p /= z
            total += (-(t * s).sum() + math.log(z)) / len(lists)
            grad += x.T @ (p - t) / len(lists)
        return total, grad

    w = minimize(loss, np.zeros(len(columns)), jac=True, method="L-BFGS-B").x
    return Linear(w, mean, scale)


class Boosted:
    """Gradient-boosted trees on every candidate: how far a non-linear model gets."""

    def __init__(self, train: list[dict], columns: np.ndarray) -> None:
        x = np.vstack([q["x"][:, columns] for q in train if len(q["x"])])
        y = np.concatenate([q["y"] for q in train if len(q["x"])])
        self.model = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05,
                                                    max_leaf_nodes=15).fit(x, y)

    def score(self, x: np.ndarray) -> np.ndarray:
        return self.model.predict_proba(x)[:, 1]


FITTERS = {"pointwise": fit_pointwise, "pairwise": fit_pairwise, "listwise": fit_listwise,
           "boosted": Boosted}


def recall_at(order: np.ndarray, y: np.ndarray, evidence: int, k: int) -> float:
    return float(y[order[:k]].sum()) / evidence


def evaluate(questions: list[dict], score) -> dict:
    """R@2/5/10 overall and by category; `score(q)` -> scores (None: RRF's order)."""
    sums: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for q in questions:
        n = len(q["x"])
        order = np.arange(n) if score is None or not n else np.argsort(-score(q), kind="stable")
        for k in (2, 5, 10):
            value = recall_at(order, q["y"], q["evidence"], k) if n else 0.0
            for group in ("all", CATEGORIES[q["category"]]):
                sums[group][f"R@{k}"].append(value)
    return {group: {m: round(float(np.mean(v)), 4) for m, v in ms.items()} | {"n": len(ms["R@2"])}
            for group, ms in sums.items()}


def fold_scores(folds, columns, gate: bool = False):
    return lambda q: gated(folds[q["conv"]], q["x"], columns, gate)


def gated(model, x: np.ndarray, columns: np.ndarray, gate: bool) -> np.ndarray:
    """The model's scores; with `gate`, RRF's for a question that asks what would be."""
    if gate and len(x) and x[0, FEATURES.index("asks_would")]:
        return x[:, FEATURES.index("rrf")]
    return model.score(x[:, columns])


# -- context recall with a fold's ranker in place of RRF -------------------------------------

def context_recall_with(stores, embedder, folds, columns, gate: bool = False) -> dict:
    """Context recall at the default settings, each conversation's questions built with
    its fold's ranker ordering search()'s events (None: the product's RRF)."""
    conversations = {c.sample_id: c for c in load((REPO_ROOT / DEFAULT_DATA).resolve(),
                                                  DEVELOPMENT)}
    original = turn_context.search
    sums: dict[str, list[float]] = defaultdict(list)
    config = Config()
    for sample_id, (db, dia_of) in stores.items():
        conv = conversations[sample_id]
        con = connect_readonly(db)
        recall = Recall()
        store = Store(con, sample_id, embedder.model)
        stored = {dia_of[i]: content
                  for i, content in con.execute("SELECT id, content FROM events")}
        model = folds[sample_id] if isinstance(folds, dict) else folds
        evidence: frozenset[str] = frozenset()

        def learned_search(con_, user_id, text, kind, limit, streams=None, *, query=None, **kw):
            if model is None or kind != "event":  # noqa: B023 — called at once
                return original(con_, user_id, text, kind, limit, streams, query=query, **kw)
            ranked, found = candidates(con_, query, max(limit, STREAM_DEPTH))
            if not found:
                return []
            if model == "oracle":  # the evidence first, then RRF's order: ranking's ceiling  # noqa: B023 — called at once
                s = np.array([float(dia_of[c.id] in evidence) for c in found])  # noqa: B023 — called at once
            else:
                s = gated(model, features(con_, query, store, ranked, found), columns, gate)  # noqa: B023 — called at once
            order = sorted(range(len(found)), key=lambda j: (-s[j], -found[j].id))
            return [found[j] for j in order[:limit]]

        turn_context.search = learned_search
        try:
            for q in conv.questions:
                evidence = q.evidence
                query = product_query(con, conv, q, embedder, recall)
                built = build_context(con, config, TokenCounter(), ContextRequest(
                    sample_id, q.text, session_id=QUESTION_SESSION, window=[], query=query))
                value = context_recall(built.messages, [stored[d] for d in sorted(q.evidence)])
                for group in ("all", CATEGORIES[q.category]):
                    sums[group].append(value)
                sums["tokens"].append(built.tokens)
        finally:
            turn_context.search = original
        con.close()
    return {g: round(float(np.mean(v)), 4) for g, v in sums.items()}


def columns_of(spec: str) -> np.ndarray:
    """"all", or "-a,-b" (all but these), or "a,b" (only these)."""
    if spec == "all":
        return np.arange(len(FEATURES))
    names = spec.split(",")
    if all(n.startswith("-") for n in names):
        return np.array([j for j, f in enumerate(FEATURES) if "-" + f not in names])
    return np.array([FEATURES.index(n) for n in names])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hilo-ltr")
    p.add_argument("--variant", action="append", default=[],
                   help="FITTER:COLUMNS[:PARAM=VALUE], e.g. listwise:-log_words:l2=0.01 "
                        "(default: each fitter on every feature)")
    p.add_argument("--no-context", action="store_true", help="skip context recall")
    p.add_argument("--oracle", action="store_true",
                   help="also context recall with the evidence candidates ranked first")
    args = p.parse_args()
    embedder = local_embedders.make(LOCAL_MODEL)
    embedder.embed(["warm up"])
    cache = args.workdir / f"features-{len(FEATURES)}.pickle"
    if cache.exists():
        questions = pickle.loads(cache.read_bytes())
        stores = prepare(args.workdir, embedder)
    else:
        questions, stores = collect(args.workdir, embedder)
        cache.write_bytes(pickle.dumps(questions))
    results = {"features": FEATURES, "questions": len(questions),
               "candidates_mean": round(float(np.mean([len(q["x"]) for q in questions])), 1),
               "evidence_in_candidates": round(float(np.mean(
                   [q["y"].sum() / q["evidence"] for q in questions])), 4),
               "rrf": {"pooled": evaluate(questions, None),
                       "folds": {c: evaluate([q for q in questions if q["conv"] == c], None)["all"]
                                 for c in DEVELOPMENT}}}
    if not args.no_context:
        results["rrf"]["context"] = context_recall_with(stores, embedder, None, None)
    if args.oracle:
        results["oracle context"] = context_recall_with(stores, embedder, "oracle", None)
    for variant in args.variant or [f"{name}:all" for name in FITTERS]:
        name, spec, *params = variant.split(":")
        kw = {k: float(v) for k, v in (param.split("=") for param in params)}
        gate = bool(kw.pop("gate", 0))
        columns = columns_of(spec)
        fitter = FITTERS[name]
        folds = {conv: fitter([q for q in questions if q["conv"] != conv], columns, **kw)
                 for conv in DEVELOPMENT}
        scorer = fold_scores(folds, columns, gate)
        results[variant] = {
            "pooled": evaluate(questions, scorer),
            "folds": {c: evaluate([q for q in questions if q["conv"] == c], scorer)["all"]
                      for c in DEVELOPMENT}}
        whole = fitter(questions, columns, **kw)
        if isinstance(whole, Linear):
            results[variant]["weights_all"] = dict(zip(
                [FEATURES[j] for j in columns], np.round(whole.weights, 3).tolist(), strict=True))
        if not args.no_context:
            results[variant]["context"] = context_recall_with(stores, embedder, folds, columns,
                                                              gate)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
