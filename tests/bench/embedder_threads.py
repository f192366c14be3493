"""Embedder threads benchmark: chat turns through `hilo serve` while `hilo worker` embeds a
backlog, both with the local embedder (all-MiniLM-L6-v2 in each process).

    python -m tests.bench.embedder_threads [--turns 40] [--backlog 4000] [--quick] [--json]

For each thread setting: a fresh data directory holding `--backlog` events (and half as
many facts and cards, none embedded), `hilo serve` against the fake model server, and
`POST /api/chat` turns (not streamed; each embeds the question with the local model,
builds the context and stores the turn), first with no worker running (idle), then
with `hilo worker` running and embedding the backlog (busy: every turn's handoff also
enqueues an embed job of up to 512 owners). Reported: turn p50/p99 idle and busy, and
how fast the worker embedded meanwhile.

Settings: the defaults (`[embedder] threads` = 0: half the cores, OpenMP threads that
sleep when idle; `[queue] worker_nice` = 10: the worker yields the CPU to turns); the
same without the worker niced; and every core with OpenMP threads that spin when idle,
not niced (the worst case of torch's own pool, which uses every core and spins).

Target: busy p50 <= 2x idle p50 with the defaults.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.datadir import DataDir
from app.db import connect_readonly
from tests.bench.context import (
    USER,
    TextMaker,
    free_port,
    load_memory,
    process,
    vm_hwm_mib,
    wait_until_up,
)
from tests.bench.report import REPO_ROOT, emit, median, parser, percentile

SETTINGS = {
    "defaults: threads = 0 (half the cores, passive OpenMP), worker_nice = 10": {},
    "threads = 0, worker_nice = 0 (the worker not niced)": {"HILO_QUEUE_WORKER_NICE": "0"},
    "every core, OMP_WAIT_POLICY=ACTIVE (OpenMP spinning), worker_nice = 0": {
        "HILO_EMBEDDER_THREADS": str(os.cpu_count() or 1), "OMP_WAIT_POLICY": "ACTIVE",
        "HILO_QUEUE_WORKER_NICE": "0"},
}


def vectors_stored(data_dir: Path) -> int:
    con = connect_readonly(DataDir(data_dir).memory_db)
    try:
        return con.execute("SELECT count(*) FROM embeddings WHERE vector IS NOT NULL").fetchone()[0]
    finally:
        con.close()


def turn_ms(client: httpx.Client, url: str, question: str, session: str) -> float:
    started = time.perf_counter()
    response = client.post(f"{url}/api/chat", json={
        "model": "gemma3:4b", "stream": False,
        "messages": [{"role": "user", "content": question}]},
        headers={"X-Hilo-User": USER, "X-Hilo-Session": session})
    response.raise_for_status()
    return (time.perf_counter() - started) * 1000


def run_setting(env_extra: dict[str, str], turns: int, backlog: int, text: TextMaker,
                tmp: Path) -> dict:
    data_dir = tmp / f"d{len(list(tmp.iterdir()))}"
    load_memory(data_dir, backlog, vectors=False, text=text)
    fake_port, hilo_port = free_port(), free_port()
    with process([sys.executable, "-m", "tests.fake_ollama", "--port", str(fake_port)]) as fake:
        fake_url = fake.stdout.readline().strip()
        env = {"HILO_LLM_URL": fake_url, "HILO_LOGGING_LEVEL": "warning",
               "HILO_EMBEDDER_KIND": "local", "PYTHONPATH": str(REPO_ROOT), **env_extra}
        where = ["--data-dir", str(data_dir)]
        with process([sys.executable, "-m", "app.cli", "serve", *where, "--port", str(hilo_port)],
                     env) as serve:
            url = f"http://127.0.0.1:{hilo_port}"
            wait_until_up(url, serve)
            asked = text.sentences(3 * turns + 10, 5, 25)
            with httpx.Client(timeout=120) as client:
                for i in range(5):  # loads the model in the server
                    turn_ms(client, url, asked[i], "warm")
                idle = [turn_ms(client, url, q, f"idle-{i // 10}")
                        for i, q in enumerate(asked[10:10 + turns])]
                with process([sys.executable, "-m", "app.cli", "worker", *where], env):
                    before = vectors_stored(data_dir)
                    deadline = time.monotonic() + 120
                    while vectors_stored(data_dir) == before and time.monotonic() < deadline:
                        turn_ms(client, url, asked[5], "kick")  # a handoff enqueues embed
                        time.sleep(1)
                    started, first = time.monotonic(), vectors_stored(data_dir)
                    busy = [turn_ms(client, url, q, f"busy-{i // 10}")
                            for i, q in enumerate(asked[10 + turns:10 + 2 * turns])]
                    embedded = vectors_stored(data_dir) - first
                    seconds = time.monotonic() - started
            rss = vm_hwm_mib(serve.pid)
    return {"idle_p50_ms": median(idle), "idle_p99_ms": percentile(idle, 99),
            "busy_p50_ms": median(busy), "busy_p99_ms": percentile(busy, 99),
            "busy_max_ms": max(busy), "ratio_p50": median(busy) / median(idle),
            "worker_texts_per_s": embedded / seconds, "serve_peak_rss_mib": rss}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--backlog", type=int, default=4000)
    args = p.parse_args(argv)
    turns = 15 if args.quick else args.turns
    text = TextMaker()
    results = {}
    with tempfile.TemporaryDirectory(prefix="hilo-bench-threads-") as tmp:
        for name, env in SETTINGS.items():
            results[name] = run_setting(env, turns, args.backlog, text, Path(tmp))
    default = next(iter(results.values()))
    verdict = {"busy p50 <= 2x idle p50 (defaults)": default["ratio_p50"] <= 2}
    lines = [f"{turns} turns idle, then {turns} while `hilo worker` embeds a backlog of "
             f"{args.backlog:,} events and {args.backlog:,} facts and cards; both processes "
             "with `[embedder] kind = \"local\"`; fake model server.", "",
             "| setting | idle p50 ms | p99 | busy p50 ms | p99 | max | busy/idle p50 | "
             "worker texts/s while busy | serve peak RSS |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['idle_p50_ms']:.0f} | {r['idle_p99_ms']:.0f} | "
                     f"{r['busy_p50_ms']:.0f} | {r['busy_p99_ms']:.0f} | {r['busy_max_ms']:.0f} | "
                     f"{r['ratio_p50']:.2f} | {r['worker_texts_per_s']:.0f} | "
                     f"{r['serve_peak_rss_mib']:.0f} MiB |")
    lines += ["", "### Targets", ""] + [f"- {'met' if ok else 'MISSED'}: {name}"
                                          for name, ok in verdict.items()]
    emit(args, "embedder_threads", {"settings": results, "verdict": verdict}, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
