"""The scheduler job (workers/scheduler.py): due tasks run as agent turns in their own
session, once per occurrence, on a clock the test controls.

Most tests stand a recording FakeChat in for ChatService; the end-to-end ones run real
turns against the fake Ollama server. The run through the real consumer process comes
with the queue wiring."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.events import session_events
from app.model.errors import ModelUnreachable
from app.tasks.config_tasks import sync_config_tasks
from app.tasks.runs import task_log
from app.tasks.store import add_task, get_task, list_tasks, pause_task
from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.writer import Writer
from tests.fake_ollama import Fault
from workers.scheduler import TICK_SECONDS, run_due_tasks, run_task_now, scheduler_tick

UTC = UTC
USER = "default"
# Monday 30 November 2026, 07:00 in Madrid.
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def as_task(service: ChatService) -> Agent:
    """The worker's runner of scheduled tasks over `service`."""
    return Agent(service, surface="task")


@dataclass(frozen=True)
class RecordedTurn:
    user_id: str
    session_id: str
    text: str
    client_system: str | None
    role: str = "user"
    origin: str = "typed"


class FakeChat:
    """Stands in for ChatService: records each turn and answers at once (or raises)."""

    def __init__(self, fail: dict[str, Exception] | None = None,
                 during_turn: Callable[[RecordedTurn], None] | None = None) -> None:
        self.turns: list[RecordedTurn] = []
        self.fail = fail or {}
        self.during_turn = during_turn
        self._lock = threading.Lock()

    def start_turn(self, user_id: str, session_id: str, text: str, *,
                   client_system: str | None = None, role: str = "user",
                   origin: str = "typed", from_outside: bool = False,
                   trusted: bool = False) -> SimpleNamespace:
        turn = RecordedTurn(user_id, session_id, text, client_system, role, origin)
        with self._lock:
            self.turns.append(turn)
        if self.during_turn is not None:
            self.during_turn(turn)
        if text in self.fail:
            raise self.fail[text]
        outcome = SimpleNamespace(reply_event=SimpleNamespace(id=None, content=f"done: {text}"))
        return SimpleNamespace(run=lambda: outcome)

    def sessions(self) -> list[str]:
        return [t.session_id for t in self.turns]


@pytest.fixture
def config(config):
    return config.replace(schedule={"timezone": "Europe/Madrid"})


@pytest.fixture
def fast_writer(data_dir) -> Iterator[Writer]:
    """The worker's kind of writer (synchronous=NORMAL): for tests that tick many times."""
    with Writer(DataDir(data_dir).memory_db, Durability.NORMAL) as w:
        yield w


def reader(config):
    return connect_readonly(DataDir.of(config).memory_db)


def tick_every_minute(config, writer, chat, start: datetime, end: datetime) -> list:
    results, moment = [], start
    while moment <= end:
        results += run_due_tasks(config, writer, chat, moment)
        moment += timedelta(minutes=1)
    return results


# -- the basics ------------------------------------------------------------------------------


def test_a_due_task_runs_in_its_own_session_and_moves_on(writer, config):
    task = add_task(writer, config, "every day at 9", "what is on today?", now=NOW, source="cli").task
    chat = FakeChat()
    at = NOW + timedelta(hours=2, seconds=5)
    [result] = run_due_tasks(config, writer, chat, at)
    assert (result.task_id, result.status, result.reply) == (task.id, "done", "done: what is on today?")
    assert chat.turns[0].session_id == f"task:{task.id}" and chat.turns[0].user_id == USER
    assert (chat.turns[0].role, chat.turns[0].origin) == ("system", "task")
    after = get_task(reader(config), USER, task.id)
    assert after.last_run_at == "2026-11-30T08:00:05.000000Z"
    assert after.next_run_at == "2026-12-01T08:00:00.000000Z"
    assert run_due_tasks(config, writer, chat, at) == []


def test_nothing_runs_before_its_time(writer, config):
    add_task(writer, config, "every day at 9", "x", now=NOW, source="cli")
    assert run_due_tasks(config, writer, FakeChat(), NOW + timedelta(hours=1, minutes=59)) == []


