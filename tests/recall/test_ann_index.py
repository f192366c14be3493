"""The vector index above `[embedder] ann_threshold`: approximate (HNSW), checked against
exact search, updated as vectors arrive, persisted beside the database, rebuilt by
`hilo rebuild`, and told of changes by a counter the triggers keep."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import apsw
import numpy as np
import pytest

import app.recall.ann
import app.recall.vectors
from app import db
from app.config import Config
from app.datadir import DataDir
from app.db import connect, migrate
from app.ops.backup import rebuild
from app.recall.vectors import Owner, VectorIndex, store_error, store_vectors
from tests.bench.vector_index import documentation_sentences
from tests.workers.support import wait_until

MODEL = "test-model"


def database(root: Path) -> apsw.Connection:
    root.mkdir(parents=True, exist_ok=True)
    con = connect(DataDir(root).memory_db)
    migrate(con)
    return con


def unit_vectors(count: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def store(con: apsw.Connection, first_id: int, vectors: np.ndarray, user: str = "u") -> None:
    owners = [Owner("fact", first_id + i, user, "") for i in range(len(vectors))]
    store_vectors(con, owners, MODEL, vectors)


def generation(con: apsw.Connection) -> tuple[int, int]:
    return con.execute("SELECT added, removed FROM embedding_generations WHERE user_id = 'u' "
                       "AND model = ? AND owner_kind = 'fact'", (MODEL,)).fetchone()


def built(index: VectorIndex, con: apsw.Connection) -> app.recall.vectors._Block:
    """The block brought up to date, once the background has built or extended its graph."""
    index.refresh(con, "u", MODEL, "fact")
    block = index._block(con, "u", MODEL, "fact")
    wait_until(lambda: not block.folding, 60, "the graph built")
    return block


def with_graph(root: Path) -> tuple[apsw.Connection, np.ndarray, VectorIndex]:
    """300 fact vectors (owners 1-300) and an index whose graph holds them all."""
    con = database(root)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    index = VectorIndex(ann_threshold=100)
    built(index, con)
    return con, vectors, index


def nearest_owners(index: VectorIndex, con: apsw.Connection, query: np.ndarray,
                   depth: int = 5) -> list[int]:
    """The owners the index finds nearest the query, best first."""
    return [owner for owner, _ in index.nearest(con, "u", MODEL, "fact", query, depth)]


def exact_top(vectors: np.ndarray, query: np.ndarray, depth: int, first_id: int = 1) -> list[int]:
    return [first_id + int(i) for i in np.argsort(-(vectors @ query))[:depth]]


def test_triggers_count_added_and_removed_vectors(tmp_path):
    con = database(tmp_path)
    store(con, 1, unit_vectors(3))
    assert generation(con) == (3, 0)
    store(con, 1, unit_vectors(1, seed=1))  # a replaced vector counts as removed
    store_error(con, Owner("fact", 9, "u", ""), MODEL, "model down")  # no vector: no change
    assert generation(con) == (4, 1)
    con.execute("DELETE FROM embeddings WHERE owner_id = 2")
    assert generation(con) == (4, 2)


def test_triggers_log_which_rows_went_numbered_as_they_are_counted(tmp_path):
    con = database(tmp_path)
    store(con, 1, unit_vectors(3))
    first, second = [row for (row,) in con.execute("SELECT id FROM embeddings ORDER BY id")][:2]
    store(con, 1, unit_vectors(1, seed=1))  # replaces the first row
    con.execute("DELETE FROM embeddings WHERE id = ?", (second,))
    assert con.execute("SELECT removed, row_id FROM embedding_removals WHERE user_id = 'u' "
                       "ORDER BY removed").fetchall() == [(1, first), (2, second)]


def test_a_removal_is_read_from_the_log_not_by_listing_the_block(tmp_path):
    con, vectors, index = with_graph(tmp_path)
    con.execute("DELETE FROM embeddings WHERE owner_id = 10")
    statements: list[str] = []
    con.exec_trace = lambda cursor, sql, bindings: statements.append(sql) or True
    found = nearest_owners(index, con, vectors[9])
    con.exec_trace = None
    assert 10 not in found and len(found) == 5
    assert any("embedding_removals" in sql for sql in statements)
    assert not any(sql.startswith("SELECT id FROM embeddings WHERE user_id") for sql in statements)


def test_below_the_threshold_a_replaced_vector_is_dropped_without_reading_the_block_again(
        tmp_path):
    con = database(tmp_path)
    vectors = unit_vectors(50)
    store(con, 1, vectors)
    index = VectorIndex(ann_threshold=10_000)
    assert index.nearest(con, "u", MODEL, "fact", vectors[9], 1)[0][0] == 10
    block = index._block(con, "u", MODEL, "fact")
    loads = block.loads
    store(con, 10, -vectors[9:10])  # re-embedded
    assert 10 not in nearest_owners(index, con, vectors[9])
    assert index.nearest(con, "u", MODEL, "fact", -vectors[9], 1)[0][0] == 10
    assert block.loads == loads
    con.execute("DELETE FROM embeddings WHERE owner_id = 11")
    con.execute("DELETE FROM embedding_removals")  # as after 10,000 newer removals
    assert 11 not in nearest_owners(index, con, vectors[10])
    assert block.loads == loads + 1  # read again instead


def test_an_index_further_behind_than_the_log_lists_its_block_instead(tmp_path):
    con, vectors, index = with_graph(tmp_path)
    con.execute("DELETE FROM embeddings WHERE owner_id IN (10, 11)")
    con.execute("DELETE FROM embedding_removals")  # as after 10,000 newer removals
    found = nearest_owners(index, con, vectors[9])
    assert not {10, 11} & set(found) and len(found) == 5


def test_a_block_listed_once_is_not_listed_again_at_the_next_start(tmp_path, monkeypatch):
    con, vectors, index = with_graph(tmp_path)
    con.execute("DELETE FROM embeddings WHERE owner_id IN (10, 300)")  # 300: the last row
    con.execute("DELETE FROM embedding_removals")  # as after 10,000 newer removals
    assert 10 not in nearest_owners(index, con, vectors[9])  # listed here, once
    monkeypatch.setattr(app.recall.ann.HnswIndex, "build", lambda *a, **k: pytest.fail("rebuilt"))
    statements: list[str] = []
    con.exec_trace = lambda cursor, sql, bindings: statements.append(sql) or True
    restarted = VectorIndex(ann_threshold=100)
    found = nearest_owners(restarted, con, vectors[9])
    con.exec_trace = None
    assert 10 not in found and len(found) == 5
    assert not any(sql.startswith("SELECT id FROM embeddings WHERE user_id") for sql in statements)


def test_a_database_of_the_previous_schema_upgrades_with_its_vectors_counted(tmp_path,
                                                                          monkeypatch):
    shipped = db.available_migrations()
    monkeypatch.setattr(db, "available_migrations",
                        lambda: [m for m in shipped if m.name < "0010"])
    con = database(tmp_path)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    store_error(con, Owner("fact", 999, "u", ""), MODEL, "model down")
    monkeypatch.undo()
    assert migrate(con)[0] == "0010_embedding_generations.sql"  # then any later one
    assert generation(con) == (300, 0)
    index = VectorIndex(ann_threshold=100)
    assert index.nearest(con, "u", MODEL, "fact", vectors[41], 1)[0][0] == 42
    store(con, 301, unit_vectors(1, seed=9))  # the triggers count from here on
    assert generation(con) == (301, 0)


def test_above_the_threshold_search_is_approximate_with_recall_of_exact_search(
        tmp_path, local_embedder):
    con = database(tmp_path)
    texts = documentation_sentences(320)
    vectors = local_embedder.embed(texts)
    queries, stored = vectors[:20], vectors[20:]
    store(con, 1, stored)
    index = VectorIndex(ann_threshold=100)
    built(index, con)
    assert index._block(con, "u", MODEL, "fact").ann is not None
    recall = np.mean([
        len({owner for owner, _ in index.nearest(con, "u", MODEL, "fact", q, 10)}
            & set(exact_top(stored, q, 10))) / 10
        for q in queries])
    print(f"recall@10 against exact search on {len(stored)} MiniLM vectors: {recall:.3f}")
    assert recall >= 0.95


def test_vectors_stored_after_the_build_are_found(tmp_path):
    con = database(tmp_path)
    store(con, 1, unit_vectors(300))
    index = VectorIndex(ann_threshold=100)
    built(index, con)
    late = unit_vectors(1, seed=5)
    store(con, 1000, late)
    assert index.nearest(con, "u", MODEL, "fact", late[0], 1)[0][0] == 1000


def test_a_restart_reads_the_persisted_index_instead_of_building_it(tmp_path, monkeypatch):
    con = database(tmp_path)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    built(VectorIndex(ann_threshold=100), con)
    assert list(DataDir(tmp_path).vector_indexes.glob("fact-*.faiss"))
    late = unit_vectors(1, seed=7)
    store(con, 1000, late)  # after the file was written: read from the table at start

    def no_build(*args, **kwargs):
        raise AssertionError("the index was rebuilt instead of read")

    monkeypatch.setattr(app.recall.ann.HnswIndex, "build", no_build)
    restarted = VectorIndex(ann_threshold=100)
    assert restarted.nearest(con, "u", MODEL, "fact", late[0], 1)[0][0] == 1000
    assert restarted.nearest(con, "u", MODEL, "fact", vectors[42], 1)[0][0] == 43
    assert restarted._block(con, "u", MODEL, "fact").size == 301


def test_a_replaced_vector_is_no_longer_found(tmp_path):
    con = database(tmp_path)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    index = VectorIndex(ann_threshold=100)
    assert index.nearest(con, "u", MODEL, "fact", vectors[9], 1)[0][0] == 10
    store(con, 10, -vectors[9:10])
    assert 10 not in nearest_owners(index, con, vectors[9])


def test_a_forgotten_vector_is_dropped_without_rebuilding_or_reloading(tmp_path, monkeypatch):
    con, vectors, index = with_graph(tmp_path)
    monkeypatch.setattr(app.recall.ann.HnswIndex, "build", lambda *a, **k: pytest.fail("rebuilt"))
    con.execute("DELETE FROM embeddings WHERE owner_id IN (10, 300)")  # 300: the last row
    for restarted in (index, VectorIndex(ann_threshold=100)):
        found = nearest_owners(restarted, con, vectors[9])
        assert 10 not in found and len(found) == 5
        assert restarted.nearest(con, "u", MODEL, "fact", vectors[8], 1)[0][0] == 9


def test_a_vector_forgotten_before_the_index_was_written_stays_forgotten_after_a_restart(
        tmp_path):
    con, vectors, index = with_graph(tmp_path)
    con.execute("DELETE FROM embeddings WHERE owner_id = 10")
    store(con, 1000, unit_vectors(40, seed=4))  # enough new vectors to write the index again
    built(index, con)
    restarted = VectorIndex(ann_threshold=100)
    found = nearest_owners(restarted, con, vectors[9])
    assert 10 not in found and len(found) == 5


def test_a_persisted_index_missing_a_file_is_built_again(tmp_path):
    con = database(tmp_path)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    built(VectorIndex(ann_threshold=100), con)
    for rows in DataDir(tmp_path).vector_indexes.glob("*.rows.npz"):
        rows.unlink()
    restarted = VectorIndex(ann_threshold=100)
    assert restarted.nearest(con, "u", MODEL, "fact", vectors[42], 1)[0][0] == 43


def test_an_index_file_of_another_database_is_not_used(tmp_path):
    con = database(tmp_path / "a")
    store(con, 1, unit_vectors(300))
    built(VectorIndex(ann_threshold=100), con)
    other = database(tmp_path / "b")
    store(other, 1, unit_vectors(300, seed=3))
    index_dir = DataDir(tmp_path / "a").vector_indexes
    index_dir.rename(DataDir(tmp_path / "b").vector_indexes)  # as after a restore
    fresh = unit_vectors(300, seed=3)
    found = VectorIndex(ann_threshold=100).nearest(other, "u", MODEL, "fact", fresh[7], 1)
    assert found[0][0] == 8


def test_rebuild_writes_the_approximate_indexes(tmp_path):
    config = Config().replace(data={"dir": str(tmp_path)}, embedder={"ann_threshold": 100})
    DataDir.of(config).init()
    con = database(tmp_path)
    store(con, 1, unit_vectors(300))
    store(con, 1, unit_vectors(50, seed=2), user="small")  # below the threshold: exact
    con.close()
    report = rebuild(config)
    assert report.vector_indexes == 1
    assert len(list(DataDir(tmp_path).vector_indexes.glob("*.faiss"))) == 1


def persisted_block(tmp_path) -> np.ndarray:
    """300 fact vectors whose approximate index is on disk, as a stopped process left it."""
    con = database(tmp_path)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    built(VectorIndex(ann_threshold=100), con)
    con.close()
    return vectors


def test_warm_loads_blocks_in_the_background(tmp_path, monkeypatch):
    vectors = persisted_block(tmp_path)
    index = VectorIndex(ann_threshold=100)
    index.warm(DataDir(tmp_path).memory_db, MODEL).join(timeout=60)
    reader = database(tmp_path)
    monkeypatch.setattr(app.recall.vectors._Block, "read_new_rows",
                        lambda *args: pytest.fail("warm left rows to read"))
    assert index.nearest(reader, "u", MODEL, "fact", vectors[3], 1)[0][0] == 4


def test_a_turn_right_after_warm_starts_skips_the_block_still_loading(tmp_path, monkeypatch):
    # The first turn after a start comes at once: it answers without the block (the
    # keyword streams do) instead of loading it a second time itself.
    vectors = persisted_block(tmp_path)
    loading = threading.Event()  # the warm-up's thread waits for it at every step

    def in_the_warm_thread_later(step):
        def slow(*args):
            if threading.current_thread().name == "vector-index-warm":
                loading.wait(10)
            return step(*args)
        return slow

    monkeypatch.setattr(VectorIndex, "refresh", in_the_warm_thread_later(VectorIndex.refresh))
    monkeypatch.setattr(app.recall.vectors, "connect_readonly",
                        in_the_warm_thread_later(app.recall.vectors.connect_readonly))
    index = VectorIndex(ann_threshold=100)
    warming = index.warm(DataDir(tmp_path).memory_db, MODEL)
    reader = database(tmp_path)
    assert index.nearest(reader, "u", MODEL, "fact", vectors[3], 1) == []
    loading.set()
    warming.join(timeout=60)
    assert index.nearest(reader, "u", MODEL, "fact", vectors[3], 1)[0][0] == 4


def described_size(root: Path) -> int:
    """How many vectors the persisted graph covers, as its description says."""
    descriptions = list(DataDir(root).vector_indexes.glob("fact-*.json"))
    return json.loads(descriptions[0].read_text())["size"] if descriptions else 0


def in_the_fold_thread_later(monkeypatch, name: str) -> threading.Event:
    """HnswIndex.<name>, on the fold thread, waits for the returned event."""
    release = threading.Event()
    step = getattr(app.recall.ann.HnswIndex, name)

    def later(*args):
        if threading.current_thread().name.startswith("hilo-vector-fold"):
            release.wait(10)
        return step(*args)

    monkeypatch.setattr(app.recall.ann.HnswIndex, name, later if name != "build" else classmethod(
        lambda cls, *args: later(*args)))
    return release


def test_a_block_passing_the_threshold_answers_exactly_while_its_graph_is_built_behind(
        tmp_path, monkeypatch):
    con = database(tmp_path)
    vectors = unit_vectors(300)
    store(con, 1, vectors)
    building = in_the_fold_thread_later(monkeypatch, "build")
    index = VectorIndex(ann_threshold=100)
    assert nearest_owners(index, con, vectors[5], 3) == exact_top(vectors, vectors[5], 3)
    assert not list(DataDir(tmp_path).vector_indexes.glob("*.faiss"))
    building.set()
    wait_until(lambda: described_size(tmp_path) == 300, 30, "the graph built and written")


def test_vectors_stored_after_a_restart_are_found_at_once_and_added_to_the_graph_behind(
        tmp_path, monkeypatch):
    persisted_block(tmp_path)
    restarted = VectorIndex(ann_threshold=100)
    con = database(tmp_path)
    restarted.refresh(con, "u", MODEL, "fact")
    assert restarted._block(con, "u", MODEL, "fact").ann.mapped  # read in place, not copied
    adding = in_the_fold_thread_later(monkeypatch, "add")
    late = unit_vectors(30, seed=8)  # more than a tenth of the threshold: folded behind
    store(con, 1000, late)
    # Found while the fold waits: a turn never waits for vectors to enter the graph.
    assert restarted.nearest(con, "u", MODEL, "fact", late[4], 1)[0][0] == 1004
    assert described_size(tmp_path) == 300
    adding.set()
    wait_until(lambda: described_size(tmp_path) == 330, 30, "the graph written with them")
    wait_until(lambda: not restarted._block(con, "u", MODEL, "fact").folding, 30, "the fold")
    assert restarted.nearest(con, "u", MODEL, "fact", late[4], 1)[0][0] == 1004
    again = VectorIndex(ann_threshold=100)
    assert again.nearest(con, "u", MODEL, "fact", late[7], 1)[0][0] == 1007
    block = again._block(con, "u", MODEL, "fact")
    assert (block.graph_size, block.exact_size) == (330, 0)
