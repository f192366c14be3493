"""The single writer: group commit, isolation of a failing write, back-pressure, drain."""

from __future__ import annotations

import threading

import apsw
import pytest

from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.writer import DiskFull, Writer, WriterClosed

INSERT = "INSERT INTO writes (producer, seq) VALUES (?, ?)"


def make_row(user: str, seq: int):
    def write(con: apsw.Connection) -> int:
        con.execute(INSERT, (user, f"{seq:06d}"))
        return con.last_insert_rowid()

    return write


def rows(path) -> list[tuple[str, str]]:
    con = connect_readonly(path)
    return list(con.execute("SELECT producer, seq FROM writes ORDER BY id"))


@pytest.fixture
def path(data_dir):
    path = DataDir(data_dir).memory_db
    with Writer(path) as writer:
        writer.submit(lambda con: con.execute(
            "CREATE TABLE writes (id INTEGER PRIMARY KEY, producer TEXT, seq TEXT)"))
    return path


@pytest.mark.slow
def test_eight_producers_all_writes_present_in_order(path):
    producers, per_producer = 8, 2000
    with Writer(path, Durability.FULL, queue_size=64) as writer:
        def produce(n: int) -> None:
            for seq in range(per_producer):
                writer.submit(make_row(f"p{n}", seq))

        threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batches = writer.stats.commits
    stored = rows(path)
    assert len(stored) == producers * per_producer
    for n in range(producers):
        mine = [seq for user, seq in stored if user == f"p{n}"]
        assert mine == [f"{s:06d}" for s in range(per_producer)]
    assert batches < producers * per_producer  # writes really were grouped


def test_a_raising_write_is_rolled_back_alone(path):
    gate = threading.Event()
    with Writer(path) as writer:
        # Hold the writer thread so the next three writes land in one batch.
        blocker = writer.submit_nowait(lambda con: gate.wait(10))
        before = writer.submit_nowait(make_row("a", 1))

        def half_then_fail(con: apsw.Connection):
            con.execute(INSERT, ("bad", "1"))
            raise ValueError("this write is wrong")

        bad = writer.submit_nowait(half_then_fail)
        after = writer.submit_nowait(make_row("a", 2))
        gate.set()
        blocker.result(10)
        assert before.result(10) and after.result(10)
        with pytest.raises(ValueError, match="this write is wrong"):
            bad.result(10)
        assert writer.stats.largest_batch_size >= 3
    assert rows(path) == [("a", "000001"), ("a", "000002")]


def test_full_queue_blocks_producers_instead_of_dropping(path):
    gate = threading.Event()
    with Writer(path, queue_size=2) as writer:
        held = writer.submit_nowait(lambda con: gate.wait(10))
        # Wait until the writer thread has taken the blocking write off the queue.
        for _ in range(1000):
            if writer.depth == 0:
                break
            threading.Event().wait(0.01)
        writer.submit_nowait(make_row("q", 1))
        writer.submit_nowait(make_row("q", 2))
        third_queued = threading.Event()

        def third() -> None:
            writer.submit_nowait(make_row("q", 3))
            third_queued.set()

        producer = threading.Thread(target=third)
        producer.start()
        # The queue is full: the third producer must still be waiting, not dropped.
        assert not third_queued.wait(0.3)
        gate.set()
        assert third_queued.wait(10)
        producer.join()
        held.result(10)
    assert rows(path) == [("q", "000001"), ("q", "000002"), ("q", "000003")]


def test_close_drains_everything_queued(path):
    writer = Writer(path, queue_size=5000)
    futures = [writer.submit_nowait(make_row("d", i)) for i in range(3000)]
    writer.close()
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures] == list(range(1, 3001))
    assert len(rows(path)) == 3000


def test_closed_writer_refuses_new_writes(path):
    writer = Writer(path)
    writer.close()
    with pytest.raises(WriterClosed):
        writer.submit(make_row("late", 1))


def test_result_is_returned_only_after_commit(path):
    with Writer(path) as writer:
        writer.submit(make_row("c", 1))
        # Another connection sees it as soon as submit returns.
        assert rows(path) == [("c", "000001")]


def test_a_producer_waiting_for_room_is_told_when_the_writer_closes(path):
    gate = threading.Event()
    writer = Writer(path, queue_size=1)
    held = writer.submit_nowait(lambda con: gate.wait(10))
    for _ in range(1000):  # until the writer thread holds the blocking write
        if writer.depth == 0:
            break
        threading.Event().wait(0.01)
    queued = writer.submit_nowait(make_row("w", 1))  # fills the queue
    outcome: list = []

    def blocked_producer() -> None:
        try:
            outcome.append(writer.submit(make_row("w", 2)))
        except WriterClosed as exc:
            outcome.append(exc)

    producer = threading.Thread(target=blocked_producer)
    producer.start()
    closer = threading.Thread(target=writer.close)
    closer.start()
    gate.set()
    producer.join(10)
    closer.join(10)
    assert not producer.is_alive() and not closer.is_alive()
    held.result(10)
    assert queued.result(10)
    # Either it got in before the close or it was told: never lost, never stuck.
    assert len(outcome) == 1
    stored = [seq for _, seq in rows(path)]
    assert isinstance(outcome[0], WriterClosed) or "000002" in stored


def test_a_write_that_fills_the_disk_fails_alone_and_its_batch_is_stored(path):
    gate = threading.Event()
    with Writer(path) as writer:
        # The database may not grow: as a full disk, which makes SQLite roll back the
        # whole transaction, not only the statement.
        writer.submit(lambda con: con.execute(
            f"PRAGMA max_page_count = {con.execute('PRAGMA page_count').fetchone()[0] + 1}"))
        blocker = writer.submit_nowait(lambda con: gate.wait(10))
        before = writer.submit_nowait(make_row("a", 1))
        too_big = writer.submit_nowait(lambda con: con.execute(INSERT, ("big", "x" * 200_000)))
        after = writer.submit_nowait(make_row("a", 2))
        gate.set()
        blocker.result(10)
        assert before.result(10) and after.result(10)
        with pytest.raises(DiskFull, match="the disk is full"):
            too_big.result(10)
    assert rows(path) == [("a", "000001"), ("a", "000002")]
