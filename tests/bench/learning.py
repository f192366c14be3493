"""What Hilo learns from a conversation, judged against what was said.

Six scripted conversations (tests/bench/learning_script.py: 51 facts, eight of them
changed later in the conversation, several said in passing), each a Hilo user of its
own, sent turn by turn through a real `hilo serve` (/v1/chat/completions, the client
resending its history, X-Hilo-User and X-Hilo-Session naming who and which chat), with
a real `hilo worker` learning beside it, both separate processes on the product's
defaults (the worker learns once the chat has been idle `[queue] chat_idle_seconds`).
Then every session is ended (POST /memory/sessions/{id}/end: its diary entry) and the
memory is read back and judged:

- per fact: **learned** (an active fact or profile entry about it holds its current
  value and none holds a value taken back), **wrong** (one about it holds a value the
  person took back, or only that) or **missed**;
- per stored item: **true** (holds a listed fact's current value), **wrong** (holds a
  taken-back value), **said** (about nothing listed, its value's words said by the
  person: a true detail the list does not hold) or **junk** (nothing said supports it);
- precision = true / (true + wrong + junk); recall = learned / facts.

Lanes:
- `fake`: tests/fake_ollama.py answering each learning call with what a capable model
  extracts from the USER lines shown (the script's `extract`), scripted chat replies;
- `rules`: the same fake answering every learning call with unusable JSON: after two
  unusable answers the session is learned by rule (app/learn/session.py
  learn_by_rules: explicit statements, cards that quote their chunk; extractive diary).
  The baseline a model has to beat;
- `real`: SmolLM2-135M-Instruct (tests/bench/packaged_model.py) on the llama-server
  tests/bench/engine.py builds, `[llm] provider = "openai"`, the local embedder; the
  chat's replies are the model's own (the client caps them at 48 tokens, as chat
  front-ends do); every engine request passes the counting proxy, which gives each
  learning call's engine seconds (`timings`) against the chat's.

    python -m tests.bench.learning [--quick] [--json] [--no-write] [--lanes fake,rules,real]
        [--keep-logs] [--set HILO_KEY=value ...]

--quick: the fake lane alone, under a minute; BENCHMARKS.md is not touched. What it
leaves out: a person's pauses (turns follow each other at once, then one idle gap), and
the session idle timeout (sessions are ended by the API instead).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import connect_readonly
from tests.bench import soak
from tests.bench.learning_script import CONVERSATIONS, Conversation, Fact, model_reply
from tests.bench.localmodel import GARBAGE, learned
from tests.bench.localmodel_script import _schema_properties
from tests.bench.report import REPO_ROOT, emit, parser
from tests.bench.soak import Process, free_port
from tests.fake_ollama import FakeOllama

LANES = ("fake", "rules", "real")
TARGETS = {"real_precision": 0.9, "fake_recall": 0.9}
# The real lane's client caps each reply, as chat front-ends do; learning calls never
# carry it (tests/bench/engine.py counts those that do).
REAL_REPLY_TOKENS = 48
# Learning keeps to its share of the engine ([learn] engine_share, the product's 0.5):
# what the share does not buy waits, and is learned by rule once it has waited
# [learn] share_wait_minutes. The bench's conversations follow one another with no pause
# of a person's, so it shortens that wait from 30 minutes to this, and reads what
# learning settles on; the share itself is the product's.
SHARE_WAIT_MINUTES = 2
QUIET_S = {"fake": 2.0, "rules": 2.0, "real": 15.0}
LEARNED_CAP_S = {"fake": 120.0, "rules": 120.0, "real": 1800.0}
DIARY_CAP_S = {"fake": 60.0, "rules": 60.0, "real": 600.0}
_WORD = re.compile(r"[a-z0-9][a-z0-9:'.,-]*[a-z0-9]|[a-z0-9]")
NOT_CONTENT = frozenset(
    "the and for with that this was were are has have had her his she him they them their "
    "you your not but from about what when where who how its it's also user user's is a an "
    "to of in on at by as be or my i me".split())


def log(message: str) -> None:
    print(f"[learning] {message}", flush=True, file=sys.stderr)


# -- judging ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One active memory item: a fact, or a profile entry (kind "profile")."""

    kind: str
    key: str
    value: str

    @property
    def text(self) -> str:
        return f"{self.key}: {self.value}".casefold()


