"""Workers benchmark: the real consumer process against the fake model server.

- reply → fact visible: a turn is stored (synchronous=FULL, as the front-end does) and
  handed off; the time until its fact can be read from the database. Turns arrive with
  a pause between them, so the worker is idle and polling, as in a real conversation.
- jobs/s: distill jobs queued ahead, drained by 1 and 4 thread workers at 0 and 50 ms
  of model latency (from the first to the last event marked distilled).
- peak RSS of the worker process (VmHWM).

    python -m tests.bench.workers [--quick] [--json]
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import time
from pathlib import Path

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.events import insert_event, prepare_event
from app.timeutil import parse_rfc3339
from app.writer import Writer
from tests.bench.report import emit, median, parser, percentile
from tests.fake_ollama import FakeOllama
from tests.workers.support import REPO_ROOT, consumer_env, handoff, hilo_command, scripted_model
from workers.queue import configure

READY_TIMEOUT = 30.0
FACT_TIMEOUT = 10.0


class Worker:
    def __init__(self, config: Config, workers: int, log: Path) -> None:
        env = consumer_env(config.replace(queue={"workers": workers}))
        self.log = log
        self.process = subprocess.Popen(hilo_command("worker"), cwd=REPO_ROOT,
                                        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT
        while "worker.started" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"the worker did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.02)

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def fresh_config(root: Path, name: str, fake: FakeOllama) -> Config:
    config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / name).replace(
        llm={"url": fake.url}, logging={"level": "warning", "format": "json"})
    DataDir.of(config).init()
    configure(config)
    return config


def store_turn(writer: Writer, config: Config, session: str, n: int) -> list[int]:
    events = (prepare_event(config, "bench", session, "user", f"Turn {n}: remember code alpha{n}"),
              prepare_event(config, "bench", session, "assistant", f"Noted, turn {n}."))
    return writer.submit(lambda con: [insert_event(con, e).id for e in events])


def fact_visible(config: Config, n: int) -> bool:
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        return con.execute("SELECT 1 FROM facts WHERE user_id = 'bench' AND key = ?",
                           (f"item{n}",)).fetchone() is not None
    finally:
        con.close()


def reply_to_fact(root: Path, fake: FakeOllama, turns: int) -> dict:
    config = fresh_config(root, "latency", fake)
    worker = Worker(config, config.queue.workers, root / "latency.log")
    rng = random.Random(7)
    latencies = []
    try:
        with Writer(DataDir.of(config).memory_db, Durability.FULL) as writer:
            for n in range(turns):
                time.sleep(rng.uniform(0.2, 0.8))  # the user reads and types; the worker idles
                ids = store_turn(writer, config, "chat", n)
                began = time.perf_counter()
                handoff.after_reply("bench", "chat", ids)
                while not fact_visible(config, n):
                    if time.perf_counter() - began > FACT_TIMEOUT:
                        raise RuntimeError(f"turn {n}: no fact after {FACT_TIMEOUT} s")
                    time.sleep(0.002)
                latencies.append((time.perf_counter() - began) * 1000)
        rss = worker.peak_rss_mib()
    finally:
        worker.stop()
    return {"turns": turns, "workers": config.queue.workers,
            "poll_max_delay_s": config.queue.poll_max_delay,
            "p50_ms": round(median(latencies), 1), "p95_ms": round(percentile(latencies, 95), 1),
            "max_ms": round(max(latencies), 1), "peak_rss_mib": round(rss, 1)}


def throughput(root: Path, fake: FakeOllama, workers: int, latency_ms: int, jobs: int) -> dict:
    config = fresh_config(root, f"jobs-{workers}w-{latency_ms}ms", fake)
    fake.latency = latency_ms / 1000
    with Writer(DataDir.of(config).memory_db, Durability.NORMAL) as writer:
        for n in range(jobs):  # one turn per session: distill only, no compaction
            handoff.after_reply("bench", f"s{n}", store_turn(writer, config, f"s{n}", n))
    worker = Worker(config, workers, root / f"jobs-{workers}-{latency_ms}.log")
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        deadline = time.monotonic() + 60 + jobs * (latency_ms / 1000 + 0.05)
        while con.execute("SELECT count(*) FROM events WHERE role = 'user' AND distilled_at IS NULL"
                          ).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError("the jobs did not finish in time")
            time.sleep(0.05)
        first, last = con.execute("SELECT min(distilled_at), max(distilled_at) FROM events").fetchone()
        rss = worker.peak_rss_mib()
    finally:
        con.close()
        worker.stop()
        fake.latency = 0.0
    seconds = (parse_rfc3339(last) - parse_rfc3339(first)).total_seconds()
    return {"workers": workers, "model_latency_ms": latency_ms, "jobs": jobs,
            "jobs_per_s": round((jobs - 1) / seconds, 1) if seconds > 0 else float("inf"),
            "peak_rss_mib": round(rss, 1)}


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    quick = args.quick
    fake = FakeOllama().start()
    fake.responder = scripted_model
    results: dict = {"quick": quick}
    try:
        with tempfile.TemporaryDirectory(prefix="hilo-bench-workers-") as tmp:
            root = Path(tmp)
            results["reply_to_fact"] = reply_to_fact(root, fake, 20 if quick else 100)
            runs = []
            for latency_ms in (0, 50):
                for workers in (1, 4):
                    per_second = (80 if latency_ms == 0 else 15) * workers
                    jobs = per_second * (2 if quick else 8)
                    runs.append(throughput(root, fake, workers, latency_ms, max(jobs, 40)))
            results["throughput"] = runs
    finally:
        fake.stop()
    results["worker_peak_rss_mib"] = max([results["reply_to_fact"]["peak_rss_mib"]]
                                         + [r["peak_rss_mib"] for r in results["throughput"]])
    emit(args, "workers", results, markdown(results))


def markdown(results: dict) -> str:
    r = results["reply_to_fact"]
    lines = [
        f"Reply → fact visible, real consumer process ({r['workers']} thread workers, "
        f"poll_max_delay {r['poll_max_delay_s']} s), fake model at zero delay, {r['turns']} turns "
        "0.2–0.8 s apart:",
        "",
        "| p50 | p95 | max |",
        "|---|---|---|",
        f"| {r['p50_ms']} ms | {r['p95_ms']} ms | {r['max_ms']} ms |",
        "",
        "Distill jobs drained per second (queued ahead; first to last event marked distilled):",
        "",
        "| model latency | 1 worker | 4 workers |",
        "|---|---|---|",
    ]
    by = {(t["model_latency_ms"], t["workers"]): t for t in results["throughput"]}
    for latency in (0, 50):
        one, four = by[(latency, 1)], by[(latency, 4)]
        lines.append(f"| {latency} ms | {one['jobs_per_s']} jobs/s ({one['jobs']}) | "
                     f"{four['jobs_per_s']} jobs/s ({four['jobs']}) |")
    lines += ["", f"Worker peak RSS: {results['worker_peak_rss_mib']} MiB."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
