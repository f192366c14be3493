"""The embed job: vectors for new events, facts and cards, and the backfill after a
model change.

`embed_pending` finds owners with no vector for the embedder's model, embeds them in
batches and stores the vectors through the writer. When a batch fails, its owners are
tried one by one, so one bad text cannot hold the others back; each owner that still
fails gets its error recorded (`embeddings.error`), and the job raises `EmbedFailed`
so the queue retries it with backoff (error rows count as pending).

`reembed` is the backfill behind `hilo memory reembed`: it embeds everything missing
for the configured model, in batches each committed on its own, so an interrupted
run resumes where it stopped; only once nothing is missing does it drop the vectors
of other models. Queries never mix models, so the index stays consistent throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.config import Config
from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.errors import Unavailable
from app.log import get_logger
from app.memory.embeddings import delete_other_models
from app.model.embedders import Embedder, make_embedder
from app.recall.vectors import (
    Owner,
    count_pending,
    pending_owners,
    store_error,
    store_vectors,
)
from app.writer import Writer

__all__ = ["log", "DEFAULT_LIMIT", "EmbedFailed", "ReembedCounts", "embed_pending",
           "ProgressCallback", "reembed"]

log = get_logger(__name__)

# Owners read per call of embed_pending when no limit is given.
DEFAULT_LIMIT = 512


class EmbedFailed(Unavailable):
    """Some owners could not be embedded; their errors are stored and a retry will redo them."""

    retryable = True  # the queue's backoff policy retries it like a model error


@dataclass
class ReembedCounts:
    model: str
    embedded: int = 0
    failed: int = 0
    remaining: int = 0
    removed: int = 0  # vectors of other models dropped after a complete backfill

    def to_dict(self) -> dict:
        return {"model": self.model, "embedded": self.embedded, "failed": self.failed,
                "remaining": self.remaining, "removed": self.removed}


def _read_pending(writer: Writer, model: str, user_id: str | None, limit: int) -> list[Owner]:
    con = connect_readonly(writer.path)
    try:
        return pending_owners(con, model, user_id=user_id, limit=limit)
    finally:
        con.close()


def _embed_batch(writer: Writer, embedder: Embedder, owners: list[Owner]) -> tuple[int, int]:
    """Embed and store a batch; returns (embedded, failed). Never raises for a model error."""
    try:
        vectors = embedder.embed([o.text for o in owners])
        writer.submit(lambda con: store_vectors(con, owners, embedder.model, vectors))
        return len(owners), 0
    except Exception as exc:  # noqa: BLE001 - a failed batch is retried owner by owner
        if len(owners) == 1:
            error = f"{type(exc).__name__}: {exc}"
            writer.submit(lambda con: store_error(con, owners[0], embedder.model, error))
            log.warning("embed_failed", kind=owners[0].kind, id=owners[0].id,
                        model=embedder.model, error=error)
            return 0, 1
    embedded = failed = 0
    for owner in owners:
        done, bad = _embed_batch(writer, embedder, [owner])
        embedded, failed = embedded + done, failed + bad
    return embedded, failed


def embed_pending(writer: Writer, embedder: Embedder, user_id: str | None = None,
                  limit: int = DEFAULT_LIMIT, batch_size: int | None = None) -> int:
    """Embed up to `limit` owners missing a vector for the embedder's model; returns how
    many were stored. Raises EmbedFailed (after storing the rest) if any owner failed."""
    owners = _read_pending(writer, embedder.model, user_id, limit)
    size = batch_size or getattr(embedder, "batch_size", 32)
    embedded = failed = 0
    for start in range(0, len(owners), size):
        done, bad = _embed_batch(writer, embedder, owners[start:start + size])
        embedded, failed = embedded + done, failed + bad
    if failed:
        raise EmbedFailed(f"{failed} of {len(owners)} items could not be embedded with "
                          f"{embedder.model!r}; their errors are in the embeddings table")
    return embedded


ProgressCallback = Callable[[int, int], None]  # (done so far, total to do)


def reembed(config: Config, progress_callback: ProgressCallback | None = None, *,
            embedder: Embedder | None = None, writer: Writer | None = None,
            batch_size: int | None = None) -> ReembedCounts:
    """Backfill vectors for the configured embedder's model; resumable, with progress.

    Returns counts; `remaining` > 0 means some owners failed (errors stored) and the
    old model's vectors were kept. `embedder` and `writer` default to the configured ones.
    """
    embedder = embedder or make_embedder(config)
    if embedder is None:
        raise ValueError('[embedder] kind is "none": there is nothing to re-embed; '
                         'set it to "ollama" or "local" first')
    own_writer = writer is None
    writer = writer or Writer(DataDir.of(config).memory_db, Durability.NORMAL)
    size = batch_size or config.embedder.batch_size
    try:
        con = connect_readonly(writer.path)
        try:
            total = count_pending(con, embedder.model)
        finally:
            con.close()
        counts = ReembedCounts(embedder.model)
        if progress_callback:
            progress_callback(0, total)
        attempted: set[tuple[str, int]] = set()
        while True:
            # Owners that failed in this run are pending still: skip them, do not loop.
            owners = [o for o in _read_pending(writer, embedder.model, None, size + len(attempted))
                      if (o.kind, o.id) not in attempted][:size]
            if not owners:
                break
            attempted.update((o.kind, o.id) for o in owners)
            done, bad = _embed_batch(writer, embedder, owners)
            counts.embedded += done
            counts.failed += bad
            if progress_callback:
                progress_callback(counts.embedded + counts.failed, total)
        con = connect_readonly(writer.path)
        try:
            counts.remaining = count_pending(con, embedder.model)
        finally:
            con.close()
        if counts.remaining == 0:
            counts.removed = writer.submit(lambda c: delete_other_models(c, embedder.model))
        log.info("reembed_done", **counts.to_dict())
        return counts
    finally:
        if own_writer:
            writer.close()
