"""The approximate nearest-neighbour index for a large block of vectors (faiss HNSW).

Chosen by measurement on real all-MiniLM-L6-v2 vectors (BENCHMARKS.md, "Vector
index"): faiss HNSW answers top-10 in well under a millisecond at recall@10 above
0.95 against exact search, where usearch's int8 index missed the recall target. The
vectors are stored as 8-bit scalars (a quarter of float32: 10^6 vectors of 384
dimensions take ~0.4 GB, with the graph ~0.65 GB) and compared by inner product; the
callers L2-normalise, so that is cosine.

faiss is imported when the first index is built or read, never at start-up: a store
below `[embedder] ann_threshold` vectors never loads it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np

# Graph degree, and candidates kept while building and while searching. M=32 with
# efSearch=128 is the measured point with recall@10 >= 0.95 at ~1 ms per query.
HNSW_M = 32
EF_CONSTRUCTION = 64
EF_SEARCH = 128


_searching = threading.local()


def _faiss():
    # faiss's loader logs which CPU build it picked, at info, on every import.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss  # lazily: ~0.4 s of import, only for blocks above the threshold

    return faiss


class HnswIndex:
    """Vectors under integer keys (app/vectors.py: embeddings row ids) in a faiss HNSW
    graph; add and search, never remove."""

    def __init__(self, index) -> None:
        self._index = index

    @classmethod
    def build(cls, vectors: np.ndarray, keys: np.ndarray) -> HnswIndex:
        """An index of these L2-normalised vectors (the scalar quantiser is trained on them)."""
        faiss = _faiss()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        graph = faiss.IndexHNSWSQ(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit, HNSW_M,
                                  faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = EF_CONSTRUCTION
        graph.hnsw.efSearch = EF_SEARCH
        graph.train(vectors)
        index = cls(faiss.IndexIDMap(graph))
        index.add(vectors, keys)
        return index

    @classmethod
    def read(cls, path: Path) -> HnswIndex:
        faiss = _faiss()
        index = faiss.read_index(str(path))
        faiss.downcast_index(index.index).hnsw.efSearch = EF_SEARCH  # not kept in the file
        return cls(index)

    def write(self, path: Path) -> None:
        """Write atomically: a reader never sees half a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        _faiss().write_index(self._index, str(partial))
        os.replace(partial, path)

    @property
    def size(self) -> int:
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    def add(self, vectors: np.ndarray, keys: np.ndarray) -> None:
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                                 np.ascontiguousarray(keys, dtype=np.int64))

    def search(self, query: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, inner products) of up to `depth` nearest vectors, best first."""
        if not getattr(_searching, "one_thread", False):
            # One query gains nothing from OpenMP's team but its wake-ups, which cost
            # more than the search on a busy machine (measured: 2.3 -> 1.2 ms mean at
            # 5x10^5 vectors on 2 shared cores). The setting is the calling thread's.
            _faiss().omp_set_num_threads(1)
            _searching.one_thread = True
        scores, ids = self._index.search(
            np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), depth)
        found = ids[0] >= 0
        return ids[0][found], scores[0][found]