def test_paused_tasks_are_skipped(writer, config):
    paused = add_task(writer, config, "every 15 minutes", "paused one", now=NOW, source="cli").task
    add_task(writer, config, "every 15 minutes", "active one", now=NOW, source="cli")
    pause_task(writer, USER, paused.id, now=NOW)
    chat = FakeChat()
    run_due_tasks(config, writer, chat, NOW + timedelta(hours=1))
    assert [t.text for t in chat.turns] == ["active one"]


def test_a_oneshot_is_deleted_after_it_runs(writer, config):
    task = add_task(writer, config, "in 10 minutes", "stretch", now=NOW, source="cli").task
    [result] = run_due_tasks(config, writer, FakeChat(), NOW + timedelta(minutes=10))
    assert result.status == "done" and result.task_id == task.id
    assert list_tasks(reader(config), USER) == []


def test_downtime_runs_a_missed_task_once(fast_writer, config):
    add_task(fast_writer, config, "every 15 minutes", "ping", now=NOW, source="cli")
    chat = FakeChat()
    back_after_three_hours = NOW + timedelta(hours=3, minutes=2)
    assert len(run_due_tasks(config, fast_writer, chat, back_after_three_hours)) == 1
    # ...and then it keeps its schedule.
    results = tick_every_minute(config, fast_writer, chat, back_after_three_hours,
                                back_after_three_hours + timedelta(minutes=30))
    assert [r.scheduled_for for r in results] == ["2026-11-30T09:15:00.000000Z", "2026-11-30T09:30:00.000000Z"]


def test_the_trust_flag_reaches_the_run(writer, config):
    add_task(writer, config, "every day at 9", "trusted one", trusted=True, now=NOW, source="cli")
    add_task(writer, config, "every day at 9", "untrusted one", now=NOW, source="cli")
    chat = FakeChat()
    results = run_due_tasks(config, writer, chat, NOW + timedelta(hours=2))
    assert {r.name: r.trusted for r in results} == {"trusted one": True, "untrusted one": False}
    systems = {t.text: t.client_system for t in chat.turns}
    assert "marked this task as trusted" in systems["trusted one"]
    assert "not marked as trusted" in systems["untrusted one"]
    assert "scheduled task" in systems["trusted one"]


def test_a_failing_task_never_blocks_the_others(writer, config):
    add_task(writer, config, "every day at 9", "broken", now=NOW, source="cli")
    add_task(writer, config, "every day at 9", "fine", now=NOW, source="cli")
    add_task(writer, config, "every day at 9", "crashes", now=NOW, source="cli")
    chat = FakeChat(fail={"broken": ModelUnreachable("http://127.0.0.1:9", "ollama"),
                          "crashes": RuntimeError("a bug")})
    at = NOW + timedelta(hours=2)
    results = {r.name: r for r in run_due_tasks(config, writer, chat, at)}
    assert results["fine"].status == "done"
    assert results["broken"].status == "retrying" and "not reachable" in results["broken"].error
    assert results["crashes"].status == "failed" and "a bug" in results["crashes"].error
    listed = {t.name: t for t in list_tasks(reader(config), USER)}
    assert "not reachable" in listed["broken"].last_error

    # A minute later the retry runs, and succeeds once the model is back.
    chat.fail.clear()
    [retry] = run_due_tasks(config, writer, chat, at + timedelta(minutes=1))
    assert (retry.name, retry.status, retry.attempts) == ("broken", "done", 2)


def test_run_now_runs_a_paused_task_once_and_keeps_its_schedule(writer, config):
    task = add_task(writer, config, "every day at 9", "brief me", now=NOW, source="cli").task
    pause_task(writer, USER, task.id, now=NOW)
    chat = FakeChat()
    result = run_task_now(config, writer, chat, USER, task.id, now=NOW)
    assert (result.status, result.kind) == ("done", "manual")
    after = get_task(reader(config), USER, task.id)
    assert after.is_paused and after.next_run_at == task.next_run_at
    assert run_due_tasks(config, writer, chat, NOW + timedelta(hours=3)) == []


