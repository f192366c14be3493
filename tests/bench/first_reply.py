"""The first reply after `hilo serve` starts, beyond the model's own time (issue 38).

Each start: `hilo serve` on the seeded memory of tests/bench/localmodel.py, timed from
the moment its process is started; the conversation's first message is sent as soon as
/health answers (asked every 10 ms by the client that sends it, made before the start,
as a chat client is running already). The model server says what its own part took: the fake
(tests/fake_ollama.py) the prompt reading and the reply it simulated, llama-server its
`timings` (prompt_ms, predicted_ms), read through the benches' counting proxy. So:

- first token beyond the model's: the reply's first token, counted from the start, less
  the model's reading of the prompt;
- reply beyond the model's: the reply's end, counted from the start, less the model's
  reading and writing (the issue's target: ≤ 1 s).

With `--against REF`, each round starts this tree's code and then REF's (`git archive`,
the same model server), so a loaded machine slows both alike: the ratio of their medians
is the figure on a shared machine. Each tree runs as its own install would: REF reads its
own config.toml, gets only the HILO_ variables its configuration knows (the report lists
those it was not given) and seeds the memory with its own code, since an older Hilo
cannot read a newer one's config sections nor open a database a newer one migrated. Each tree's code is
compiled to bytecode first, as an install has it (byte_compiled). With `--engine llama.cpp`,
llama-server on the random model of `--engine-shape` (the README's default,
`gemma3-4b`, takes a while to write and quantize once: tests/bench/engine.py) or the real
model of `--engine-model` (SmolLM2-135M-Instruct: tests/bench/packaged_model.py), started
afresh for each start so every first prompt is read whole, and the local embedder as
the engine bench runs it; without, the fake at `--prompt-tps`.

    python -m tests.bench.localmodel --first-reply [--runs 5] [--against main] [--json]
        [--engine llama.cpp --engine-shape gemma3-4b | --engine-model smollm2]
        [--engine-threads N] [--set HILO_KEY=value ...]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.config import Config
from tests.bench.localmodel import USER, Setup, hilo_config, seed_memory, send_turn
from tests.bench.localmodel_script import TURNS
from tests.bench.packaged_model import PACKAGED, packaged_model
from tests.bench.report import REPO_ROOT, emit, load_average, quiet, tree_of
from tests.bench.soak import Process, free_port
from tests.fake_ollama import CpuSpeed, FakeOllama

__all__ = ["first_replies"]

# The figures of one start, in the order the report shows them.
FIGURES = ("start_to_health_s", "start_to_first_token_s", "model_read_s",
           "first_token_beyond_model_s", "start_to_reply_s", "model_reply_s",
           "reply_beyond_model_s", "cpu_to_health_s", "cpu_to_reply_s")
TARGET_S = 1.0  # the reply, beyond the model's own time (issue 38)

# Asked of another tree's code: the HILO_ variables its configuration knows.
KNOWN_VARIABLES = (
    "import json; from app.config import SECTIONS, _fields; print(json.dumps("
    "[f'HILO_{s.upper()}_{k.upper()}' for s in SECTIONS for k in _fields(s)]))")
# Run by another tree's code: the seeded memory, written by that code.
SEED = ("import sys; from pathlib import Path; from app.config import load_config; "
        "from tests.bench.localmodel import seed_memory; "
        "seed_memory(load_config(path=Path(sys.argv[1]), env={}, data_dir=Path(sys.argv[2])))")


@dataclass
class Tree:
    """The code a start runs: this tree's, or another commit's (`--against`), run as its own
    install would run it."""

    name: str
    path: Path
    known: frozenset[str] | None = None  # another tree's HILO_ variables; None: this tree's
    not_given: set[str] = field(default_factory=set)  # the variables it did not know

    @classmethod
    def other(cls, name: str, path: Path) -> Tree:
        done = subprocess.run([sys.executable, "-c", KNOWN_VARIABLES], cwd=path, check=True,
                              env=cls._own(path), capture_output=True, text=True)
        return cls(name, path, frozenset(json.loads(done.stdout)))

    @staticmethod
    def _own(path: Path) -> dict[str, str]:
        return {**{k: v for k, v in os.environ.items() if not k.startswith("HILO_")},
                "PYTHONPATH": str(path)}

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """`env` as this tree's processes get it: its code, and for another tree its own
        config.toml and only the variables it knows."""
        env = {**env, "PYTHONPATH": str(self.path)}
        if self.known is None:
            return env
        unknown = {k for k in env if k.startswith("HILO_") and k != "HILO_CONFIG"
                   and k not in self.known}
        self.not_given |= unknown
        return {**{k: v for k, v in env.items() if k not in unknown},
                "HILO_CONFIG": str(self.path / "config.toml")}

    def seed(self, config: Config) -> None:
        """The seeded memory in `config`'s data directory, written by this tree's code."""
        if self.known is None:
            seed_memory(config)
            return
        subprocess.run([sys.executable, "-c", SEED, str(self.path / "config.toml"),
                        str(config.data_dir)], cwd=self.path, env=self._own(self.path),
                       check=True)


class _TreeProcess(Process):
    """`hilo serve` running a tree's code, asked whether it is up every 10 ms by the client
    that then sends the first message: made before the start, so that neither its making
    (its TLS settings alone are ~50 ms) nor a coarse poll counts as the server's time."""

    READY_EVERY_S = 0.01

    def __init__(self, tree: Tree, client: httpx.Client, *args: Any) -> None:
        super().__init__(*args)
        self.tree, self.client = tree, client

    def environment(self) -> dict[str, str]:
        return self.tree.environment(super().environment())

    def _ready(self, log: Path) -> bool:
        try:
            return self.client.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False


