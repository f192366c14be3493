"""A huge message through `hilo serve`: the seconds from sending one chat message of
plain words to its whole answer, by size, on a fresh memory, with the fake model server
answering at once (what is left is Hilo's time, and the relay of the message itself).

Each checkout — this one, and each named by `--tree NAME=PATH` — runs in a process of
its own (its code first on the path), the sizes taken in turn, checkouts alternating.
What a message costs should follow what Hilo keeps of it (`[memory] max_message_chars`),
not its size: Hilo still relays it whole to the model, which is the part that grows.

    python -m tests.bench.huge_message [--tree NAME=PATH ...] [--sizes 1,4,30] [--json]

`--quick` sends 1 MB only, to this checkout, and writes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.report import REPO_ROOT, emit, parser

# Runs in the checkout measured: only what every checkout's tests hold (a fake model
# server, `hilo serve` in a thread), so an older tree is measured by its own code.
DRIVER = r"""
import json, sys, tempfile, time
from pathlib import Path
import httpx
from app.config import load_config
from app.datadir import DataDir
from tests.api.support import HiloServer
from tests.fake_ollama import FakeOllama

RESULT = "result: "  # the log may print here too
fake = FakeOllama().start()
root = Path(tempfile.mkdtemp(prefix="hilo-bench-huge-"))
config = load_config(path=Path("config.toml"), env={}, data_dir=root / "data").replace(
    llm={"url": fake.url}, embedder={"kind": "none"}, queue={"chat_idle_seconds": 0.0})
DataDir.of(config).init()
server = HiloServer(config, fake).start()
client = httpx.Client(base_url=server.url, timeout=3600)

def send(text):
    return client.post("/api/chat", json={"model": "gemma3:4b", "stream": False,
                                          "messages": [{"role": "user", "content": text}]})

send("hello")  # the first turn builds what every later one reuses
for line in sys.stdin:
    chars = int(line)
    text = ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]
    started = time.perf_counter()
    status = send(text).status_code
    print(RESULT + json.dumps({"chars": chars, "status": status,
                               "seconds": round(time.perf_counter() - started, 2)}), flush=True)
server.stop()
fake.stop()
"""
MB = 1_000_000
RESULT = "result: "


class Checkout:
    """One checkout's driver process, fed a size at a time."""

    def __init__(self, name: str, tree: Path) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-c", DRIVER], cwd=tree, text=True, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={"PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
                 "PATH": "/usr/bin:/bin"})

    def send(self, chars: int) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{chars}\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(RESULT):
                return json.loads(line.removeprefix(RESULT))
        raise RuntimeError(f"{self.name}'s hilo serve stopped answering")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def markdown(results: dict) -> str:
    names = list(results["seconds"])
    lines = ["Seconds from sending one chat message of plain words to its whole answer "
             "through `hilo serve`, on a fresh memory, the fake model server answering at "
             "once; each checkout in its own process, sizes in turn, checkouts alternating.",
             "", "| message | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for size in results["sizes_mb"]:
        cells = [f"{results['seconds'][name][str(size)]:.2f} s" for name in names]
        lines.append(f"| {size} MB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--sizes", default="1,4,30", help="message sizes in MB")
    args = p.parse_args()
    sizes = [1] if args.quick else [int(s) for s in args.sizes.split(",")]
    trees = {"this checkout": REPO_ROOT}
    if not args.quick:
        trees.update({name: Path(path).resolve() for name, _, path in
                      (tree.partition("=") for tree in args.tree)})
    checkouts = [Checkout(name, tree) for name, tree in trees.items()]
    seconds: dict[str, dict[str, float]] = {c.name: {} for c in checkouts}
    try:
        for turn, size in enumerate(sizes):
            order = checkouts[turn % len(checkouts):] + checkouts[:turn % len(checkouts)]
            for checkout in order:
                answer = checkout.send(size * MB)
                if answer["status"] != 200:
                    raise RuntimeError(f"{checkout.name}: {size} MB answered {answer['status']}")
                seconds[checkout.name][str(size)] = answer["seconds"]
    finally:
        for checkout in checkouts:
            checkout.close()
    results = {"sizes_mb": sizes, "seconds": seconds}
    emit(args, "huge_message", results, markdown(results))


if __name__ == "__main__":
    main()