def test_config_tasks_synced_at_start_then_run(writer, config):
    entry = {"name": "morning", "schedule": "todos los días laborables a las 9", "prompt": "resumen"}
    sync_config_tasks(writer, config.replace(scheduled_tasks=(entry,)), now=NOW)
    [result] = run_due_tasks(config, writer, FakeChat(), NOW + timedelta(hours=2))
    assert (result.name, result.status) == ("morning", "done")


def test_a_tick_stamps_each_run_with_its_own_time_and_hands_over_when_slow(writer, config):
    for name in ("a", "b", "c"):
        add_task(writer, config, "every day at 9", name, now=NOW, source="cli")
    times = iter(NOW + timedelta(hours=2, seconds=s) for s in range(0, 10_000, 25))
    results = scheduler_tick(config, writer, chat_service=FakeChat(), clock=lambda: next(times))
    # Runs are claimed at +25 s and +50 s; at +75 s the tick's minute is over.
    assert TICK_SECONDS == 60
    assert [r.name for r in results] == ["a", "b"]
    last_runs = {t.name: t.last_run_at for t in list_tasks(reader(config), USER)}
    assert last_runs == {"a": "2026-11-30T08:00:25.000000Z", "b": "2026-11-30T08:00:50.000000Z",
                         "c": None}


# -- weekends and DST, ticking every minute -------------------------------------------------------


def test_weekday_tasks_do_not_run_on_the_weekend(fast_writer, config):
    friday = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    add_task(fast_writer, config, "every weekday at 9", "work", now=friday, source="cli")
    chat = FakeChat()
    results = []
    for day in range(4):  # Saturday to Tuesday, ticking around 09:00 Madrid
        morning = datetime(2026, 12, 5 + day, 7, 55, tzinfo=UTC)
        results += tick_every_minute(config, fast_writer, chat, morning, morning + timedelta(minutes=10))
    assert [r.scheduled_for[:10] for r in results] == ["2026-12-07", "2026-12-08"]


@pytest.mark.parametrize("zone, schedule, start, end, expected", [
    # Spring forward: 02:30 does not exist; it runs once, at 03:00 local.
    ("Europe/Madrid", "every day at 2:30", datetime(2026, 3, 28, 23, 0, tzinfo=UTC),
     datetime(2026, 3, 29, 4, 0, tzinfo=UTC), ["2026-03-29T01:00:00.000000Z"]),
    ("America/New_York", "every day at 2:30", datetime(2026, 3, 8, 4, 0, tzinfo=UTC),
     datetime(2026, 3, 8, 10, 0, tzinfo=UTC), ["2026-03-08T07:00:00.000000Z"]),
    # Fall back: 02:30 (Madrid) and 01:30 (New York) happen twice; each runs once, the first time.
    ("Europe/Madrid", "every day at 2:30", datetime(2026, 10, 24, 22, 0, tzinfo=UTC),
     datetime(2026, 10, 25, 4, 0, tzinfo=UTC), ["2026-10-25T00:30:00.000000Z"]),
    ("America/New_York", "every day at 1:30", datetime(2026, 11, 1, 3, 0, tzinfo=UTC),
     datetime(2026, 11, 1, 9, 0, tzinfo=UTC), ["2026-11-01T05:30:00.000000Z"]),
])
def test_dst_changes_run_a_daily_task_exactly_once(fast_writer, config, zone, schedule, start, end, expected):
    config = config.replace(schedule={"timezone": zone})
    add_task(fast_writer, config, schedule, "nightly", now=start, source="cli")
    results = tick_every_minute(config, fast_writer, FakeChat(), start, end)
    assert [r.scheduled_for for r in results] == expected


# -- two consumers ---------------------------------------------------------------------------


