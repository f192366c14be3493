"""Recall: what the recall wing keeps from one question to the next, for one process.

It holds the vector index (app/recall/vectors.py, with its search and fold threads), the
full-text word counts (app/recall/bm25.py), the name the user calls the assistant
(app/recall/speakers.py) and the threads that embed questions ahead.
Who owns it: the ChatService (app/turn/chat.py) makes one and every search of its
process goes through it, so the front-ends, the agent's tools and the turns share it
(`service.recall`). A process with no service — `hilo memory search`, a test, a
benchmark — makes its own `Recall()`. A query carries its Recall to the streams
(app/recall/query.py: make_query).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.recall.bm25 import TermCounts
from app.recall.speakers import AddressBook

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from app.recall.vectors import VectorIndex

__all__ = ["MAX_STARTED_EMBEDDINGS", "StartedEmbeddings", "Recall"]


# Questions embedded ahead and not asked for yet (a request that failed before its turn):
# the oldest go first.
MAX_STARTED_EMBEDDINGS = 8


class StartedEmbeddings:
    """Questions whose embedding began before their turn read them (app/recall/query.py,
    embed_ahead): a front-end starts embedding a message as soon as its text is known,
    and the turn's query takes that vector instead of making it again. Keyed by the
    embedder's model and the exact text embedded, so a turn only ever takes the vector
    of the very words it searches for."""

    def __init__(self) -> None:
        self._started: OrderedDict[tuple[str, str], Future] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, key: tuple[str, str], submit: Callable[[], Future]) -> Future:
        """The embedding of `key` in progress: one already started, else `submit()`'s."""
        with self._lock:
            future = self._started.get(key)
            if future is None:
                future = self._started[key] = submit()
                while len(self._started) > MAX_STARTED_EMBEDDINGS:
                    self._started.popitem(last=False)
            return future

    def take(self, key: tuple[str, str]) -> Future | None:
        """The embedding started ahead for `key`, handed out once; None if there is none."""
        with self._lock:
            return self._started.pop(key, None)


class Recall:
    """The vector index, the word counts and the question-embedding threads of a process.

    The index and the threads are made when first used: a search by keywords alone
    never loads numpy."""

    def __init__(self, ann_threshold: int | None = None) -> None:
        """`ann_threshold`: the index's `[embedder] ann_threshold` (None: its default).
        A front-end makes the index as it starts, on its warm-up thread
        (ChatService.warm_vectors)."""
        self.term_counts = TermCounts()
        self.address_book = AddressBook()  # the name the user calls the assistant
        self._ann_threshold = ann_threshold
        self._vectors: VectorIndex | None = None
        self._embedding_threads: ThreadPoolExecutor | None = None
        self._making = threading.Lock()
        self.started = StartedEmbeddings()

    @property
    def vectors(self) -> VectorIndex:
        """The in-memory vector index, shared by every search through this Recall."""
        if self._vectors is None:
            with self._making:
                if self._vectors is None:
                    self._vectors = self._new_vector_index()
        return self._vectors

    def _new_vector_index(self) -> VectorIndex:
        # start-up: app.recall.vectors loads numpy, which a search without an embedder
        # (`hilo memory search` with `[embedder] kind = "none"`) never needs
        from app.recall.vectors import VectorIndex

        if self._ann_threshold is None:
            return VectorIndex()
        return VectorIndex(self._ann_threshold)

    @property
    def embedding_threads(self) -> ThreadPoolExecutor:
        """Where questions are embedded ahead: two threads, for two turns at once."""
        if self._embedding_threads is None:
            with self._making:
                if self._embedding_threads is None:
                    # start-up: only a turn embeds ahead
                    from concurrent.futures import ThreadPoolExecutor

                    self._embedding_threads = ThreadPoolExecutor(
                        max_workers=2, thread_name_prefix="hilo-query-embed")
        return self._embedding_threads