def mentions(text: str, word: str) -> bool:
    """`word` (a|b: either) at a word's start in `text` (case-folded)."""
    return any(re.search(r"(?<![a-z0-9])" + re.escape(w.casefold()), text)
               for w in word.split("|"))


def is_about(item: Stored, fact: Fact) -> bool:
    return any(mentions(item.text, word) for word in fact.about)


def holds_value(item: Stored, fact: Fact) -> bool:
    return is_about(item, fact) and all(mentions(item.text, word) for word in fact.value)


def holds_stale(item: Stored, fact: Fact) -> bool:
    """About the fact, with a value the person took back, and not the current one."""
    return (is_about(item, fact) and any(mentions(item.text, w) for w in fact.stale)
            and not holds_value(item, fact))


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.casefold()) if len(w) >= 3 and w not in NOT_CONTENT]


def said_by_person(value: str, said: str, share: float = 0.6) -> bool:
    """Whether the person's own words support `value`: most of its content words (by
    their first five letters) are theirs; a value of no such words, if said as is."""
    words = content_words(value)
    if not words:
        return value.casefold().strip() in said.casefold()
    theirs = {w[:5] for w in content_words(said)}
    return sum(w[:5] in theirs for w in words) / len(words) >= share


@dataclass
class Judgement:
    facts: dict[str, str] = field(default_factory=dict)  # "user/fact" → learned|wrong|missed
    items: dict[str, int] = field(default_factory=lambda: {"true": 0, "wrong": 0, "said": 0,
                                                            "junk": 0})
    junk: list[str] = field(default_factory=list)  # "user: key: value", for the report
    wrong: list[str] = field(default_factory=list)

    @property
    def learned(self) -> int:
        return sum(1 for o in self.facts.values() if o == "learned")

    @property
    def recall(self) -> float:
        return self.learned / max(1, len(self.facts))

    @property
    def precision(self) -> float | None:
        judged = self.items["true"] + self.items["wrong"] + self.items["junk"]
        return self.items["true"] / judged if judged else None

    @property
    def stored(self) -> int:
        return sum(self.items.values())


def judge_user(conversation: Conversation, stored: list[Stored], into: Judgement) -> None:
    """Each of the conversation's facts and each item stored for its user."""
    said = " ".join(turn.user for turn in conversation.turns)
    for fact in conversation.facts:
        on = [item for item in stored if is_about(item, fact)]
        outcome = ("wrong" if any(holds_stale(i, fact) for i in on)
                   else "learned" if any(holds_value(i, fact) for i in on) else "missed")
        into.facts[f"{conversation.user}/{fact.name}"] = outcome
    for item in stored:
        shown = f"{conversation.user}: {item.key}: {item.value}"
        if any(holds_stale(item, fact) for fact in conversation.facts):
            into.items["wrong"] += 1
            into.wrong.append(shown)
        elif any(holds_value(item, fact) for fact in conversation.facts):
            into.items["true"] += 1
        elif said_by_person(item.value, said):
            into.items["said"] += 1
        else:
            into.items["junk"] += 1
            into.junk.append(shown)


def stored_items(config: Config, user: str) -> list[Stored]:
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        facts = [Stored(c, k, v) for c, k, v in con.execute(
            "SELECT category, key, value FROM facts WHERE user_id = ? AND superseded_at IS NULL "
            "AND deleted_at IS NULL", (user,))]
        profile = [Stored("profile", k, v) for k, v in con.execute(
            "SELECT key, value FROM profile WHERE user_id = ? AND deleted_at IS NULL", (user,))]
        return profile + facts
    finally:
        con.close()


# -- the lanes --------------------------------------------------------------------------------


@dataclass
class LearningCall:
    """One learning request to the model: when, how long, what the engine said."""

    seconds: float  # wall, arrival to end
    engine_s: float | None  # the engine's own prompt + generation time (real lane)
    prompt_tokens: int | None
    generated_tokens: int | None
    finish_reason: str | None
    usable: bool


