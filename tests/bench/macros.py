"""Macros benchmark: model calls that learned tool chains save, on a scripted corpus.

The corpus is a set of routines a user's scheduled tasks repeat, each a fixed chain of
tool calls (terminal, memory and task tools) and then an answer; one routine's second
call varies from run to run, so its chain is too uncertain to be learned. The fake model
plays each routine: it asks for the routine's next call not yet in the turn, then
answers. Each routine runs as a trusted scheduled task's turn (app/turn/agent.py, real tools,
real database): first without macros, then the worker's learning job
(app/learn/tool_chains.py) runs, then again with the learned macros. Counted: model calls per
run, calls made by macros, and whether every run still made the routine's calls and
gave its answer.

    python -m tests.bench.macros [--quick] [--json]
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import Durability
from app.learn.tool_chains import learn_all_macros
from app.memory import remember_fact, set_profile
from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.turn.macros import list_macros
from app.writer import Writer
from tests.bench.report import emit, parser
from tests.fake_ollama import FakeOllama, Reply
from tests.workers.support import REPO_ROOT

USER = "bench"


@dataclass(frozen=True)
class Routine:
    name: str
    calls: tuple[tuple[str, dict[str, Any]], ...]
    answer: str
    varies: bool = False  # the second call alternates between two (an uncertain chain)

    def calls_for(self, run: int) -> list[tuple[str, dict[str, Any]]]:
        calls = list(self.calls)
        if self.varies and run % 2:
            calls[1] = ("recall", {"query": "restore"})
        return calls


CORPUS = (
    Routine("morning check", (("terminal", {"command": "uptime"}),
                              ("terminal", {"command": "df -h /"})),
            "Load is low and / has room."),
    Routine("project status", (("recall", {"query": "project deadline"}),
                               ("list_tasks", {})),
            "The deadline is 30 June; the weekly report task is on."),
    Routine("system facts", (("terminal", {"command": "uname -sr"}),
                             ("terminal", {"command": "date -u +%F"}),
                             ("terminal", {"command": "echo checked"})),
            "Linux, today, checked."),
    Routine("who am I", (("profile", {}), ("recall", {"query": "editor"})),
            "You are Ana and you use Helix."),
    Routine("ping", (("terminal", {"command": "echo ping"}),), "pong"),
    Routine("mixed", (("recall", {"query": "backups"}), ("list_tasks", {})),
            "Backups are nightly.", varies=True),
)
BY_PROMPT = {f"Routine: {r.name}": r for r in CORPUS}


def model(body: dict[str, Any]) -> Any:
    """The routine's next call not yet made in this turn, else its answer."""
    messages = body.get("messages")
    if not messages:
        return None
    start = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    prompt = messages[start]["content"]
    routine_name, _, run = prompt.partition(" #")
    routine = BY_PROMPT[routine_name]
    made = [call for m in messages[start + 1:] for call in m.get("tool_calls") or []]
    calls = routine.calls_for(int(run))
    if len(made) < len(calls):
        name, arguments = calls[len(made)]
        return Reply(tool_calls=[{"name": name, "arguments": arguments}])
    return routine.answer


def run_routines(agent: Agent, runs: int, phase: str) -> dict[str, dict[str, Any]]:
    results = {}
    for routine in CORPUS:
        model_calls = macro_calls = correct = 0
        for run in range(runs):
            outcome = agent.start_turn(USER, f"task:{phase}:{routine.name}:{run}",
                                       f"Routine: {routine.name} #{run}", trusted=True).run()
            model_calls += outcome.model_calls
            macro_calls += outcome.macro_calls
            made = [e.tool_name for e in outcome.tool_events]
            correct += (outcome.reply_event.content == routine.answer
                        and made == [name for name, _ in routine.calls_for(run)]
                        and not any(e.content.startswith("error:") for e in outcome.tool_events))
        results[routine.name] = {"runs": runs, "model_calls": model_calls,
                                 "macro_calls": macro_calls, "correct": correct}
    return results


def seed(writer: Writer) -> None:
    """What the memory tools find."""
    writer.submit(lambda con: set_profile(con, USER, "name", "Ana", source="user", worker="user"))
    for key, value in (("project deadline", "Ships on 30 June"), ("editor", "Uses Helix"),
                       ("backups", "Nightly at 2")):
        writer.submit(lambda con, k=key, v=value: remember_fact(con, USER, "fact", k, v))


