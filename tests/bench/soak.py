"""Soak: load and crashes through a real `hilo serve` and a real `hilo worker`.

- load: 16 concurrent clients chat for 60 s (--quick: 10 s) against the fake model at
  0 ms: errors (any answer but 200, any transport error), turns/s, p50/p99 latency, the
  RSS of both processes sampled every second (first and last quarter compared), and the
  time the worker needs after the last reply to distill and compact everything.
- crash: under the same load, `kill -9` of the server, the worker, or both, at seeded
  random moments, each restarted, for several rounds (--quick: 3). Then: every
  acknowledged turn is stored, no turn is stored twice, and every stored turn is
  distilled exactly once (one fact per turn, never two).

    python -m tests.bench.soak [--quick] [--json] [--seed N]
"""

from __future__ import annotations

import itertools
import random
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import connect_readonly
from tests.bench.report import emit, median, parser, percentile
from tests.fake_ollama import FakeOllama
from tests.workers.support import REPO_ROOT, consumer_env, hilo_command, scripted_model

CLIENTS = 16
MODEL = "gemma3:4b"
READY_TIMEOUT = 30.0
DRAIN_BOUND_SECONDS = 10.0
DRAIN_TIMEOUT = 120.0


# -- the processes ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_health(url: str) -> bool:
    """Whether the server at `url` answers /health with 200."""
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def wait_started(process: subprocess.Popen, ready: Callable[[], bool], timeout_s: float,
                 failure: Callable[[], str], every_s: float = 0.05) -> None:
    """Wait until `ready()`, asked every `every_s`; RuntimeError(failure()) if `process`
    exits or `timeout_s` pass."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(failure())
        time.sleep(every_s)


class Process:
    """`hilo serve` or `hilo worker` for this config, restarted as often as it is killed;
    `settings` are HILO_* variables added to its environment."""

    READY_EVERY_S = 0.05  # how often a start asks whether the process is ready

    def __init__(self, config: Config, role: str, logs: Path, port: int,
                 settings: dict[str, str] | None = None) -> None:
        self.config, self.role, self.logs, self.port = config, role, logs, port
        self.settings = settings or {}
        self.starts = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        log = self.logs / f"{self.role}-{self.starts}.log"
        argv = ["serve", "--port", str(self.port)] if self.role == "serve" else ["worker"]
        self.process = subprocess.Popen(hilo_command(*argv), cwd=REPO_ROOT,
                                        env=self.environment(),
                                        stdout=log.open("wb"),
                                        stderr=subprocess.STDOUT)
        wait_started(self.process, lambda: self._ready(log), READY_TIMEOUT,
                     lambda: f"{self.role} did not start:\n{log.read_text(errors='replace')}",
                     self.READY_EVERY_S)

    def environment(self) -> dict[str, str]:
        """The process's environment: this config's variables and the settings."""
        return {**consumer_env(self.config), **self.settings}

    def _ready(self, log: Path) -> bool:
        if self.role == "worker":
            return "worker.started" in log.read_text(errors="replace")
        return answers_health(self.url)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()  # SIGKILL
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def rss_mib(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except (OSError, AttributeError):
            return None
        return None


# -- the clients -----------------------------------------------------------------------------


@dataclass
class Load:
    """What the clients saw: acknowledged turns, errors, latencies."""

    acknowledged: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    numbers: itertools.count = field(default_factory=itertools.count)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, url: str, clients: int = CLIENTS) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._client, args=(url, c), daemon=True)
                   for c in range(clients)]
        for thread in threads:
            thread.start()
        return threads

    def _client(self, url: str, client: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            while not self.stop.is_set():
                n = next(self.numbers)
                body = {"model": MODEL, "stream": False, "messages": [
                    {"role": "user", "content": f"Turn {n}: remember code alpha{n}"}]}
                started = time.perf_counter()
                try:
                    response = http.post("/api/chat", json=body,
                                         headers={"X-Hilo-Session": f"soak-{client}"})
                except httpx.TransportError as exc:
                    self.errors.append(f"transport: {type(exc).__name__}")
                    time.sleep(0.05)  # the server is down: do not spin
                    continue
                if response.status_code == 200:
                    self.latencies.append(time.perf_counter() - started)
                    self.acknowledged.append(n)
                else:
                    self.errors.append(f"{response.status_code}: {response.text[:200]}")


# -- the database's word -------------------------------------------------------------------


def stored_turns(config: Config) -> Counter[int]:
    """How many times each turn's user message is stored."""
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        rows = con.execute("SELECT content FROM events WHERE role = 'user' AND content LIKE 'Turn %'")
        return Counter(int(content.split()[1].rstrip(":")) for (content,) in rows)
    finally:
        con.close()