def _cpu_s(server: Process) -> float:
    """The CPU time (user and system) the server's process has spent so far: on a shared
    machine, steadier than the wall clock."""
    assert server.process is not None
    times = psutil.Process(server.process.pid).cpu_times()
    return times.user + times.system


def _figures(started: float, up: float, sent: float, ttft: float, ended: float,
             model_read: float, model_reply: float, cpu: tuple[float, float]) -> dict[str, float]:
    first_token = sent + ttft - started
    reply = ended - started
    return {"cpu_to_health_s": cpu[0], "cpu_to_reply_s": cpu[1],"start_to_health_s": up, "start_to_first_token_s": first_token,
            "model_read_s": model_read, "first_token_beyond_model_s": first_token - model_read,
            "start_to_reply_s": reply, "model_reply_s": model_reply,
            "reply_beyond_model_s": reply - model_reply}


class _Fake:
    """The fake model server, simulating a CPU model: its own time is what it simulated."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.fake = FakeOllama(cpu=CpuSpeed(args.prompt_tps, args.generate_tps),
                               embedding_dim=args.embedding_dim).start()

    def described(self) -> str:
        return (f"the fake model server at {self.args.prompt_tps:g} prompt tokens/s and "
                f"{self.args.generate_tps:g} written tokens/s, its embeddings instant")

    def start(self, tree: Tree, root: Path, settings: dict[str, str],
              logs: Path) -> dict[str, float]:
        Setup().prepare(self.fake)
        config = hilo_config(root, self.fake)
        tree.seed(config)
        with httpx.Client(timeout=600) as client:
            server = _TreeProcess(tree, client, config, "serve", logs, free_port(), settings)
            started = time.monotonic()
            server.start()
            up = time.monotonic() - started
            try:
                cpu_up = _cpu_s(server)
                sent, ttft, ended, _ = send_turn(client, server.url,
                                                 [{"role": "user", "content": TURNS[0].user}])
                cpu = (cpu_up, _cpu_s(server))
            finally:
                server.stop()
        with self.fake._lock:
            chat = next(e for e in self.fake.evaluations
                        if e.path == "/api/chat" and not e.wants_json and e.arrived >= sent)
        assert chat.started is not None and chat.first_token is not None and chat.ended
        return _figures(started, up, sent, ttft, ended, chat.first_token - chat.started,
                        chat.ended - chat.started, cpu)

    def stop(self) -> None:
        self.fake.stop()


class _Engine:
    """llama-server behind the counting proxy, started afresh for each start of Hilo: its
    own time is what its `timings` say."""

    def __init__(self, args: Any) -> None:
        from tests.bench import engine, soak  # it builds llama-server on first use

        soak.READY_TIMEOUT = max(soak.READY_TIMEOUT, engine.PROCESS_READY_S)
        self.engine_bench = engine
        packaged = PACKAGED[args.engine_model] if args.engine_model else None
        self.model = (packaged.described if packaged
                      else f"the random model of shape `{args.engine_shape}`")
        self.logs = Path(tempfile.mkdtemp(prefix="hilo-bench-first-reply-engine-"))
        self.engine = engine.Engine(
            engine.llama_server(),
            packaged_model(packaged) if packaged
            else engine.model_file(engine.shape_named(args.engine_shape)),
            self.logs, alias=packaged.name if packaged else engine.MODEL,
            n_predict=engine.UNCAPPED if packaged else engine.ENGINE_N_PREDICT,
            threads=args.engine_threads)
        self.proxy = engine.CountingProxy()

    def described(self) -> str:
        return (f"llama-server ({self.engine.threads} threads) on {self.model}, started "
                "afresh for each start, the local embedder")

    def start(self, tree: Tree, root: Path, settings: dict[str, str],
              logs: Path) -> dict[str, float]:
        bench = self.engine_bench
        config, engine_settings = bench.engine_config(root, self.proxy, self.engine.alias)
        tree.seed(config)
        self.engine.start()
        self.proxy.reset(self.engine.url)
        client = httpx.Client(timeout=600)
        server = _TreeProcess(tree, client, config, "serve", logs, free_port(),
                              {**engine_settings, **settings})
        try:
            started = time.monotonic()
            server.start()
            up = time.monotonic() - started
            cpu_up = _cpu_s(server)
            sent, ttft, ended, _ = bench.send_turn(
                client, server.url, [{"role": "user", "content": TURNS[0].user}], {},
                self.engine.alias)
            cpu = (cpu_up, _cpu_s(server))
        finally:
            client.close()
            server.stop()
            self.engine.stop()
        chat = next(c for c in self.proxy.snapshot()
                    if c.is_chat and not c.wants_json and c.arrived >= sent)
        read = float(chat.timings.get("prompt_ms") or 0) / 1000
        return _figures(started, up, sent, ttft, ended, read, chat.model_s, cpu)

    def stop(self) -> None:
        self.proxy.stop()
        self.engine.stop()
        shutil.rmtree(self.logs, ignore_errors=True)


def byte_compiled(tree: Path) -> Path:
    """The tree, its code compiled to bytecode as an install has it (pip compiles what it
    installs; a checkout writes it on its first run): where PYTHONDONTWRITEBYTECODE is set,
    every start would compile Hilo's source again, most of a start's import time."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                    str(tree / "app"), str(tree / "workers")], check=True)
    return tree


