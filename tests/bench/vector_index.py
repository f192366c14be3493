"""Approximate vector index: recall@10 against exact search, query time, build time.

    python -m tests.bench.vector_index [--vectors 100000,1000000] [--queries 200]
                                       [--cache F.npy] [--used-only]

Real all-MiniLM-L6-v2 vectors (the local embedder, on sentences of Python's own
documentation) as queries; the indexed vectors are those sentences' vectors plus
mixtures of two or three of them, re-normalised (embedding 10^5 sentences would take
hours on a laptop; the mixtures stay on the model's manifold far better than random
unit vectors). Candidates: app/recall/ann.py's index (faiss HNSW, 8-bit scalars), asked for
as many hits as the fact stream asks (2 x STREAM_DEPTH: superseded facts are filtered
after), and for comparison faiss HNSW float32 and usearch (float32 and int8) at top 10.
The comparison runs at the first size only; `--used-only` leaves it out.

Target: recall@10 >= 0.95 against exact search for the index app/recall/ann.py builds.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np

from app.model.embedders import LocalEmbedder
from app.recall import ann
from app.recall.fusion import STREAM_DEPTH
from tests.bench.report import emit, parser

TARGET_RECALL = 0.95
USED = "app/recall/ann.py: faiss HNSW sq8 (used)"


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


def mixtures(real: np.ndarray, count: int, rng: np.random.Generator,
             chunk: int = 50_000) -> np.ndarray:
    mixed = np.zeros((count, real.shape[1]), dtype=np.float32)
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        picks = rng.integers(0, len(real), size=(n, 3))
        weights = rng.dirichlet([1.0, 1.0, 0.5], size=n).astype(np.float32)
        part = np.einsum("nk,nkd->nd", weights, real[picks])
        mixed[start:start + n] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return mixed


def exact_top10(queries: np.ndarray, data: np.ndarray, chunk: int = 20) -> np.ndarray:
    found = []
    for start in range(0, len(queries), chunk):
        scores = queries[start:start + chunk] @ data.T
        top = np.argpartition(-scores, 10, axis=1)[:, :10]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        found.append(np.take_along_axis(top, order, axis=1))
    return np.vstack(found)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--vectors", default="100000",
                   help="comma-separated sizes; the comparison runs at the first")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--real", type=int, default=2400, help="sentences to embed")
    p.add_argument("--cache", help="a .npy file to keep the embedded sentences in")
    p.add_argument("--used-only", action="store_true", help="only the index app/recall/ann.py builds")
    args = p.parse_args()
    sizes = [10_000] if args.quick else [int(size) for size in args.vectors.split(",")]
    real = real_vectors(args.real, args.cache)
    lines = [f"{len(real) - args.queries:,} real MiniLM vectors and, up to each size, "
             f"mixtures of them; {args.queries} real queries held out. app/recall/ann.py: M = "
             f"{ann.HNSW_M}, efConstruction = {ann.EF_CONSTRUCTION}, efSearch = "
             f"{ann.EF_SEARCH}, asked for {2 * STREAM_DEPTH} hits per query as the fact "
             "stream asks, recall counted on its first 10; faiss float32 M = 32, efSearch "
             "128; usearch connectivity 32, expansion 64/128. Searched on one thread, "
             "built on every core.", "",
             "| vectors | index | recall@10 vs exact | ms/query | build s |",
             "|---:|---|---:|---:|---:|"]
    results: dict = {}
    for n, size in enumerate(sizes):
        results[str(size)] = measure(real, size, args.queries, compare=n == 0 and not args.used_only)
        for name, r in results[str(size)].items():
            lines.append(f"| {size:,} | {name} | {r['recall_at_10']:.3f} | "
                         f"{r['ms_per_query']:.2f} | {r['build_seconds']:.1f} |")
    verdict = {f"recall@10 >= {TARGET_RECALL} at {int(size):,} ({USED})":
               r[USED]["recall_at_10"] >= TARGET_RECALL for size, r in results.items()}
    lines += ["", "### Targets", ""] + [f"- {'met' if ok else 'MISSED'}: {name}"
                                          for name, ok in verdict.items()]
    emit(args, "vector_index", {"sizes": results, "verdict": verdict}, "\n".join(lines))


def measure(real: np.ndarray, size: int, count: int, compare: bool) -> dict:
    """Recall@10 against exact search, ms per query and build seconds of each index."""
    import faiss

    rng = np.random.default_rng(17)
    order = rng.permutation(len(real))
    queries, base = real[order[:count]], real[order[count:]]
    data = np.vstack([base, mixtures(base, max(0, size - len(base)), rng)])
    exact = exact_top10(queries, data)

    def used():
        index = ann.HnswIndex.build(data, np.arange(len(data)))
        return lambda q: index.search(q, 2 * STREAM_DEPTH)[0][:10]

    def faiss_float32():
        index = faiss.IndexHNSWFlat(data.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 64
        faiss.omp_set_num_threads(os.cpu_count() or 1)  # built as app/recall/ann.py's is
        index.add(data)
        index.hnsw.efSearch = 128
        faiss.omp_set_num_threads(1)  # searched as app/recall/ann.py's is
        return lambda q: index.search(q.reshape(1, -1), 10)[1][0]

    def usearch(dtype: str):
        from usearch.index import Index

        index = Index(ndim=data.shape[1], metric="cos", dtype=dtype, connectivity=32,
                      expansion_add=64, expansion_search=128)
        index.add(np.arange(len(data)), data)
        return lambda q: index.search(q, 10).keys

    candidates = {USED: used}
    if compare:
        candidates |= {"faiss HNSW float32": faiss_float32,
                       "usearch f32": lambda: usearch("f32"), "usearch i8": lambda: usearch("i8")}
    results = {}
    for name, build in candidates.items():
        start = time.perf_counter()
        search = build()
        built = time.perf_counter() - start
        start = time.perf_counter()
        found = np.array([search(q) for q in queries])
        per_query = (time.perf_counter() - start) / len(queries) * 1000
        results[name] = {"recall_at_10": recall(found, exact), "ms_per_query": per_query,
                         "build_seconds": built}
    return results


if __name__ == "__main__":
    main()