@dataclass
class LaneRun:
    lane: str
    judgement: Judgement = field(default_factory=Judgement)
    learned: dict[str, int] = field(default_factory=dict)
    calls: list[LearningCall] = field(default_factory=list)
    chat_engine_s: float | None = None
    chat_turns: int = 0
    conversation_s: float = 0.0
    learned_after_s: float | None = None  # from the last reply until nothing was left
    diary_after_s: float | None = None
    start_s: float = 0.0


class Model:
    """The model server a lane talks to: its URL and settings, and its learning calls."""

    url: str
    settings: dict[str, str]
    chat_model: str
    reply_limits: dict[str, Any]

    def begin(self) -> None:
        """The conversation starts: what was asked before does not count."""

    def learning_calls(self) -> list[LearningCall]:
        raise NotImplementedError

    def chat_engine_s(self) -> float | None:
        return None

    def last_activity(self) -> float:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class FakeModel(Model):
    def __init__(self, garbage: bool) -> None:
        self.fake = FakeOllama().start()
        self.garbage = garbage
        self.fake.responder = self.respond
        self.url, self.settings, self.chat_model, self.reply_limits = (
            self.fake.url, {}, "gemma3:4b", {})
        self.seen = 0
        self.counted, self.counted_at = 0, time.monotonic()

    def respond(self, body: dict) -> Any:
        if self.garbage and _schema_properties(body):
            return GARBAGE
        return model_reply(body)

    def begin(self) -> None:
        self.seen = len(self.fake.requests)

    def learning_calls(self) -> list[LearningCall]:
        with self.fake._lock:
            requests = self.fake.requests[self.seen:]
        return [LearningCall(0.0, None, None, None, None, not self.garbage)
                for r in requests if r.method == "POST" and isinstance(r.body, dict)
                and _schema_properties(r.body)]

    def last_activity(self) -> float:
        """When the fake last received a request, as far as polling tells."""
        with self.fake._lock:
            count = len(self.fake.requests)
        if count != self.counted:
            self.counted, self.counted_at = count, time.monotonic()
        return self.counted_at

    def stop(self) -> None:
        self.fake.stop()


class RealModel(Model):
    """SmolLM2 on llama-server, every request through the counting proxy."""

    def __init__(self, root: Path, n_predict: int, threads: int | None) -> None:
        from tests.bench import engine
        from tests.bench.packaged_model import SMOLLM2, packaged_model

        self.engine = engine.Engine(engine.llama_server(), packaged_model(SMOLLM2), root,
                                    alias=SMOLLM2.name, n_predict=n_predict,
                                    threads=threads)
        self.engine.start()
        self.proxy = engine.CountingProxy()
        self.proxy.reset(self.engine.url)
        self.url, self.chat_model = self.proxy.url, SMOLLM2.name
        self.reply_limits = {"max_tokens": REAL_REPLY_TOKENS}
        self.settings = {"HILO_LLM_PROVIDER": "openai", "HILO_LLM_CHAT_MODEL": SMOLLM2.name,
                         "HILO_LLM_DISTILL_MODEL": SMOLLM2.name,
                         "HILO_LLM_NUM_CTX": str(engine.CONTEXT),
                         "HILO_EMBEDDER_KIND": "local",
                         "HILO_LEARN_SHARE_WAIT_MINUTES": str(SHARE_WAIT_MINUTES)}
        self.began = 0.0

    def name_callers(self, serve: Process, worker: Process) -> None:
        assert serve.process is not None and worker.process is not None
        self.proxy.callers = {os.getpid(): "client", serve.process.pid: "serve",
                              worker.process.pid: "worker"}

    def begin(self) -> None:
        self.began = time.monotonic()

    def _calls(self) -> list[Any]:
        return [c for c in self.proxy.snapshot() if c.arrived >= self.began and c.is_chat]

    def learning_calls(self) -> list[LearningCall]:
        return [LearningCall(round((c.ended or time.monotonic()) - c.arrived, 2),
                             round(c.model_s, 2), c.new_tokens + c.cached_tokens,
                             int(c.timings.get("predicted_n") or 0), c.finish_reason,
                             c.real_output)
                for c in self._calls() if c.wants_json]

    def chat_engine_s(self) -> float:
        return round(sum(c.model_s for c in self._calls() if not c.wants_json), 2)

    def last_activity(self) -> float:
        calls = self.proxy.snapshot()
        if self.proxy.relaying:
            return time.monotonic()
        return max((c.ended or time.monotonic() for c in calls), default=0.0)

    def stop(self) -> None:
        self.proxy.stop()
        self.engine.stop()


