"""Approximate vector index: recall@10 against exact search, query time, build time.

    python -m tests.bench.vector_index [--vectors 100000] [--queries 200] [--cache F.npy]

Real all-MiniLM-L6-v2 vectors (the local embedder, on sentences of Python's own
documentation) as queries; the indexed vectors are those sentences' vectors plus
mixtures of two or three of them, re-normalised (embedding 10^5 sentences would take
hours on a laptop; the mixtures stay on the model's manifold far better than random
unit vectors). Candidates: faiss HNSW (float32 and 8-bit scalars, the one app/ann.py
uses) and usearch (float32 and int8).
"""

from __future__ import annotations

import re
import time

import numpy as np

from app.embedders import LocalEmbedder
from tests.bench.report import emit, parser


def documentation_sentences(limit: int) -> list[str]:
    import pydoc_data.topics

    text = " ".join(pydoc_data.topics.topics.values())
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 30 < len(s.strip()) < 300]
    return list(dict.fromkeys(found))[:limit]


def real_vectors(limit: int, cache: str | None) -> np.ndarray:
    if cache:
        try:
            return np.load(cache)[:limit]
        except OSError:
            pass
    vectors = LocalEmbedder(64).embed(documentation_sentences(limit)).astype(np.float32)
    if cache:
        np.save(cache, vectors)
    return vectors


def mixtures(real: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, len(real), size=(count, 3))
    weights = rng.dirichlet([1.0, 1.0, 0.5], size=count).astype(np.float32)
    mixed = np.einsum("nk,nkd->nd", weights, real[picks])
    return mixed / np.linalg.norm(mixed, axis=1, keepdims=True)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact)]))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--real", type=int, default=2400, help="sentences to embed")
    p.add_argument("--cache", help="a .npy file to keep the embedded sentences in")
    args = p.parse_args()
    if args.quick:
        args.vectors = 10_000
    rng = np.random.default_rng(17)
    real = real_vectors(args.real, args.cache)
    order = rng.permutation(len(real))
    queries, base = real[order[:args.queries]], real[order[args.queries:]]
    data = np.vstack([base, mixtures(base, max(0, args.vectors - len(base)), rng)])
    exact = np.argsort(-(queries @ data.T), axis=1)[:, :10]
    lines = [f"{len(data):,} vectors of {data.shape[1]} dimensions ({len(base):,} real "
             f"MiniLM vectors, the rest mixtures of them), {len(queries)} real queries held "
             "out; M = 32, efConstruction = 64, efSearch = 128 (usearch: connectivity 32, "
             "expansion 64/128); one thread.", "",
             "| index | recall@10 vs exact | ms/query | build s |", "|---|---:|---:|---:|"]
    results = {}

    import faiss
    from usearch.index import Index

    def faiss_hnsw(kind: str):
        if kind == "flat":
            index = faiss.IndexHNSWFlat(data.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexHNSWSQ(data.shape[1], faiss.ScalarQuantizer.QT_8bit, 32,
                                      faiss.METRIC_INNER_PRODUCT)
            index.train(data)
        index.hnsw.efConstruction = 64
        index.add(data)
        index.hnsw.efSearch = 128
        return lambda q: index.search(q.reshape(1, -1), 10)[1][0]

    def usearch(dtype: str):
        index = Index(ndim=data.shape[1], metric="cos", dtype=dtype, connectivity=32,
                      expansion_add=64, expansion_search=128)
        index.add(np.arange(len(data)), data)
        return lambda q: index.search(q, 10).keys

    candidates = {"faiss HNSW float32": lambda: faiss_hnsw("flat"),
                  "faiss HNSW sq8 (used)": lambda: faiss_hnsw("sq8"),
                  "usearch f32": lambda: usearch("f32"), "usearch i8": lambda: usearch("i8")}
    for name, build in candidates.items():
        start = time.perf_counter()
        search = build()
        built = time.perf_counter() - start
        start = time.perf_counter()
        found = np.array([search(q) for q in queries])
        per_query = (time.perf_counter() - start) / len(queries) * 1000
        results[name] = {"recall_at_10": recall(found, exact), "ms_per_query": per_query,
                         "build_seconds": built}
        lines.append(f"| {name} | {results[name]['recall_at_10']:.3f} | {per_query:.2f} | "
                     f"{built:.1f} |")
    emit(args, "vector_index", results, "\n".join(lines))


if __name__ == "__main__":
    main()
