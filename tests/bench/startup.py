"""Start-up benchmark: whole `hilo` commands as processes, beside `python -c pass`.

    python -m tests.bench.startup [--runs 15] [--quick] [--json] [--no-write]

Each command runs as a fresh process (`python -m app.cli ...`, what the `hilo` script
runs), in turn with the others so drift hits all alike; the figure is the median wall
time from start to exit. The data directory is a fresh `hilo init` with
`[embedder] kind = "none"`, so no command reaches a model server. Also: which heavy
libraries each command imported (from `-X importtime`).

Target: a command that touches no vectors <= 100 ms.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.report import REPO_ROOT, emit, median, parser, percentile

TARGET_MS = 100.0
HEAVY = ("numpy", "rich", "torch", "faiss", "huey", "fastapi", "httpx")


def commands(data_dir: Path) -> dict[str, list[str]]:
    hilo = [sys.executable, "-m", "app.cli"]
    where = ["--data-dir", str(data_dir)]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "hilo --help": [*hilo, "--help"],
        "hilo memory search x": [*hilo, "memory", "search", "x", *where],
        "hilo queue status": [*hilo, "queue", "status", *where],
    }


def wall_ms(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def heavy_imports(args: list[str], env: dict[str, str]) -> list[str]:
    done = subprocess.run([args[0], "-X", "importtime", *args[1:]], cwd=REPO_ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
    return [name for name in HEAVY if name in loaded]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args(argv)
    runs = 5 if args.quick else args.runs
    with tempfile.TemporaryDirectory(prefix="hilo-bench-startup-") as tmp:
        env = {**os.environ, "HILO_EMBEDDER_KIND": "none", "HILO_CONFIG": str(REPO_ROOT / "config.toml"),
               "PYTHONPATH": str(REPO_ROOT)}
        subprocess.run([sys.executable, "-m", "app.cli", "init", "--data-dir", tmp], cwd=REPO_ROOT,
                       env=env, stdout=subprocess.DEVNULL, check=True)
        timed = commands(Path(tmp))
        samples: dict[str, list[float]] = {name: [] for name in timed}
        for name, command in timed.items():  # warm the page cache
            wall_ms(command, env)
        for _ in range(runs):
            for name, command in timed.items():
                samples[name].append(wall_ms(command, env))
        loaded = {name: heavy_imports(command, env) for name, command in timed.items()}
    baseline = median(samples["python -c pass"])
    results = {name: {"p50_ms": median(s), "max_ms": max(s), "p90_ms": percentile(s, 90),
                      "over_python_ms": median(s) - baseline, "heavy_imports": loaded[name]}
               for name, s in samples.items()}
    verdict = {f"{name} <= {TARGET_MS:.0f} ms": r["p50_ms"] <= TARGET_MS
               for name, r in results.items() if name.startswith("hilo")}
    lines = [f"Wall time of whole processes, median of {runs} runs taken in turn; fresh "
             "data directory, `[embedder] kind = \"none\"`.", "",
             "| command | p50 ms | p90 ms | over `python -c pass` ms | heavy libraries imported |",
             "|---|---:|---:|---:|---|"]
    for name, r in results.items():
        lines.append(f"| `{name}` | {r['p50_ms']:.0f} | {r['p90_ms']:.0f} | "
                     f"{r['over_python_ms']:.0f} | {', '.join(r['heavy_imports']) or '-'} |")
    lines += ["", "### Targets", ""] + [f"- {'met' if ok else 'MISSED'}: {name}"
                                          for name, ok in verdict.items()]
    emit(args, "startup", {"runs": runs, "commands": results, "verdict": verdict},
         "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
