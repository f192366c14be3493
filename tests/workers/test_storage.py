"""The queue's storage: Huey's own storage tests on the APSW backend, and per-data-dir binding."""

from __future__ import annotations

import os
import tempfile
from unittest import mock

import pytest
from huey import Huey

# Huey's test package probes for a local Redis when imported, and the client's connection
# retries take seconds when none runs; its Redis tests are not ours to run anyway.
with mock.patch("redis.Redis.info", side_effect=ConnectionError("not probed")):
    from huey.tests.base import BaseTestCase
    from huey.tests.test_storage import StorageTests

from app.datadir import DataDir
from tests.workers.support import (
    add_turn,
    drain,
    handoff,
    query,
    scripted_model,
    scripted_queue,
    wait_until,
    worker_config,
)
from workers.queue import configure, huey
from workers.storage import ApswSqliteStorage


class TestApswStorageAgainstHueysSuite(StorageTests, BaseTestCase):
    """Huey's generic storage tests (queue, schedule, results, locks, priorities)."""

    supports_ttl = False

    def setUp(self):
        self._dir = tempfile.TemporaryDirectory()
        super().setUp()

    def tearDown(self):
        super().tearDown()
        self.huey.storage.close()
        self._dir.cleanup()

    def get_huey(self):
        path = os.path.join(self._dir.name, "queue.sqlite3")
        return Huey("test", storage_class=ApswSqliteStorage, filename=path, timeout=3)


def test_queue_file_is_wal_with_synchronous_normal(config, data_dir):
    configure(config)
    huey.pending_count()  # first use opens the file
    con = huey.storage.conn
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert con.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    assert DataDir.of(config).queue_db.exists()


def test_each_data_dir_gets_its_own_queue(config, data_dir, tmp_path):
    from workers import jobs

    other = config.replace(data={"dir": str(tmp_path / "other")})
    DataDir.of(other).init()
    configure(config)
    jobs.diary("u", "s1")
    configure(other)
    assert huey.pending_count() == 0
    jobs.diary("u", "s2")
    jobs.diary("u", "s3")
    assert huey.pending_count() == 2
    configure(config)
    assert huey.pending_count() == 1


def test_configuring_touches_no_disk_until_first_use(config, tmp_path):
    configure(config.replace(data={"dir": str(tmp_path / "not-yet")}))
    assert not (tmp_path / "not-yet").exists()


def test_the_redis_backend_runs_the_same_jobs(config, data_dir, writer, fake_ollama, bound_queue,
                                              redis_url):
    from workers.queue import failed_jobs

    cfg = scripted_queue(config, fake_ollama, bound_queue, backend="redis", redis_url=redis_url)
    assert type(huey.storage).__name__ == "PriorityRedisStorage"
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha9"))
    assert handoff.session_ended("ana", "s1")
    drain()
    assert query(cfg, "SELECT value FROM facts") == [("alpha9",)]
    assert query(cfg, "SELECT count(*) FROM diary") == [(1,)]
    assert failed_jobs() == []
    assert not DataDir.of(config).queue_db.exists()


@pytest.mark.slow
def test_a_real_consumer_on_redis_starts_and_learns_from_a_turn(config, data_dir, writer,
                                                               fake_ollama, redis_url,
                                                               consumers, tmp_path):
    from workers.queue import configure as bind

    cfg = worker_config(config, fake_ollama, backend="redis", redis_url=redis_url)
    bind(cfg)
    fake_ollama.responder = scripted_model
    consumer = consumers(cfg, tmp_path / "worker.log")
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha3"))
    try:
        wait_until(lambda: query(cfg, "SELECT value FROM facts") == [("alpha3",)], 30,
                   "the fact learnt by the Redis-backed worker")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; worker log:\n{consumer.log()[-3000:]}") from None
    assert "Traceback" not in consumer.log()
    assert consumer.terminate() == 0
