"""Shared plumbing for benchmarks: the machine, peak RSS, and BENCHMARKS.md sections.

Each benchmark owns one section of BENCHMARKS.md (between its markers) and rewrites it
on every full run, with the command and the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import apsw

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS_MD = REPO_ROOT / "BENCHMARKS.md"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a smaller run, under a minute")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    return p


def peak_rss_mib() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, SQLite {apsw.sqlite_lib_version()}, "
            f"APSW {apsw.apsw_version()}")


def load_average() -> tuple[float, float, float]:
    """The machine's load average over 1, 5 and 15 minutes: a figure's context."""
    return tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[return-value]


# A 1-minute load average above this (on 2 cores) is no quiet machine: a target set for
# one is then reported as not judged.
QUIET_LOAD = 1.5


def quiet(*loads: tuple[float, float, float]) -> bool:
    """Whether the machine was quiet at each of these load readings (load_average)."""
    return all(load[0] <= QUIET_LOAD for load in loads)


def tree_of(ref: str, into: Path) -> Path:
    """The files of commit `ref` (`git archive`), written into a folder: another commit's
    code, run beside this tree's."""
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", ref], cwd=REPO_ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def command_line() -> str:
    """The command that ran this bench, as `python -m tests.bench.NAME ARGS`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    module = spec.name if spec is not None else Path(sys.argv[0]).stem
    return " ".join(["python -m", module.removesuffix(".__main__"), *sys.argv[1:]])


def write_section(name: str, body: str) -> None:
    """Replace this benchmark's section of BENCHMARKS.md (or append it)."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (f"{start}\n## {name}\n\nCommand: `{command_line()}`  \n"
               f"Machine: {machine()}  \nRun: {stamp}\n\n{body.strip()}\n{end}")
    text = BENCHMARKS_MD.read_text(encoding="utf-8") if BENCHMARKS_MD.exists() else (
        "# Benchmarks\n\nEach section is rewritten by the benchmark named in it "
        "(`python -m tests.bench.<name>`); see docs/benchmarks.md.\n")
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + section + after
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    BENCHMARKS_MD.write_text(text, encoding="utf-8")


def emit(args: argparse.Namespace, name: str, results: dict, markdown: str) -> None:
    """Print results (JSON or markdown) and, unless told not to, record them."""
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    else:
        print(markdown)
    if not args.no_write and not args.quick:
        write_section(name, markdown)


HELD_OUT_LOG = REPO_ROOT / "tests" / "bench" / "heldout_runs.jsonl"


def _commit() -> str:
    """The commit measured, "+changes" when the work tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def record_held_out(bench: str, results: dict) -> dict:
    """Append this run's held-out figures to tests/bench/heldout_runs.jsonl (every
    held-out run goes on the record, whatever else the run writes); returns how many
    runs of this bench the log holds now, with this one's date and commit."""
    entry = {"bench": bench, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
             "commit": _commit(), "command": command_line(), "splits": {}}
    for name, split in results["splits"].items():
        if split.get("role") != "held-out":
            continue
        contexts, fusion = split["contexts"], split["methods"]["fusion"]["overall"]
        entry["splits"][name] = {
            "questions": split["questions"],
            "context recall": contexts["context"]["overall"]["context recall"],
            "found, not told": contexts["context"].get("found_not_told"),
            **{f"context recall, {n.split(', ', 1)[1]}": c["overall"]["context recall"]
               for n, c in contexts.items() if n.startswith("context, ")},
            "fusion R@2": fusion["recall@2"], "fusion R@10": fusion["recall@10"]}
    with HELD_OUT_LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    count = sum(1 for line in HELD_OUT_LOG.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("bench") == bench)
    return {"count": count, "date": entry["date"], "commit": entry["commit"]}