def backlog(config: Config) -> int:
    """Turns not yet distilled plus sessions due for compaction."""
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        (undistilled,) = con.execute("SELECT count(*) FROM events WHERE role = 'user' "
                                     "AND distilled_at IS NULL").fetchone()
        due = con.execute("SELECT count(*) FROM (SELECT session_id FROM events WHERE compacted = 0 "
                          "GROUP BY session_id HAVING count(*) >= ?)",
                          (config.memory.compaction_threshold,)).fetchone()[0]
        return undistilled + due
    finally:
        con.close()


def facts_per_turn(config: Config) -> Counter[int]:
    """How many fact rows (every version) each turn's code produced."""
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        rows = con.execute("SELECT key FROM facts WHERE key LIKE 'item%'")
        return Counter(int(key[4:]) for (key,) in rows)
    finally:
        con.close()


def drained_after(config: Config, timeout: float = DRAIN_TIMEOUT) -> float:
    started = time.monotonic()
    while backlog(config):
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the backlog was not drained in {timeout} s")
        time.sleep(0.1)
    return time.monotonic() - started


def exactly_once(config: Config, acknowledged: list[int]) -> dict:
    stored, facts = stored_turns(config), facts_per_turn(config)
    lost = sorted(set(acknowledged) - set(stored))
    doubled = sorted(n for n, count in stored.items() if count > 1)
    undistilled_or_doubled = sorted(n for n in stored if facts.get(n) != 1)
    return {"acknowledged": len(acknowledged), "stored": len(stored), "lost": lost[:10],
            "duplicated": doubled[:10], "not_distilled_once": undistilled_or_doubled[:10],
            "ok": not lost and not doubled and not undistilled_or_doubled}


# -- the phases ------------------------------------------------------------------------------


def fresh_config(root: Path, name: str, fake: FakeOllama) -> Config:
    # The fake model answers at once and sixteen clients keep a chat always in flight: the
    # workers do not wait for the chat here (tests.bench.localmodel measures that wait).
    config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / name).replace(
        llm={"url": fake.url}, logging={"level": "warning", "format": "json"},
        queue={"chat_idle_seconds": 0.0})
    DataDir.of(config).init()
    (root / f"{name}-logs").mkdir()
    return config


