"""The user first: the workers' model jobs keep out of a person's way, and learn a
conversation's turns together.

Jobs run in this process (bound_queue, drain); the chat goes through a real `hilo serve`
(HiloServer) or reports itself through ChatActivity, as the front-ends do.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC

import httpx
import pytest

from app.learn.session import learn_session
from app.model.client import ModelClient
from tests.api.support import HiloServer
from tests.fake_ollama import CpuSpeed, FakeOllama
from tests.workers.support import (
    add_turn,
    drain,
    handoff,
    query,
    scalar,
    scripted_model,
    scripted_queue,
    wait_until,
)
from tests.workers.test_queue_ops import as_json, hilo_queue
from workers.chat_activity import ChatActivity, chat_began_after, chat_deferral, read_activity
from workers.inspection import QueueView
from workers.queue import huey

IDLE = 0.3  # [queue] chat_idle_seconds in these tests


def learning_calls(fake: FakeOllama) -> int:
    """JSON questions the workers asked: alone, or after a chat they continue."""
    return len(fake.bodies("/api/generate")) + sum(
        1 for body in fake.bodies("/api/chat") if body.get("format"))


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    return scripted_queue(config.replace(queue={"chat_idle_seconds": IDLE}), fake_ollama,
                          bound_queue)


def test_a_model_job_never_starts_while_a_chat_request_is_in_flight(cfg, writer, fake_ollama):
    held = threading.Event()

    def model(body: dict):
        if not body.get("format"):
            held.wait(30)  # the model is still answering the person
        return scripted_model(body)

    fake_ollama.responder = model
    server = HiloServer(cfg, fake_ollama).start()
    try:
        handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha7"))
        chat = threading.Thread(target=httpx.post, args=(f"{server.url}/api/chat",), kwargs={
            "json": {"model": "gemma3:4b", "stream": False,
                     "messages": [{"role": "user", "content": "what next?"}]},
            "timeout": 30})
        chat.start()
        # The reply is being written (the query's embedding, before it, counts too).
        wait_until(lambda: fake_ollama.bodies("/api/chat"), 10, "the chat to reach the model")
        assert read_activity(huey, cfg.llm.url).in_flight == 1

        huey.execute(huey.dequeue())  # the turn's distill: it waits instead
        assert learning_calls(fake_ollama) == 0
        status = QueueView(cfg).status().chat_wait
        assert status.waiting and "in flight" in status.reason and status.waiting_jobs == 1

        held.set()
        chat.join()
        drain()  # once the server has been quiet for IDLE seconds, the turns are learned
    finally:
        held.set()
        server.stop()
    assert ("alpha7",) in query(cfg, "SELECT value FROM facts")
    assert read_activity(huey, cfg.llm.url).in_flight == 0
    assert learning_calls(fake_ollama) == 2  # each conversation, once the chat had ended


def test_a_model_job_waits_until_the_server_has_been_quiet(cfg, writer, fake_ollama):
    activity = ChatActivity(huey, cfg.llm.url)
    activity.begin()
    activity.end()  # a chat request just ended: the person is reading, then typing
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha8"))
    huey.execute(huey.dequeue())
    assert learning_calls(fake_ollama) == 0
    # With an eta (a worker holds it in the schedule until then); the turn's vectors go now.
    [waiting] = [job for job in huey.pending() if job.name.endswith("distill")]
    quiet_from = read_activity(huey, cfg.llm.url).last_at + IDLE
    # Huey's etas are naive UTC.
    assert waiting.eta.replace(tzinfo=UTC).timestamp() == pytest.approx(quiet_from, abs=0.1)
    assert waiting.kwargs == {"attempt": 1}  # waiting is not a failed attempt
    drain()
    assert learning_calls(fake_ollama) == 1
    assert ("alpha8",) in query(cfg, "SELECT value FROM facts")


def test_work_that_has_waited_long_enough_runs_between_two_chat_requests(cfg):
    activity = ChatActivity(huey, cfg.llm.url)
    activity.begin()
    now = time.time()
    waited = now - cfg.queue.max_defer_seconds
    assert chat_deferral(huey, cfg, cfg.llm.url, waited + 1, now) is not None
    assert chat_deferral(huey, cfg, cfg.llm.url, waited, now) is None
    activity.end()


def test_without_an_idle_gap_or_on_their_own_server_jobs_never_wait(cfg):
    activity = ChatActivity(huey, cfg.llm.url)
    activity.begin()
    assert chat_deferral(huey, cfg, cfg.llm.url, None) is not None
    assert chat_deferral(huey, cfg.replace(queue={"chat_idle_seconds": 0.0}), cfg.llm.url, None) is None
    assert chat_deferral(huey, cfg, None, None) is None  # the workers' own model server
    activity.end()


def test_with_their_own_model_server_the_workers_learn_during_a_chat(config, data_dir, writer,
                                                                      fake_ollama, bound_queue):
    with FakeOllama() as learner:
        learner.responder = scripted_model
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": 60.0},
                                            llm={"distill_url": learner.url}), fake_ollama,
                             bound_queue)
        ChatActivity(huey, cfg.llm.url).begin()  # the person's chat, on the chat's server
        handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha9"))
        drain()
        assert learning_calls(fake_ollama) == 0 and learning_calls(learner) == 1
        assert ("alpha9",) in query(cfg, "SELECT value FROM facts")
        assert QueueView(cfg).status().chat_wait.server is None


def test_only_requests_that_make_the_model_work_are_reported(cfg, fake_ollama):
    seen: list[str] = []

    class Recording:
        def begin(self) -> None:
            seen.append("begin")

        def end(self) -> None:
            seen.append("end")

    with ModelClient.from_config(cfg, activity=Recording()) as client:
        client.list_models()
        client.relay("GET", "/api/tags").close()
        assert seen == []
        client.chat([{"role": "user", "content": "hi"}])
        assert seen == ["begin", "end"]
        relayed = client.relay("POST", "/api/generate",
                               content=b'{"model": "gemma3:4b", "prompt": "hi"}')
        assert seen[-1] == "begin"  # until the answer is read
        b"".join(relayed)
        assert seen == ["begin", "end", "begin", "end"]


def test_queue_status_says_whether_model_jobs_wait(cfg):
    activity = ChatActivity(huey, cfg.llm.url)
    activity.begin()
    wait = QueueView(cfg).status().chat_wait
    assert wait.waiting and wait.in_flight == 1 and wait.server == cfg.llm.url
    _, out, _ = hilo_queue(cfg, "status")
    assert ("Model jobs: waiting for the chat — 1 chat request(s) in flight; they start when "
            f"{cfg.llm.url} has served no chat request for {IDLE:g} s") in " ".join(out.split())
    activity.end()
    assert "ended" in QueueView(cfg).status().chat_wait.reason
    _, doc = as_json(cfg, "status")
    assert doc["chat_wait"]["waiting"] and doc["chat_wait"]["in_flight"] == 0


# -- learning a conversation together -------------------------------------------------------------


def test_a_conversations_turns_are_learned_with_one_call_per_chunk(cfg, writer, fake_ollama):
    turns = 12  # 24 events: two chunks of eight are compacted, eight are left
    for n in range(turns):
        handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}"))
    drain()
    assert learning_calls(fake_ollama) == 3  # each chunk's facts and card at once, then the rest
    assert sorted(v for (v,) in query(cfg, "SELECT value FROM facts")) == sorted(
        f"alpha{n}" for n in range(turns))
    assert scalar(cfg, "SELECT count(*) FROM context_cards") == 2
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 0
    assert scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 0") == 8


def test_a_person_coming_back_stops_the_learning_before_the_next_call(cfg, writer, fake_ollama):
    for n in range(12):
        add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")
    # The person comes back once the first call's facts are in: asked before each call and
    # while a call runs (how often depends on the machine's speed), the answer follows
    # what happened, not how many times it was asked.
    def go_on() -> bool:
        return scalar(cfg, "SELECT count(*) FROM facts") == 0

    with ModelClient.from_config(cfg) as model:
        learned = learn_session(writer, model, cfg, "ana", "s1", go_on=go_on)
    assert learned.stopped and learned.calls == 1
    # The latest turns went first; the two chunks before them wait for the next run.
    assert [v for (v,) in query(cfg, "SELECT value FROM facts ORDER BY value")] == [
        f"alpha{n}" for n in (10, 11, 8, 9)]
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 16


# -- learning in the chat's own prompt cache ---------------------------------------------------


def test_learning_continues_the_chat_so_the_cache_stays_warm(config, data_dir, bound_queue):
    with FakeOllama(cpu=CpuSpeed(prompt_tokens_per_second=20_000,
                                 generate_tokens_per_second=20_000)) as fake:
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": IDLE}), fake, bound_queue)
        server = HiloServer(cfg, fake).start()
        history = [{"role": "system", "content": "You answer briefly. " * 30}]
        try:
            with httpx.Client(timeout=30) as client:
                for text in ("Remember code alpha1, please", "And code alpha2 as well"):
                    history.append({"role": "user", "content": text})
                    reply = client.post(f"{server.url}/api/chat", json={
                        "model": "gemma3:4b", "messages": history, "stream": False,
                        "options": {"num_ctx": 8192}}).json()["message"]
                    history.append({"role": "assistant", "content": reply["content"]})
                last_chat = fake.evaluations[-1]
                drain()  # the conversation is quiet: its turns are learned
                history.append({"role": "user", "content": "What was the first code?"})
                client.post(f"{server.url}/api/chat", json={
                    "model": "gemma3:4b", "messages": history, "stream": False,
                    "options": {"num_ctx": 8192}})
        finally:
            server.stop()
    [learning] = [e for e in fake.evaluations if e.wants_json]
    next_turn = fake.evaluations[-1]
    [asked] = [b for b in fake.bodies("/api/chat") if b.get("format")]
    chats = [b for b in fake.bodies("/api/chat") if not b.get("format")]
    # The question follows the last chat as the server saw it, with the chat's own
    # options (another num_ctx would reload the model), and its reply.
    assert asked["messages"][:-2] == chats[1]["messages"]  # the second turn's request
    assert asked["messages"][-2] == {"role": "assistant", "content": history[-2]["content"]}
    assert asked["options"]["num_ctx"] == 8192
    # So the model read only the question anew; and the person's next message found the
    # chat still in the cache: only that message (and what memory it brought) was new.
    assert learning.cached_chars >= last_chat.prompt_chars + last_chat.generated_chars
    assert next_turn.cached_chars >= last_chat.prompt_chars + last_chat.generated_chars
    assert next_turn.new_chars < 400
    assert sorted(v for (v,) in query(cfg, "SELECT value FROM facts")) == ["alpha1", "alpha2"]


def test_a_learning_call_in_progress_gives_way_to_a_chat(config, data_dir, writer, bound_queue):
    # A slow CPU: the learning call would take a minute to read its prompt.
    with FakeOllama(cpu=CpuSpeed(prompt_tokens_per_second=20,
                                 generate_tokens_per_second=20)) as fake:
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": 60.0}), fake, bound_queue)
        for n in range(3):
            add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n} " + "and more words " * 20)
        activity = ChatActivity(huey, cfg.llm.url)
        outcome: list = []
        with ModelClient.from_config(cfg) as model:
            learning = threading.Thread(target=lambda: outcome.append(learn_session(
                writer, model, cfg, "ana", "s1",
                go_on=lambda: chat_deferral(huey, cfg, cfg.llm.url, None) is None)))
            learning.start()
            wait_until(lambda: fake.evaluations, 10, "the learning call to reach the model")
            activity.begin()  # the person sends a message
            learning.join(10)
            activity.end()
        assert not learning.is_alive() and outcome[0].stopped and outcome[0].calls == 0
        [call] = fake.evaluations
        wait_until(lambda: call.ended is not None, 5, "the model to let go of the call")
        assert call.dropped and call.first_token is None  # it stopped reading the prompt
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 6


def test_a_learning_job_gives_way_the_moment_a_person_starts_a_chat(config, data_dir, writer,
                                                                     bound_queue):
    # The job as the worker runs it: its call is watched for a chat starting on the
    # model server (one key read many times a second), not only before each call.
    with FakeOllama(cpu=CpuSpeed(prompt_tokens_per_second=20,
                                 generate_tokens_per_second=20)) as fake:
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": 60.0}), fake, bound_queue)
        for n in range(3):
            add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n} " + "and more words " * 20)
        assert not chat_began_after(huey, cfg.llm.url, time.time() - 60)
        handoff.after_reply("ana", "s1", [])
        job = threading.Thread(target=lambda: huey.execute(huey.dequeue()))
        job.start()
        wait_until(lambda: fake.evaluations, 10, "the learning call to reach the model")
        activity = ChatActivity(huey, cfg.llm.url)
        activity.begin()  # the person sends a message
        assert chat_began_after(huey, cfg.llm.url, time.time() - 60)
        [call] = fake.evaluations
        wait_until(lambda: call.ended is not None, 5, "the model to let go of the call")
        job.join(10)
        activity.end()
        assert not job.is_alive()
        assert call.dropped and call.first_token is None  # it stopped reading the prompt
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 6
    # The job waits for the person to be done, as one that never started would.
    assert [job.name for job in huey.pending() if job.name.endswith("distill")]
