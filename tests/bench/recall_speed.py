"""Recall's speed, this code beside another commit's, alternated in one run.

The fusion (events, the product's query) and `build_context` (the default budget) are
timed on every question of one LoCoMo conversation, with the local embedder's vectors
stored and the question's embedding made before the clock starts. Two child processes
hold the same conversation, one importing this work tree's code and one the other
commit's (`git archive` into a temporary folder); the driver has them time a pass over
the questions in turn, `--rounds` times each, so a loaded machine slows both alike and
the ratio of their medians holds; each is also timed in CPU time (the process's, all its
threads), which the load disturbs far less than the wall clock.

    python -m tests.bench.recall_speed [--against main] [--conversation conv-26]
                                       [--rounds 6] [--json] [--no-write]

The figures go into BENCHMARKS.md's recall_speed section (not with --no-write or --quick,
which runs 2 rounds), with the machine's load average before and after.

The child side runs as `python tests/bench/recall_speed.py --child ROOT ...` with the
code of ROOT first on the path: it uses only what both trees have (the LoCoMo bench's
loader and ingest, make_query, search, build_context).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Issue 42, on a quiet machine.
TARGETS_MS = {"fusion": 5.0, "context": 10.0}
# Each timed twice: the wall clock, and the process's CPU time (all its threads), which a
# loaded machine disturbs far less.
KINDS = ("fusion", "context", "fusion_cpu", "context_cpu")


def child(root: Path, data: Path, conversation: str) -> None:
    """Load one conversation with this root's code, then time a pass per "pass" line."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the server runs
    sys.path.insert(0, str(root))
    from datetime import timedelta

    from app.config import Config
    from app.db import Durability, connect_readonly
    from app.learn.embed import embed_pending
    from app.model.embedders import LOCAL_MODEL
    from app.model.token_count import TokenCounter
    from app.recall.fusion import search
    from app.recall.query import make_query
    from app.recall.state import Recall
    from app.turn.context import ContextRequest, build_context
    from app.writer import Writer
    from tests.bench import local_embedders
    from tests.bench.locomo import Form, ingest, load

    embedder = local_embedders.make(LOCAL_MODEL)
    conv = load(data, (conversation,))[0]
    config = Config()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.sqlite3"
        with Writer(path, Durability.NORMAL) as writer:
            ingest(writer, config, conv, Form("product"))
            while embed_pending(writer, embedder, limit=4096, batch_size=64):
                pass
        con = connect_readonly(path)
        questions = [q.text for q in conv.questions]
        vectors = [local_embedders.embed_question(embedder, q) for q in questions]
        recall = Recall()
        asked_at = conv.turns[-1].when + timedelta(minutes=1)
        print(json.dumps({"ready": len(questions)}), flush=True)
        for line in sys.stdin:
            if line.strip() != "pass":
                break
            timed: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for text, vector in zip(questions, vectors, strict=True):
                query = make_query(conv.sample_id, text, recall=recall, con=con, now=asked_at)
                query.vector, query.model = vector, embedder.model
                began, cpu = time.perf_counter(), time.process_time()
                search(con, conv.sample_id, query.text, "event", 10, query=query)
                timed["fusion"].append((time.perf_counter() - began) * 1000)
                timed["fusion_cpu"].append((time.process_time() - cpu) * 1000)
                query = make_query(conv.sample_id, text, recall=recall, con=con, now=asked_at)
                query.vector, query.model = vector, embedder.model
                began, cpu = time.perf_counter(), time.process_time()
                build_context(con, config, TokenCounter(), ContextRequest(
                    conv.sample_id, text, session_id="speed", window=[], query=query))
                timed["context"].append((time.perf_counter() - began) * 1000)
                timed["context_cpu"].append((time.process_time() - cpu) * 1000)
            print(json.dumps(timed), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
        return
    # Not at the top: the child runs this file with the other commit's tests/ on its path.
    from tests.bench.report import emit, load_average, parser, quiet, tree_of

    p = parser(__doc__.split("\n")[0])
    p.add_argument("--against", default="main", help="the commit to compare with")
    p.add_argument("--conversation", default="conv-26")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo10.json"))
    args = p.parse_args()
    if args.quick:
        args.rounds = min(args.rounds, 2)
    data = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    commit = subprocess.run(["git", "rev-parse", "--short=12", args.against], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.strip()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"this tree": REPO_ROOT, f"{args.against} ({commit})": tree_of(args.against,
                                                                              Path(tmp))}
        children = {}
        for name, root in roots.items():
            env = {**os.environ, "PYTHONPATH": str(root)}
            children[name] = subprocess.Popen(
                [sys.executable, str(Path(__file__)), "--child", str(root), str(data),
                 args.conversation], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True, env=env, cwd=root)
        for proc in children.values():
            json.loads(proc.stdout.readline())
        times: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in KINDS}
                                                     for name in roots}
        for _ in range(args.rounds):
            for name, proc in children.items():  # turns alternate: the same load for both
                proc.stdin.write("pass\n")
                proc.stdin.flush()
                passed = json.loads(proc.stdout.readline())
                for kind in KINDS:
                    times[name][kind].extend(passed[kind])
        for proc in children.values():
            proc.stdin.close()
            proc.wait(timeout=60)
    results = {name: {kind: round(statistics.median(v), 2) for kind, v in t.items()}
               for name, t in times.items()}
    mine, other = (results[n] for n in roots)
    results["ratio, this tree / other"] = {k: round(mine[k] / other[k], 3) for k in mine}
    results["questions x rounds"] = len(next(iter(times.values()))["fusion"])
    results["load average"] = {"before": load_before, "after": load_average()}
    results["quiet"] = quiet(load_before, results["load average"]["after"])
    emit(args, "recall_speed", results, markdown(results, args.conversation))