def lane_config(root: Path, model: Model) -> Config:
    return load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / "data").replace(
        llm={"url": model.url, "timeout_seconds": 600.0},
        logging={"level": "info", "format": "json"})


def chat(client: httpx.Client, serve: str, model: Model, conversation: Conversation,
         session: str) -> int:
    """The conversation through `hilo serve`, the client resending its history."""
    history: list[dict] = []
    headers = {"X-Hilo-User": conversation.user, "X-Hilo-Session": session}
    for turn in conversation.turns:
        history.append({"role": "user", "content": turn.user})
        response = client.post(f"{serve}/v1/chat/completions", headers=headers, json={
            "model": model.chat_model, "messages": history, "stream": False,
            **model.reply_limits})
        response.raise_for_status()
        reply = response.json()["choices"][0]["message"]["content"] or ""
        history.append({"role": "assistant", "content": reply})
    return len(conversation.turns)


def wait_until(condition: Callable[[], bool], cap: float) -> float | None:
    """Seconds until `condition()`, or None after `cap`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > cap:
            return None
        time.sleep(0.5)
    return round(time.monotonic() - started, 1)


def quiet(model: Model, seconds: float) -> Callable[[], bool]:
    return lambda: time.monotonic() - model.last_activity() >= seconds


def diary_entries(config: Config) -> int:
    return learned(config)["diary"]


def run_lane(lane: str, root: Path, n_predict: int = -1,
             threads: int | None = None, settings: dict[str, str] | None = None) -> LaneRun:
    run = LaneRun(lane)
    model: Model = (RealModel(root, n_predict, threads) if lane == "real"
                    else FakeModel(lane == "rules"))
    model.settings = {**model.settings, **(settings or {})}
    config = lane_config(root, model)
    DataDir.of(config).init()
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    serve = Process(config, "serve", logs, free_port(), model.settings)
    worker = Process(config, "worker", logs, 0, model.settings)
    try:
        started = time.monotonic()
        worker.start()
        serve.start()
        run.start_s = round(time.monotonic() - started, 1)
        if isinstance(model, RealModel):
            model.name_callers(serve, worker)
        model.begin()
        began = time.monotonic()
        sessions = {c.user: f"{c.user}-1" for c in CONVERSATIONS}
        with httpx.Client(timeout=600) as client:
            for conversation in CONVERSATIONS:
                log(f"{lane}: {conversation.user}'s conversation")
                run.chat_turns += chat(client, serve.url, model, conversation,
                                       sessions[conversation.user])
            run.conversation_s = round(time.monotonic() - began, 1)
            log(f"{lane}: waiting for the worker to learn")
            run.learned_after_s = wait_until(
                lambda: learned(config)["undistilled"] == 0 and quiet(model, QUIET_S[lane])(),
                LEARNED_CAP_S[lane])
            for conversation in CONVERSATIONS:
                client.post(f"{serve.url}/memory/sessions/{sessions[conversation.user]}/end",
                            headers={"X-Hilo-User": conversation.user}).raise_for_status()
            run.diary_after_s = wait_until(
                lambda: diary_entries(config) >= len(CONVERSATIONS)
                and quiet(model, QUIET_S[lane])(), DIARY_CAP_S[lane])
        run.learned = learned(config)
        run.calls = model.learning_calls()
        run.chat_engine_s = model.chat_engine_s()
        for conversation in CONVERSATIONS:
            judge_user(conversation, stored_items(config, conversation.user), run.judgement)
    finally:
        serve.stop()
        worker.stop()
        model.stop()
    return run


# -- the report -------------------------------------------------------------------------------


def lane_summary(run: LaneRun) -> dict[str, Any]:
    judged = run.judgement
    engine = [c.engine_s for c in run.calls if c.engine_s is not None]
    learning_s = round(sum(engine), 2) if engine else None
    return {
        "facts": len(judged.facts), "learned": judged.learned,
        "wrong": sum(1 for o in judged.facts.values() if o == "wrong"),
        "missed": sum(1 for o in judged.facts.values() if o == "missed"),
        "recall": round(judged.recall, 3),
        "precision": None if judged.precision is None else round(judged.precision, 3),
        "stored": judged.stored, "items": judged.items, "junk": judged.junk,
        "wrong_items": judged.wrong,
        "cards": run.learned.get("cards"), "diary": run.learned.get("diary"),
        "superseded": run.learned.get("superseded"),
        "learning_calls": len(run.calls),
        "usable_calls": sum(1 for c in run.calls if c.usable),
        "cut_by_length": sum(1 for c in run.calls if c.finish_reason == "length"),
        "learning_engine_s": learning_s,
        "chat_engine_s": run.chat_engine_s,
        "learning_per_chat_turn_s": (round(learning_s / run.chat_turns, 2)
                                     if learning_s is not None else None),
        "chat_per_turn_s": (round(run.chat_engine_s / run.chat_turns, 2)
                            if run.chat_engine_s is not None else None),
        "learning_vs_chat": (round(learning_s / run.chat_engine_s, 2)
                             if learning_s is not None and run.chat_engine_s else None),
        "longest_call_s": max((c.seconds for c in run.calls), default=None),
        "longest_call_engine_s": max(engine, default=None),
        "chat_turns": run.chat_turns, "conversation_s": run.conversation_s,
        "learned_after_s": run.learned_after_s, "diary_after_s": run.diary_after_s,
        "start_s": run.start_s,
    }


def verdict(lanes: dict[str, dict]) -> dict[str, bool]:
    met: dict[str, bool] = {}
    if "fake" in lanes:
        met["fake recall ≥ 0.9"] = lanes["fake"]["recall"] >= TARGETS["fake_recall"]
    if "real" in lanes:
        precision = lanes["real"]["precision"]
        met["real precision ≥ 0.9"] = precision is not None and precision >= TARGETS[
            "real_precision"]
        if "rules" in lanes:
            met["real covers ≥ rules"] = lanes["real"]["learned"] >= lanes["rules"]["learned"]
    return met


def _cell(value: Any) -> str:
    return "–" if value is None else str(value)


LANE_WORDS = {
    "fake": lambda r: "the fake model extracting what a capable model would (`fake`)",
    "rules": lambda r: ("the fake answering every learning call with unusable JSON, so "
                        "that learning falls back to rules (`rules`)"),
    "real": lambda r: ("SmolLM2-135M-Instruct Q4_1 on llama-server (`real`, replies capped "
                       f"at {REAL_REPLY_TOKENS} tokens by the client; the engine's own cap "
                       f"{r['engine_n_predict']}, -1 for none; threads "
                       f"{r['engine_threads'] or 'all'}; learning within its share of the "
                       "engine, the product's `[learn] engine_share` 0.5, what it does not "
                       f"buy learned by rule after {SHARE_WAIT_MINUTES} minutes)"),
}


def markdown(results: dict) -> str:
    lanes = results["lanes"]
    names = list(lanes)
    rows = [
        ("facts learned (recall)", lambda s: f"{s['learned']} of {s['facts']} ({s['recall']})"),
        ("facts wrong: a taken-back value kept", lambda s: s["wrong"]),
        ("facts missed", lambda s: s["missed"]),
        ("items stored (active facts and profile)", lambda s: s["stored"]),
        ("of which true / wrong / said, unlisted / junk",
         lambda s: " / ".join(str(s["items"][k]) for k in ("true", "wrong", "said", "junk"))),
        ("precision: true / (true + wrong + junk)", lambda s: s["precision"]),
        ("facts superseded (old values kept as history)", lambda s: s["superseded"]),
        ("context cards, diary entries", lambda s: f"{s['cards']}, {s['diary']}"),
        ("learning calls (usable JSON; cut by a length limit)",
         lambda s: f"{s['learning_calls']} ({s['usable_calls']}; {s['cut_by_length']})"),
        ("engine seconds learning, whole run", lambda s: s["learning_engine_s"]),
        ("engine seconds per chat turn: learning / the chat's own",
         lambda s: f"{_cell(s['learning_per_chat_turn_s'])} / {_cell(s['chat_per_turn_s'])}"),
        ("longest learning call, s (engine s)",
         lambda s: f"{_cell(s['longest_call_s'])} ({_cell(s['longest_call_engine_s'])})"),
        ("conversation, s; then learned in, s; diaries in, s",
         lambda s: f"{s['conversation_s']}; {_cell(s['learned_after_s'])}; "
                   f"{_cell(s['diary_after_s'])}"),
    ]
    lines = [
        f"{len(CONVERSATIONS)} scripted conversations ({sum(len(c.turns) for c in CONVERSATIONS)} "
        f"turns, {results['facts']} facts, {results['changed']} of them changed later in the "
        "conversation) through a real `hilo serve` and `hilo worker` on the product's "
        "defaults; lanes: " + "; ".join(LANE_WORDS[n](results) for n in names)
        + (". Settings: " + ", ".join(f"`{k}={v}`" for k, v in results["settings"].items())
           if results.get("settings") else "")
        + ". A fact is learned "
        "when an active fact or profile entry about it holds its current value and none "
        "holds a value taken back (tests/bench/learning.py says how each is matched). "
        "The machine is shared with other work.",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(cell(lanes[n])) for n in names) + " |")
    lines += ["", "Targets: " + "; ".join(f"{name} {'met' if ok else 'MISSED'}"
                                          for name, ok in results["verdict"].items()) + ".", ""]
    for name in names:
        if lanes[name]["junk"] or lanes[name]["wrong_items"]:
            shown = lanes[name]["wrong_items"][:8] + lanes[name]["junk"][:12]
            lines.append(f"`{name}`: wrong and junk items stored (up to 20): "
                         + "; ".join(f"`{s}`" for s in shown) + ".")
            lines.append("")
    lines += ["Per fact (learned ✓, wrong ✗, missed ·):", "",
              "| fact | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    marks = {"learned": "✓", "wrong": "✗", "missed": "·"}
    for key in results["per_fact"][names[0]]:
        lines.append(f"| {key} | " + " | ".join(marks[results["per_fact"][n][key]]
                                               for n in names) + " |")
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--lanes", default=",".join(LANES),
                   help="which lanes, comma-separated (fake, rules, real)")
    p.add_argument("--keep-logs", action="store_true", help="keep the data directories")
    p.add_argument("--engine-n-predict", type=int, default=-1,
                   help="llama-server's own cap on a reply (default -1: none, as its default; "
                        "Hilo's learning budget bounds the calls)")
    p.add_argument("--engine-threads", type=int, default=None,
                   help="llama-server's threads (default: all the cores)")
    p.add_argument("--set", action="append", default=[], metavar="HILO_KEY=value",
                   help="a setting for serve and worker, every lane (repeatable)")
    args = p.parse_args()
    lanes = ["fake"] if args.quick else [x.strip() for x in args.lanes.split(",") if x.strip()]
    unknown = set(lanes) - set(LANES)
    if unknown:
        raise SystemExit(f"unknown lane(s) {', '.join(sorted(unknown))}: choose from {LANES}")
    soak.READY_TIMEOUT = max(soak.READY_TIMEOUT, 120.0)  # the local embedder loads slowly
    facts = [f for c in CONVERSATIONS for f in c.facts]
    results: dict[str, Any] = {"settings": dict(item.split("=", 1) for item in args.set),
                               "engine_n_predict": args.engine_n_predict,
                               "engine_threads": args.engine_threads, "facts": len(facts),
                               "changed": sum(1 for f in facts if f.stale),
                               "lanes": {}, "per_fact": {}}
    kept = []
    for lane in lanes:
        root = Path(tempfile.mkdtemp(prefix=f"hilo-bench-learning-{lane}-"))
        log(f"lane {lane} in {root}")
        run = run_lane(lane, root, args.engine_n_predict, args.engine_threads,
                       dict(item.split("=", 1) for item in args.set))
        results["lanes"][lane] = lane_summary(run)
        results["per_fact"][lane] = run.judgement.facts
        results.setdefault("calls", {})[lane] = [asdict(c) for c in run.calls]
        if args.keep_logs:
            kept.append(str(root))
        else:
            shutil.rmtree(root, ignore_errors=True)
    results["verdict"] = verdict(results["lanes"])
    if kept:
        results["data_dirs"] = kept
    emit(args, "learning", results, markdown(results))


if __name__ == "__main__":
    main()