def first_replies(args: Any, settings: dict[str, str]) -> None:
    """`--first-reply`: `args.runs` starts of each tree, alternated; medians; the report."""
    server = _Engine(args) if args.engine else _Fake(args)
    trees = [Tree("this tree", byte_compiled(REPO_ROOT))]
    scratch = Path(tempfile.mkdtemp(prefix="hilo-bench-first-reply-trees-"))
    load_before = load_average()
    runs: dict[str, list[dict[str, float]]] = {}
    try:
        if args.against:
            trees.append(Tree.other(args.against,
                                    byte_compiled(tree_of(args.against, scratch))))
        runs = {tree.name: [] for tree in trees}
        for _ in range(args.runs):
            for tree in trees:  # turns alternate: the same load for both
                root = Path(tempfile.mkdtemp(prefix="hilo-bench-first-reply-"))
                logs = root / "logs"
                logs.mkdir()
                try:
                    runs[tree.name].append(server.start(tree, root, settings, logs))
                finally:
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    results: dict[str, Any] = {
        "model_server": server.described(), "settings": settings, "user": USER,
        "load_average": {"before": load_before, "after": load_average()},
        "trees": {name: {f"{key}_median": round(statistics.median(r[key] for r in starts), 3)
                         for key in FIGURES} for name, starts in runs.items()},
        "runs": {name: [{k: round(v, 3) for k, v in r.items()} for r in starts]
                 for name, starts in runs.items()},
        "not_given": {tree.name: sorted(tree.not_given) for tree in trees if tree.not_given}}
    if args.against:
        mine, other = (results["trees"][tree.name] for tree in trees)
        results["ratio, this tree / other"] = {
            key: round(mine[f"{key}_median"] / other[f"{key}_median"], 3)
            for key in ("start_to_health_s", "first_token_beyond_model_s",
                        "reply_beyond_model_s", "cpu_to_health_s", "cpu_to_reply_s")
            if other[f"{key}_median"] > 0}
    results["target_met"] = (
        results["trees"]["this tree"]["reply_beyond_model_s_median"] <= TARGET_S)
    results["quiet"] = quiet(load_before, results["load_average"]["after"])
    section = "localmodel-first-reply" + (
        f"-{args.engine_model or args.engine_shape}" if args.engine else "")
    emit(args, section, results, markdown(results))


def markdown(results: dict) -> str:
    trees = results["trees"]
    load = results["load_average"]
    lines = [
        f"The first message after `hilo serve` starts, on {results['model_server']}; "
        f"settings: {', '.join(f'{k}={v}' for k, v in results['settings'].items()) or 'none'}. "
        f"Medians of {len(next(iter(results['runs'].values())))} starts per tree, the trees "
        f"alternated, each tree's code compiled to bytecode first (as installed); seconds "
        f"counted from the process's start. Load average (1, 5, 15 "
        f"min) {' / '.join(map(str, load['before']))} before, "
        f"{' / '.join(map(str, load['after']))} after (2 cores).",
        "",
        "| tree | /health | first token | the model's reading | first token beyond the "
        "model's | reply | the model's reading and writing | **reply beyond the model's** "
        "| server CPU to /health | server CPU to the reply's end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in trees.items():
        lines.append(f"| {name} | " + " | ".join(
            (f"**{t[f'{key}_median']}**" if key == "reply_beyond_model_s"
             else str(t[f"{key}_median"])) for key in FIGURES) + " |")
    for name, variables in results["not_given"].items():
        lines += ["", f"{name} does not know, so was not given: {', '.join(variables)}."]
    if "ratio, this tree / other" in results:
        ratio = results["ratio, this tree / other"]
        lines += ["", "This tree ÷ the other, medians: " + ", ".join(
            f"{key.removesuffix('_s').replace('_', ' ')} {value}×"
            for key, value in ratio.items()) + "."]
    verdict = ("met" if results["target_met"] else "MISSED") if results["quiet"] else "not judged"
    lines += ["", "### Targets", "",
              f"- {verdict}: the first reply after a start ≤ {TARGET_S:g} s beyond the "
              f"model's own time, on a quiet machine (this tree: "
              f"{trees['this tree']['reply_beyond_model_s_median']} s"
              f"{'' if results['quiet'] else '; the machine was loaded'})"]
    return "\n".join(lines)