def bench(root: Path, fake: FakeOllama, learn_runs: int, eval_runs: int) -> dict[str, Any]:
    config: Config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / "data")
    config = config.replace(llm={"url": fake.url}, embedder={"kind": "none"},
                            tools={"terminal_workdir": str(root)})
    DataDir.of(config).init()
    with ChatService(config, writer=Writer.from_config(config, Durability.NORMAL)) as service:
        seed(service.writer)
        agent = Agent(service, surface="task")
        started = time.perf_counter()
        before = run_routines(agent, learn_runs, "learn")
        learn_started = time.perf_counter()
        learn_all_macros(service.writer, config)
        learn_seconds = time.perf_counter() - learn_started
        after = run_routines(agent, eval_runs, "eval")
        seconds = time.perf_counter() - started
        macros = list_macros(service.reader(), USER)
        service.writer.close()
    return {"learn_runs": learn_runs, "eval_runs": eval_runs, "before": before, "after": after,
            "macros": [{"trigger": f"{m.trigger_tool} {m.trigger_args_pattern}",
                        "next": f"{m.next_tool} {m.next_args}", "confidence": m.confidence,
                        "support": m.support, "used": m.used_count} for m in macros],
            "learn_ms": round(learn_seconds * 1000, 1), "seconds": round(seconds, 1),
            "threshold": {"confidence": config.tools.macro_confidence,
                          "min_support": config.tools.macro_min_support}}


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    learn_runs, eval_runs = (4, 6) if args.quick else (6, 30)
    fake = FakeOllama().start()
    fake.responder = model
    try:
        with tempfile.TemporaryDirectory(prefix="hilo-bench-macros-") as tmp:
            results = bench(Path(tmp), fake, learn_runs, eval_runs)
    finally:
        fake.stop()
    results["quick"] = args.quick
    emit(args, "macros", results, markdown(results))


def per_run(row: dict[str, Any]) -> float:
    return row["model_calls"] / row["runs"]


def markdown(results: dict[str, Any]) -> str:
    before, after = results["before"], results["after"]
    lines = [
        f"A scripted tool-use corpus of {len(CORPUS)} routines (terminal, memory and task "
        "tools) run as trusted scheduled-task turns with real tools and database, the fake "
        "model playing each routine. Without macros: the first "
        f"{results['learn_runs']} runs of each; then the learning job; with macros: "
        f"{results['eval_runs']} runs of each (used at confidence ≥ "
        f"{results['threshold']['confidence']}, seen ≥ {results['threshold']['min_support']}).",
        "",
        "| routine | model calls per run, without | with macros | calls made by macros | saved | runs correct |",
        "|---|---|---|---|---|---|",
    ]
    total_before = total_after = 0.0
    for routine in CORPUS:
        b, a = before[routine.name], after[routine.name]
        total_before += per_run(b)
        total_after += per_run(a)
        saved = 1 - per_run(a) / per_run(b)
        lines.append(f"| {routine.name}{' (varies)' if routine.varies else ''} | "
                     f"{per_run(b):.2f} | {per_run(a):.2f} | {a['macro_calls']} | "
                     f"{saved:.0%} | {a['correct']}/{a['runs']} |")
    lines.append(f"| **all** | {total_before:.2f} | {total_after:.2f} | "
                 f"{sum(a['macro_calls'] for a in after.values())} | "
                 f"{1 - total_after / total_before:.0%} | "
                 f"{sum(a['correct'] for a in after.values())}/"
                 f"{sum(a['runs'] for a in after.values())} |")
    lines += ["", f"Macros learned ({len(results['macros'])}, in {results['learn_ms']} ms):", ""]
    lines += [f"- `{m['trigger']}` → `{m['next']}` (confidence {m['confidence']}, seen "
              f"{m['support']}, used {m['used']})" for m in results["macros"]]
    lines += ["", "The saving is in model calls, each a full prompt evaluation on the "
              "machine the model runs on; on 2 shared cores here the whole run took "
              f"{results['seconds']} s against the fake model."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