def test_two_consumers_racing_run_each_occurrence_once(writer, config, data_dir):
    for i in range(12):
        add_task(writer, config, "every 15 minutes", f"task {i}", now=NOW, source="cli")
    chat = FakeChat()
    at = NOW + timedelta(minutes=15)
    start = threading.Barrier(2)
    results: list[list] = [[], []]

    def consumer(slot: int, own_writer: Writer) -> None:
        start.wait()
        for _ in range(3):  # both tick three times on the same clock
            results[slot] += run_due_tasks(config, own_writer, chat, at)

    with Writer(DataDir(data_dir).memory_db, Durability.NORMAL) as second:
        threads = [threading.Thread(target=consumer, args=(0, writer)),
                   threading.Thread(target=consumer, args=(1, second))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ran = results[0] + results[1]
    assert sorted(r.task_id for r in ran) == sorted({r.task_id for r in ran}) and len(ran) == 12
    assert sorted(chat.sessions()) == sorted(f"task:{r.task_id}" for r in ran)
    rows = reader(config).execute("SELECT count(*), count(DISTINCT task_id) FROM task_runs").fetchone()
    assert rows == (12, 12)


def test_a_consumer_looking_while_another_runs_the_task_does_not_run_it_again(writer, config, data_dir):
    add_task(writer, config, "every 15 minutes", "slow one", now=NOW, source="cli")
    at = NOW + timedelta(minutes=15)
    with Writer(DataDir(data_dir).memory_db, Durability.NORMAL) as second:
        other = FakeChat()
        # While the first consumer is inside the turn, the second one ticks.
        first = FakeChat(during_turn=lambda turn: other.turns.extend(
            [] if not run_due_tasks(config, second, other, at) else ["ran twice"]))
        [result] = run_due_tasks(config, writer, first, at)
    assert result.status == "done"
    assert other.turns == []


# -- end to end against the fake model server -------------------------------------------------


@pytest.fixture
def live_config(config, fake_ollama):
    return config.replace(llm={"url": fake_ollama.url})


def test_a_run_leaves_the_reply_in_the_tasks_session(writer, live_config, fake_ollama):
    task = add_task(writer, live_config, "every weekday at 9", "What is on my calendar today?",
                    name="agenda", now=NOW, source="cli").task
    fake_ollama.script_chat("A dentist appointment at 11.")
    with ChatService(live_config) as service:
        [result] = run_due_tasks(live_config, writer, as_task(service), NOW + timedelta(hours=2))
    assert (result.status, result.reply) == ("done", "A dentist appointment at 11.")
    con = reader(live_config)
    stored = [(e.role, e.content) for e in session_events(con, USER, f"task:{task.id}")]
    # The prompt is the task's instructions, not the user speaking (issue 15): "system".
    assert stored == [("system", "What is on my calendar today?"), ("assistant", "A dentist appointment at 11.")]
    [request] = fake_ollama.bodies("/api/chat")
    assert request["messages"][-1]["content"] == "What is on my calendar today?"
    assert 'scheduled task "agenda"' in request["messages"][0]["content"]
    log = task_log(con, USER, task.id)
    assert [r.status for r in log.runs] == ["done"] and log.events[-1].content == result.reply


def test_a_model_error_is_retried_and_recorded_live(writer, live_config, fake_ollama):
    add_task(writer, live_config, "every day at 9", "first", now=NOW, source="cli")
    add_task(writer, live_config, "every day at 10", "second", now=NOW, source="cli")
    fake_ollama.script_chat(Fault.http_500("out of memory"), "second answer")
    at = NOW + timedelta(hours=3)
    with ChatService(live_config) as service:
        results = run_due_tasks(live_config, writer, as_task(service), at)
        assert [(r.name, r.status) for r in results] == [("first", "retrying"), ("second", "done")]
        assert "out of memory" in results[0].error
        [retry] = run_due_tasks(live_config, writer, as_task(service), at + timedelta(minutes=1))
    assert (retry.name, retry.status, retry.reply) == ("first", "done", "ok: first")


def test_a_oneshot_runs_live_and_its_log_outlives_it(writer, live_config, fake_ollama):
    task = add_task(writer, live_config, "mañana a las 9", "felicita a Ana", now=NOW, source="cli").task
    fake_ollama.script_chat("¡Felicidades, Ana!")
    with ChatService(live_config) as service:
        [result] = run_due_tasks(live_config, writer, as_task(service), datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    assert result.status == "done"
    con = reader(live_config)
    assert list_tasks(con, USER) == []
    assert task_log(con, USER, task.id).events[-1].content == "¡Felicidades, Ana!"
