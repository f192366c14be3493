"""Hilo's own time per chat turn: time to first token through a real `hilo serve` on
loopback, against the fake Ollama server made instant (`--prompt-tps 100000
--generate-tps 10000`), so what is left is Hilo's time; beside it, the same
conversation sent to the model server directly (the memory-less client).

Each checkout named by `--tree NAME=PATH` gets its own `hilo serve` (that tree's code on
PYTHONPATH), all on one seeded memory each (tests/bench/localmodel.py's seed), and the
turns go interleaved: direct, then every tree, in an order that rotates every turn, so
load on the machine falls on all alike. Per target: the median, quartiles and mean of
the time to first token and of the whole reply, and the serve process's CPU time per
turn (all its threads, from /proc).

    python -m tests.bench.serve_turn [--tree before=../other-checkout --tree new=.] [--turns 30]
        [--rounds 2] [--warm 4] [--set HILO_EMBEDDER_KIND=local ...] [--json]
        [--py-spy NAME:OUT.json]

--py-spy NAME:OUT: `py-spy record` (1000 samples/s, threads apart; speedscope, or
collapsed stacks for OUT ending in .txt) of the named tree's serve process during the
measured turns only, CPU time only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.localmodel import MODEL, Setup, hilo_config, seed_memory, send_turn
from tests.bench.localmodel_script import TURNS
from tests.bench.soak import READY_TIMEOUT, answers_health, free_port, wait_started
from tests.fake_ollama import CpuSpeed, FakeOllama
from tests.workers.support import consumer_env, hilo_command

PY_SPY = os.environ.get("PY_SPY", "py-spy")  # $PY_SPY, else py-spy on PATH
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Serve:
    """`hilo serve` of one checkout, on its own data directory."""

    def __init__(self, name: str, tree: Path, fake: FakeOllama, root: Path,
                 settings: dict[str, str], probe: str = "") -> None:
        self.name, self.tree, self.port = name, tree.resolve(), free_port()
        config = hilo_config(root / name, fake)
        seed_memory(config)
        env = {**consumer_env(config), **settings}
        env["PYTHONPATH"] = str(self.tree)
        env["HILO_CONFIG"] = str(self.tree / "config.toml")
        self.log = root / f"{name}.log"
        command = hilo_command("serve", "--port", str(self.port))
        if probe:  # the probe's stopwatch around the turn's steps (tests/bench/turn_probe.py)
            env["TURN_PROBE_OUT"] = probe
            command = [sys.executable, str(Path(__file__).with_name("turn_probe.py")),
                       *command[1:]]
        self.process = subprocess.Popen(command,
                                        cwd=self.tree, env=env, stdout=self.log.open("wb"),
                                        stderr=subprocess.STDOUT)
        wait_started(self.process, lambda: answers_health(self.url), READY_TIMEOUT,
                     lambda: f"{name} did not start:\n{self.log.read_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def stats(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median_ms": round(1000 * q[1], 2), "p25_ms": round(1000 * q[0], 2),
            "p75_ms": round(1000 * q[2], 2), "mean_ms": round(1000 * statistics.fmean(values), 2),
            "n": len(values)}


def run(args: argparse.Namespace) -> dict:
    settings = dict(s.split("=", 1) for s in args.set)
    fake = FakeOllama(cpu=CpuSpeed(args.prompt_tps, args.generate_tps)).start()
    setup = Setup()
    root = Path(tempfile.mkdtemp(prefix="hilo-serve-turn-"))
    serves: list[Serve] = []
    spy = None
    try:
        setup.prepare(fake)
        probed, _, probe_out = args.probe.partition(":")
        for spec in args.tree:
            name, _, path = spec.partition("=")
            serves.append(Serve(name, Path(path), fake, root, settings,
                                probe_out + ".events" if name == probed else ""))
        client_times: list[tuple[float, float, float]] = []
        targets = [("direct", fake.url)] + [(s.name, s.url) for s in serves]
        ttft: dict[str, list[float]] = {name: [] for name, _ in targets}
        whole: dict[str, list[float]] = {name: [] for name, _ in targets}
        cpu = {s.name: 0.0 for s in serves}
        load_before = os.getloadavg()
        clients = {name: httpx.Client(timeout=600) for name, _ in targets}
        measured = 0
        for round_ in range(args.rounds):
            histories: dict[str, list[dict]] = {name: [] for name, _ in targets}
            for index in range(args.warm + args.turns):
                turn = TURNS[index % len(TURNS)]
                counted = index >= args.warm
                if counted and spy is None and args.py_spy:
                    spy_name, _, out = args.py_spy.partition(":")
                    pid = next(s.process.pid for s in serves if s.name == spy_name)
                    spy = subprocess.Popen([PY_SPY, "record", "--pid", str(pid), "--rate", "1000",
                                            "--format", "raw" if out.endswith(".txt")
                                            else "speedscope", "--threads",
                                            "--output", out, *(["--native"] if args.native else [])],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                shift = measured % len(targets)
                for name, url in targets[shift:] + targets[:shift]:
                    history = histories[name]
                    # Each round its own conversation: the same words again would be
                    # a resend of the first round's, which stores nothing.
                    said = turn.user if not round_ else f"(take {round_ + 1}) {turn.user}"
                    history.append({"role": "user", "content": said})
                    serve = next((s for s in serves if s.name == name), None)
                    before = serve.cpu_seconds() if serve else 0.0
                    sent, first, ended, reply = send_turn(clients[name], url, history)
                    history.append({"role": "assistant", "content": reply})
                    if counted:
                        if name == probed:
                            client_times.append((sent, sent + first, ended))
                        ttft[name].append(first)
                        whole[name].append(ended - sent)
                        if serve:
                            time.sleep(args.settle)  # what the turn does after its reply
                            cpu[name] += serve.cpu_seconds() - before
                    time.sleep(args.think)
                if counted:
                    measured += 1
        for client in clients.values():
            client.close()
        if probed:
            Path(probe_out + ".client").write_text(json.dumps(client_times))
        results = {
            "settings": settings, "turns": measured,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "ttft": {name: stats(v) for name, v in ttft.items()},
            "whole_reply": {name: stats(v) for name, v in whole.items()},
            "serve_cpu_ms_per_turn": {name: round(1000 * c / measured, 2)
                                      for name, c in cpu.items()},
        }
        direct = results["ttft"]["direct"]["median_ms"]
        results["added_ms_median"] = {name: round(results["ttft"][name]["median_ms"] - direct, 2)
                                      for name in cpu}
        return results
    finally:
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its profile and exits
            spy.wait(timeout=60)
        for serve in serves:
            serve.stop()
        if args.probe and Path(args.probe.partition(":")[2] + ".client").exists():
            print(breakdown(args.probe.partition(":")[2]))
        fake.stop()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def breakdown(out: str) -> str:
    """Per step of the probed turns (tests/bench/turn_probe.py): the median of when it
    first started, from the client's send, and of its time summed over the turn (ms)."""
    events = [json.loads(line) for line in Path(out + ".events").read_text().splitlines()]
    turns = json.loads(Path(out + ".client").read_text())
    starts: dict[str, list[float]] = {}
    spent: dict[str, list[float]] = {}
    for index, (sent, first, ended) in enumerate(turns):
        until = turns[index + 1][0] if index + 1 < len(turns) else ended + 1.0
        seen: dict[str, tuple[float, float]] = {}
        for e in events:
            if sent <= e["start"] < until:
                at, total = seen.get(e["name"], (e["start"], 0.0))
                seen[e["name"]] = (min(at, e["start"]), total + e["end"] - e["start"])
        seen["client.first_token"] = (first, 0.0)
        seen["client.reply_ended"] = (ended, 0.0)
        for name, (at, total) in seen.items():
            starts.setdefault(name, []).append(1000 * (at - sent))
            spent.setdefault(name, []).append(1000 * total)
    lines = [f"{len(turns)} turns; ms from the client's send (median): step, starts at, "
             "time in it (summed over the turn), turns with it"]
    for name in sorted(starts, key=lambda n: statistics.median(starts[n])):
        lines.append(f"  {name:<24} {statistics.median(starts[name]):8.2f} "
                     f"{statistics.median(spent[name]):8.2f}  {len(starts[name])}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tests.bench.serve_turn", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--turns", type=int, default=30, help="measured turns per round")
    p.add_argument("--rounds", type=int, default=1, help="conversations, each from the start")
    p.add_argument("--warm", type=int, default=4, help="turns not counted at each round's start")
    p.add_argument("--think", type=float, default=0.2, help="seconds between requests")
    p.add_argument("--settle", type=float, default=0.05,
                   help="seconds after a reply before the serve's CPU time is read")
    p.add_argument("--prompt-tps", type=float, default=100000.0)
    p.add_argument("--generate-tps", type=float, default=10000.0)
    p.add_argument("--set", action="append", default=[], metavar="HILO_KEY=value")
    p.add_argument("--py-spy", default="", metavar="NAME:OUT.json")
    p.add_argument("--probe", default="", metavar="NAME:OUT",
                   help="time the named tree's turn steps (tests/bench/turn_probe.py)")
    p.add_argument("--native", action="store_true", help="py-spy --native")
    p.add_argument("--keep", action="store_true", help="keep the data directories and logs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if not args.tree:
        args.tree = ["this=."]
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{results['turns']} turns, settings {results['settings']}, load "
          f"{results['load_before']} -> {results['load_after']}, model {MODEL} (fake, instant)")
    for name, s in results["ttft"].items():
        w = results["whole_reply"][name]
        extra = ""
        if name in results["serve_cpu_ms_per_turn"]:
            extra = (f"  added {results['added_ms_median'][name]:6.2f} ms  serve CPU "
                     f"{results['serve_cpu_ms_per_turn'][name]:6.2f} ms/turn")
        print(f"{name:>8}: TTFT median {s['median_ms']:6.2f} ms (p25 {s['p25_ms']:6.2f}, p75 "
              f"{s['p75_ms']:6.2f}, mean {s['mean_ms']:6.2f})  whole {w['median_ms']:6.2f} ms"
              + extra)


if __name__ == "__main__":
    main()
