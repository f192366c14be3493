"""Start-up benchmark: whole `hilo` commands as processes, beside `python -c pass`.

    python -m tests.bench.startup [--runs 15] [--baseline CHECKOUT] [--quick] [--json]

Each command runs as a fresh process (`python -m app.cli ...`, what the `hilo` script
runs), in turn with the others so drift hits all alike; the figures are the median wall
time from start to exit and the median CPU time (user + system, from the kernel's
accounting of the finished child: on a busy machine it moves far less than wall time),
each command having run once before, so its bytecode is cached as an installed one's is.
`--baseline` times the same `hilo` commands from another checkout too. The data
directory is a fresh `hilo init` with `[embedder] kind = "none"`, so no command reaches a
model server, and six jobs a front-end handed off waiting in the queue (the worker
stopped), for `queue status` to read. Also: which heavy libraries each command imported
(from `-X importtime`).

What a user pays: `python -m app.cli` is what the `hilo` script runs (`app.cli:run_and_exit`).
In a development install (`pip install -e`) every process, `python -c pass` too, first
loads the editable install's import finder, which a wheel does not have; `hilo` needs
most of what it loads (pathlib, re) anyway, so a wheel's `hilo` takes only a little
less, while its `python -c pass` takes markedly less: compare the whole figures with
the target, not the difference over `python -c pass`.

Target: a command that touches no vectors <= 100 ms (`hilo --version`, `hilo --help`,
`hilo queue status`; `hilo memory search` embeds its query when an embedder is
configured, so it is timed but not held to it).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.report import REPO_ROOT, emit, median, parser, percentile

TARGET_MS = 100.0
# What a front-end leaves in the queue: five turns to learn from and an ended session.
HAND_OFF = ("import sys; from app.config import load_config; "
            "from workers.handoff import queue_handoff; "
            "handoff = queue_handoff(load_config(data_dir=sys.argv[1])); "
            "[handoff.after_reply('u', f's{i}', [i]) for i in range(5)]; "
            "handoff.session_ended('u', 's0')")
TOUCHES_VECTORS = ("hilo memory search",)
HEAVY = ("numpy", "rich", "torch", "faiss", "huey", "redis", "fastapi", "httpx", "asyncio")


def commands(data_dir: Path, checkout: Path, label: str = "") -> dict[str, tuple[list[str], Path]]:
    hilo = [sys.executable, "-m", "app.cli"]
    where = ["--data-dir", str(data_dir)]
    return {
        f"hilo --version{label}": ([*hilo, "--version"], checkout),
        f"hilo --help{label}": ([*hilo, "--help"], checkout),
        f"hilo memory search x{label}": ([*hilo, "memory", "search", "x", *where], checkout),
        f"hilo queue status{label}": ([*hilo, "queue", "status", *where], checkout),
    }


def checkout_env(env: dict[str, str], checkout: Path) -> dict[str, str]:
    """The environment to run that checkout's `hilo` with its own config.toml."""
    return {**env, "PYTHONPATH": str(checkout), "HILO_CONFIG": str(checkout / "config.toml")}


def run_ms(args: list[str], checkout: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one run of the command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(args, cwd=checkout, env=checkout_env(env, checkout),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def imported_modules(args: list[str], cwd: Path, env: dict[str, str]) -> set[str]:
    """The modules a run of the command imports (from `python -X importtime`)."""
    done = subprocess.run([args[0], "-X", "importtime", *args[1:]], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loaded = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:"):
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit() and int(cumulative) > 200:  # a module hidden from an import shows as ~10 us
                loaded.add(name.strip())
    return loaded


def heavy_imports(args: list[str], checkout: Path, env: dict[str, str]) -> list[str]:
    loaded = imported_modules(args, checkout, checkout_env(env, checkout))
    return [name for name in HEAVY if name in loaded]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--baseline", type=Path, help="another checkout whose hilo to time too")
    args = p.parse_args(argv)
    runs = 5 if args.quick else args.runs
    with tempfile.TemporaryDirectory(prefix="hilo-bench-startup-") as tmp:
        env = {**os.environ, "HILO_EMBEDDER_KIND": "none"}
        # An installed hilo runs from cached bytecode: the warm-up run below writes it.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        checkouts = {"": REPO_ROOT}
        if args.baseline:
            checkouts[" (baseline)"] = args.baseline.resolve()
        timed = {"python -c pass": ([sys.executable, "-c", "pass"], REPO_ROOT)}
        for label, checkout in checkouts.items():
            data_dir = Path(tmp) / f"data{len(timed)}"  # each checkout migrates its own
            subprocess.run([sys.executable, "-m", "app.cli", "init", "--data-dir", str(data_dir)],
                           cwd=checkout, env=checkout_env(env, checkout),
                           stdout=subprocess.DEVNULL, check=True)
            subprocess.run([sys.executable, "-c", HAND_OFF, str(data_dir)], cwd=checkout,
                           env=checkout_env(env, checkout), check=True)
            timed.update(commands(data_dir, checkout, label))
        walls: dict[str, list[float]] = {name: [] for name in timed}
        cpus: dict[str, list[float]] = {name: [] for name in timed}
        for command, checkout in timed.values():  # warm the page cache
            run_ms(command, checkout, env)
        for _ in range(runs):
            for name, (command, checkout) in timed.items():
                wall, cpu = run_ms(command, checkout, env)
                walls[name].append(wall)
                cpus[name].append(cpu)
        loaded = {name: heavy_imports(command, checkout, env)
                  for name, (command, checkout) in timed.items()}
    python_wall, python_cpu = median(walls["python -c pass"]), median(cpus["python -c pass"])
    results = {name: {"wall_p50_ms": median(walls[name]), "wall_p90_ms": percentile(walls[name], 90),
                      "cpu_p50_ms": median(cpus[name]),
                      "wall_over_python_ms": median(walls[name]) - python_wall,
                      "cpu_over_python_ms": median(cpus[name]) - python_cpu,
                      "heavy_imports": loaded[name]}
               for name in timed}
    verdict = {f"{name} <= {TARGET_MS:.0f} ms (wall)": r["wall_p50_ms"] <= TARGET_MS
               for name, r in results.items() if name.startswith("hilo")
               and "baseline" not in name and not name.startswith(TOUCHES_VECTORS)}
    lines = [f"Whole processes, median of {runs} runs taken in turn; fresh data directory, "
             "`[embedder] kind = \"none\"`. CPU = user + system time of the process.", "",
             "| command | wall p50 ms | wall p90 ms | CPU p50 ms | wall over `python -c pass` | "
             "CPU over `python -c pass` | heavy libraries imported |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, r in results.items():
        lines.append(f"| `{name}` | {r['wall_p50_ms']:.0f} | {r['wall_p90_ms']:.0f} | "
                     f"{r['cpu_p50_ms']:.0f} | {r['wall_over_python_ms']:.0f} | "
                     f"{r['cpu_over_python_ms']:.0f} | {', '.join(r['heavy_imports']) or '-'} |")
    lines += ["", "### Targets", ""] + [f"- {'met' if ok else 'MISSED'}: {name}"
                                          for name, ok in verdict.items()]
    emit(args, "startup", {"runs": runs, "commands": results, "verdict": verdict},
         "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
