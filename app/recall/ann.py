"""The approximate nearest-neighbour index for a large block of vectors (faiss HNSW).

Chosen by measurement on real all-MiniLM-L6-v2 vectors (BENCHMARKS.md, "Vector
index"): faiss HNSW answers top-10 in well under a millisecond at recall@10 above
0.95 against exact search, where usearch's int8 index missed the recall target. The
vectors are stored as 8-bit scalars (a quarter of float32: 10^6 vectors of 384
dimensions take ~0.4 GB, with the graph ~0.65 GB) and compared by inner product; the
callers L2-normalise, so that is cosine.

A persisted index is read as a view of its file (faiss maps it instead of copying it:
~40 ms instead of ~0.3 s for the 330 MB of 5x10^5 vectors), after one sequential read
that brings the file into the page cache: a view of a cold file faulting in page by page
took seconds. faiss cannot add to a view; `copy()` makes an index in memory that it can.

faiss is imported when the first index is built or read, never at start-up: a store
below `[embedder] ann_threshold` vectors never loads it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import BinaryIO

import numpy as np

__all__ = ["HNSW_M", "EF_CONSTRUCTION", "EF_SEARCH", "HnswIndex", "use_one_thread"]

# Graph degree, and candidates kept while building and while searching. M=32 with
# efSearch=128 is the measured point with recall@10 >= 0.95 at ~1 ms per query.
HNSW_M = 32
EF_CONSTRUCTION = 64
EF_SEARCH = 128


_one_thread = threading.local()
_READ_BLOCK = 1 << 22  # bytes per read while bringing a file into the page cache


def _faiss():
    # faiss's loader logs which CPU build it picked, at info, on every import.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss  # lazily: ~0.4 s of import, only for blocks above the threshold

    return faiss


class HnswIndex:
    """Vectors under integer keys (app/recall/vectors.py: embeddings row ids) in a faiss HNSW
    graph; add and search, never remove. Read from a file it is a view of that file,
    searched but not added to."""

    def __init__(self, index, source: BinaryIO | None = None) -> None:
        self._index = index
        self._source = source  # the open file a view maps (kept: it may be replaced on disk)

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
        """A view of the index written at `path`."""
        faiss = _faiss()
        source = open(path, "rb", buffering=0)
        try:
            buffer = memoryview(bytearray(_READ_BLOCK))
            while source.readinto(buffer):
                pass
            index = faiss.read_index(_name_of(source, path), faiss.IO_FLAG_MMAP_IFC)
        except BaseException:
            source.close()
            raise
        return cls(_searchable(index), source)

    def copy(self) -> HnswIndex:
        """An index of the same vectors in memory, which vectors can be added to."""
        faiss = _faiss()
        if self._source is None:
            return HnswIndex(_searchable(faiss.clone_index(self._index)))
        self._source.seek(0)
        return HnswIndex(_searchable(faiss.read_index(
            faiss.PyCallbackIOReader(self._source.read, _READ_BLOCK))))

    def write(self, path: Path) -> None:
        """Write atomically: a reader never sees half a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        _faiss().write_index(self._index, str(partial))
        os.replace(partial, path)

    @property
    def mapped(self) -> bool:
        return self._source is not None

    @property
    def size(self) -> int:
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    def add(self, vectors: np.ndarray, keys: np.ndarray) -> None:
        if self.mapped:  # faiss would abort the process, not raise
            raise ValueError("an index read from a file is a view: add to its copy()")
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                                 np.ascontiguousarray(keys, dtype=np.int64))

    def search(self, query: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, inner products) of up to `depth` nearest vectors, best first."""
        use_one_thread()
        scores, ids = self._index.search(
            np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), depth)
        found = ids[0] >= 0
        return ids[0][found], scores[0][found]


def use_one_thread() -> None:
    """OpenMP's team for faiss calls on this thread: one. One query gains nothing from the
    team but its wake-ups, which cost more than the search on a busy machine (measured:
    2.3 -> 1.2 ms mean at 5x10^5 vectors on 2 shared cores); vectors added in the
    background leave the other core to the chat. The setting is the calling thread's."""
    if not getattr(_one_thread, "set", False):
        _faiss().omp_set_num_threads(1)
        _one_thread.set = True


def _searchable(index):
    downcast = _faiss().downcast_index(index.index)
    downcast.hnsw.efSearch = EF_SEARCH  # not kept in the file
    return index


def _name_of(source: BinaryIO, path: Path) -> str:
    """A name that maps the very file opened, even if `path` is replaced meanwhile."""
    by_descriptor = f"/proc/self/fd/{source.fileno()}"
    return by_descriptor if os.path.exists(by_descriptor) else str(path)