def load_phase(root: Path, fake: FakeOllama, seconds: float) -> dict:
    config = fresh_config(root, "load", fake)
    server = Process(config, "serve", root / "load-logs", free_port())
    worker = Process(config, "worker", root / "load-logs", 0)
    server.start()
    worker.start()
    load = Load()
    rss: dict[str, list[float]] = {"serve": [], "worker": []}
    try:
        threads = load.run(server.url)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(1.0)
            for process in (server, worker):
                sample = process.rss_mib()
                if sample is not None:
                    rss[process.role].append(sample)
        load.stop.set()
        for thread in threads:
            thread.join(timeout=60)
        elapsed = time.monotonic() - started
        drain = drained_after(config)
        check = exactly_once(config, load.acknowledged)
    finally:
        server.stop()
        worker.stop()
    quarter = {role: max(1, len(samples) // 4) for role, samples in rss.items()}
    return {
        "seconds": round(elapsed, 1), "clients": CLIENTS, "turns": len(load.acknowledged),
        "turns_per_s": round(len(load.acknowledged) / elapsed, 1), "errors": len(load.errors),
        "error_examples": sorted(set(load.errors))[:5],
        "p50_ms": round(median(load.latencies) * 1000, 1),
        "p99_ms": round(percentile(load.latencies, 99) * 1000, 1),
        "rss_mib": {role: {"first_quarter": round(median(samples[:quarter[role]]), 1),
                           "last_quarter": round(median(samples[-quarter[role]:]), 1),
                           "max": round(max(samples), 1)}
                    for role, samples in rss.items() if samples},
        "drained_after_s": round(drain, 2), "drained_in_bound": drain <= DRAIN_BOUND_SECONDS,
        "exactly_once": check,
    }


def crash_phase(root: Path, fake: FakeOllama, rounds: int, seed: int) -> dict:
    rng = random.Random(seed)
    config = fresh_config(root, "crash", fake)
    server = Process(config, "serve", root / "crash-logs", free_port())
    worker = Process(config, "worker", root / "crash-logs", 0)
    server.start()
    worker.start()
    load = Load()
    faults: Counter[str] = Counter()
    try:
        threads = load.run(server.url)
        for round_ in range(rounds):
            time.sleep(rng.uniform(0.5, 3.0))  # a random moment under load
            victims = [(server,), (worker,), (server, worker)][round_ % 3]
            for process in victims:
                process.kill()
            faults["+".join(p.role for p in victims)] += 1
            time.sleep(rng.uniform(0.0, 0.5))
            for process in victims:
                process.start()
        time.sleep(1.0)
        load.stop.set()
        for thread in threads:
            thread.join(timeout=60)
        drain = drained_after(config)
        check = exactly_once(config, load.acknowledged)
    finally:
        server.stop()
        worker.stop()
    return {"rounds": rounds, "seed": seed, "kills": dict(faults),
            "failed_requests_during_faults": len(load.errors),
            "drained_after_restart_s": round(drain, 2), "exactly_once": check}


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=13, help="where the kills fall (default 13)")
    args = p.parse_args()
    fake = FakeOllama().start()
    fake.responder = scripted_model
    results: dict = {"quick": args.quick}
    try:
        with tempfile.TemporaryDirectory(prefix="hilo-bench-soak-") as tmp:
            results["load"] = load_phase(Path(tmp), fake, 10.0 if args.quick else 60.0)
            results["crash"] = crash_phase(Path(tmp), fake, 3 if args.quick else 12, args.seed)
    finally:
        fake.stop()
    results["ok"] = (results["load"]["errors"] == 0 and results["load"]["drained_in_bound"]
                     and results["load"]["exactly_once"]["ok"]
                     and results["crash"]["exactly_once"]["ok"])
    emit(args, "reliability", results, markdown(results))
    if not results["ok"]:
        raise SystemExit(1)


def markdown(results: dict) -> str:
    load, crash = results["load"], results["crash"]
    rss = "; ".join(f"{role} {r['first_quarter']} → {r['last_quarter']} MiB (max {r['max']})"
                    for role, r in load["rss_mib"].items())
    once = crash["exactly_once"]
    kills = ", ".join(f"{what} ×{count}" for what, count in crash["kills"].items())
    return "\n".join([
        f"Load: {load['clients']} concurrent clients for {load['seconds']} s through a real "
        "`hilo serve` with a real `hilo worker`, fake model at 0 ms:",
        "",
        "| turns | turns/s | errors | p50 | p99 | backlog drained after the end |",
        "|---|---|---|---|---|---|",
        f"| {load['turns']} | {load['turns_per_s']} | {load['errors']} | {load['p50_ms']} ms | "
        f"{load['p99_ms']} ms | {load['drained_after_s']} s |",
        "",
        f"RSS, median of the first and the last quarter of the run: {rss}.",
        f"Every acknowledged turn stored once and distilled once: "
        f"{'yes' if load['exactly_once']['ok'] else 'NO'}.",
        "",
        f"Crash: `kill -9` under the same load at seeded random moments (seed {crash['seed']}), "
        f"{crash['rounds']} rounds ({kills}), each restarted:",
        "",
        "| acknowledged | stored | lost | duplicated | not distilled exactly once | "
        "requests failed during faults | drained after the last restart |",
        "|---|---|---|---|---|---|---|",
        f"| {once['acknowledged']} | {once['stored']} | {len(once['lost'])} | "
        f"{len(once['duplicated'])} | {len(once['not_distilled_once'])} | "
        f"{crash['failed_requests_during_faults']} | {crash['drained_after_restart_s']} s |",
    ])


if __name__ == "__main__":
    main()