def markdown(results: dict, conversation: str) -> str:
    mine, other = (name for name in results if isinstance(results[name], dict)
                   and "fusion" in results[name] and not name.startswith("ratio"))
    ratio, load = results["ratio, this tree / other"], results["load average"]
    met = {kind: results[mine][kind] <= target for kind, target in TARGETS_MS.items()}
    return "\n".join([
        f"LoCoMo {conversation}, the local embedder's vectors, {results['questions x rounds']} "
        f"questions a side: this tree and {other} alternated pass by pass in one run. Load "
        f"average (1, 5, 15 min) {' / '.join(map(str, load['before']))} before, "
        f"{' / '.join(map(str, load['after']))} after (2 cores).",
        "",
        "| p50, ms | this tree | " + other + " | ratio |",
        "|---|---:|---:|---:|",
        f"| fusion (events, top 10) | {results[mine]['fusion']} | {results[other]['fusion']} "
        f"| {ratio['fusion']}× |",
        f"| `build_context` (default budget) | {results[mine]['context']} | "
        f"{results[other]['context']} | {ratio['context']}× |",
        f"| fusion, CPU time | {results[mine]['fusion_cpu']} | {results[other]['fusion_cpu']} "
        f"| {ratio['fusion_cpu']}× |",
        f"| `build_context`, CPU time | {results[mine]['context_cpu']} | "
        f"{results[other]['context_cpu']} | {ratio['context_cpu']}× |",
        "",
        "### Targets",
        "",
        *(f"- {('met' if met[kind] else 'MISSED') if results['quiet'] else 'not judged'}: "
          f"{name} p50 ≤ {TARGETS_MS[kind]:g} ms on a quiet machine (this tree: "
          f"{results[mine][kind]} ms{'' if results['quiet'] else '; the machine was loaded'})"
          for kind, name in (("fusion", "fusion"), ("context", "build_context"))),
    ])


if __name__ == "__main__":
    main()
