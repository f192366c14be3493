"""Issue 27: how the engine's time reading a turn through Hilo compares with a memory-less
client's as the model grows.

    python -m tests.bench.engine_sizes [--shape qwen2.5-0.5b --shape gemma3-4b ...]
        [--turns N] [--engine-flag=--swa-full ...] [--versus-flag=--swa-full ...]
        [--json] [--no-write]

Hilo's prompt is longer than a memory-less client's by what it carries (the profile, the
last session's diary and MEMORY.md in the system message; notes of recalled memory in the
turns they were added to), and a CPU engine reads each new token more slowly behind a
longer prompt: the attention over the cached tokens grows with them, the weights do not.
How much that costs depends on the model's size, and the full engine bench
(`python -m tests.bench.localmodel --engine llama.cpp`) cannot run a model the size of
the ones people chat with on two cores: its learning calls and uncapped replies would
take hours. So this bench:

1. records the capping client's conversation on the default small model, straight to
   the engine and through a real `hilo serve` + `hilo worker`, keeping every chat request
   the engine received (tests/bench/engine.py's runs, `--turns` of the script);
2. for each `--shape` (tests/bench/engine_model.py's REAL_SHAPES: random weights of that
   model's dimensions, MiniLM's vocabulary), starts two engines, one for each caller's
   requests, and replays the requests turn by turn, alternating between the two so that
   both meet the same machine. Before each turn, the engine's cache is given the turn's
   prompt up to the end of the previous reply. The turn is then sent whole, for one
   token, and the engine's own `timings` say how many tokens it read anew and in how
   long: the new message, and whatever Hilo added to the prompt with it.

It reports, over the steady turns (the last three quarters), the mean tokens read anew,
the mean time reading them, and the median time per new token, for each caller, and
their ratios. It leaves out what the full bench measures: Hilo's own time before the
engine (about 20 ms a turn, tests/bench/serve_turn.py), the learning calls sharing the
engine, how a real model's replies would change the conversation (the replayed replies
are the small random model's), and the previous reply itself: llama-server re-reads it
on every turn (its cache stops a token before what it generated; the full bench's
counts include it), for both callers alike, so it is primed here to compare the rest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.bench.engine import (
    CountingProxy,
    Engine,
    EngineRun,
    direct_run,
    hilo_run,
    llama_server,
    log,
    model_file,
)
from tests.bench.engine_model import REAL_SHAPES, shape_named
from tests.bench.localmodel_script import TURNS
from tests.bench.report import emit

DEFAULT_SHAPES = ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "gemma3-4b"]
RECORDING_SHAPE = "256x4"
CALLERS = ("client", "serve")  # the memory-less client, and Hilo's front-end
Lanes = dict[str, tuple[str, tuple[str, ...]]]  # lane: (whose requests, llama-server options)


@dataclass
class Turn:
    """One replayed turn: tokens the engine read anew, found cached, and its time on them."""

    turn: int
    new_tokens: int
    cached_tokens: int
    prompt_ms: float


def chat_requests(run: EngineRun) -> list[dict]:
    """The chat requests of one recorded run, in order (the worker's learning calls left out)."""
    return [call.request for call in run.chats]


def common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


class Replayer:
    """One engine replaying one caller's requests, turn by turn."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.client = httpx.Client(timeout=3600)
        self.previous: list[dict] | None = None

    def render(self, messages: list[dict]) -> str:
        response = self.client.post(f"{self.engine.url}/apply-template",
                                    json={"messages": messages})
        response.raise_for_status()
        return response.json()["prompt"]

    def complete(self, prompt: str, tokens: int) -> dict:
        response = self.client.post(f"{self.engine.url}/completion", json={
            "prompt": prompt, "n_predict": tokens, "cache_prompt": True})
        response.raise_for_status()
        return response.json()

    def turn(self, index: int, request: dict) -> Turn:
        """Prime the cache through the previous reply, then time the turn."""
        messages = request["messages"]
        prompt = self.render(messages)
        if self.previous is not None:
            # The previous request's prompt and its reply, as far as this one starts the
            # same way: what is left is this turn's own.
            reply = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
            held = self.render(self.previous + ([reply] if reply else []))
            self.complete(prompt[:common_prefix(prompt, held)], 0)
        self.previous = messages
        timings = self.complete(prompt, 1)["timings"]
        return Turn(index, int(timings["prompt_n"]), int(timings.get("cache_n") or 0),
                    round(float(timings["prompt_ms"]), 1))

    def close(self) -> None:
        self.client.close()


def replay(shape_name: str, recorded: dict[str, list[dict]], root: Path,
           lanes: Lanes) -> dict[str, list[Turn]]:
    """Each lane (a caller's requests, llama-server options) on its own engine of this
    shape, turn by turn, alternating between the lanes."""
    model = model_file(shape_named(shape_name))
    replayers = {}
    try:
        for lane, (_, flags) in lanes.items():
            logs = root / f"{shape_name}-{lane.replace(' ', '')}"
            logs.mkdir(parents=True, exist_ok=True)
            engine = Engine(llama_server(), model, logs, flags)
            engine.start()
            replayers[lane] = Replayer(engine)
        turns: dict[str, list[Turn]] = {lane: [] for lane in lanes}
        count = min(len(recorded[caller]) for caller, _ in lanes.values())
        for index in range(count):
            for lane, (caller, _) in lanes.items():
                turns[lane].append(replayers[lane].turn(index + 1, recorded[caller][index]))
            log(f"{shape_name}: turn {index + 1}/{count}")
        return turns
    finally:
        for replayer in replayers.values():
            replayer.close()
            replayer.engine.stop()


def lanes_for(flags: tuple[str, ...], versus: tuple[str, ...]) -> Lanes:
    """Each caller on an engine with `flags`; with `versus`, each also on one with those
    options added."""
    lanes = {caller: (caller, flags) for caller in CALLERS}
    if versus:
        lanes |= {versus_lane(caller, versus): (caller, flags + versus) for caller in CALLERS}
    return lanes


def versus_lane(caller: str, versus: tuple[str, ...]) -> str:
    return f"{caller} {' '.join(versus)}"


def versus_compare(turns: dict[str, list[Turn]], versus: tuple[str, ...]) -> dict[str, Any]:
    """Per caller, the engine with the `versus` options against the one without."""
    compared = {}
    for caller in CALLERS:
        without, with_ = summary(turns[caller]), summary(turns[versus_lane(caller, versus)])
        compared[caller] = {"without": without, "with": with_, **ratios(without, with_)}
    return compared


def summary(turns: list[Turn]) -> dict[str, float]:
    steady = turns[len(turns) // 4:]
    return {"new_tokens_mean": round(statistics.fmean(t.new_tokens for t in steady), 1),
            "cached_tokens_mean": round(statistics.fmean(t.cached_tokens for t in steady)),
            "prompt_ms_mean": round(statistics.fmean(t.prompt_ms for t in steady), 1),
            "ms_per_new_token_median": round(statistics.median(
                t.prompt_ms / t.new_tokens for t in steady if t.new_tokens), 2)}


def ratios(base: dict[str, float], other: dict[str, float]) -> dict[str, float]:
    """`other`'s summary over `base`'s: new tokens, time reading them, time a token."""
    return {"new_tokens_ratio": round(other["new_tokens_mean"] / base["new_tokens_mean"], 2),
            "prompt_time_ratio": round(other["prompt_ms_mean"] / base["prompt_ms_mean"], 2),
            "per_token_ratio": round(other["ms_per_new_token_median"]
                                     / base["ms_per_new_token_median"], 2)}


def compare(turns: dict[str, list[Turn]]) -> dict[str, Any]:
    direct, hilo = summary(turns["client"]), summary(turns["serve"])
    return {"direct": direct, "hilo": hilo, **ratios(direct, hilo),
            "turns": {caller: [asdict(t) for t in turns[caller]] for caller in CALLERS}}


def record(turns: int, root: Path) -> dict[str, list[dict]]:
    """The capping client's conversation, direct and through Hilo, on the small model."""
    engine = Engine(llama_server(), model_file(shape_named(RECORDING_SHAPE)), root)
    proxy = CountingProxy()
    script = TURNS[:turns]
    try:
        log("recording the capped client, directly to the engine")
        direct = direct_run(engine, proxy, "capped", script, 3.0, {})
        log("recording the capped client, through hilo serve and hilo worker")
        hilo = hilo_run(engine, proxy, "capped", root, script, 3.0, {}, {})
    finally:
        proxy.stop()
        engine.stop()
    return {"client": chat_requests(direct), "serve": chat_requests(hilo)}


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"The capping client's conversation ({results['turns']} turns of the localmodel "
        f"script), recorded on the default small model straight to llama-server and through "
        f"`hilo serve` + `hilo worker`, then each caller's chat requests replayed on two "
        f"engines of each shape below (random weights, MiniLM's vocabulary"
        + "".join(f"; llama-server {flag}" for flag in results["engine_flags"])
        + "), alternating "
        "turn by turn, each turn's cache primed through the previous reply. Steady "
        "turns (the last three quarters), the engine's own timings:",
        "",
        "| model shape | new tokens a turn, direct / Hilo | cached, direct / Hilo "
        "| engine's time reading them, direct / Hilo | ratio | ms a new token, direct / Hilo "
        "| ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, shape in results["shapes"].items():
        d, h = shape["direct"], shape["hilo"]
        lines.append(
            f"| {name} | {d['new_tokens_mean']} / {h['new_tokens_mean']} "
            f"| {d['cached_tokens_mean']} / {h['cached_tokens_mean']} "
            f"| {d['prompt_ms_mean']} / {h['prompt_ms_mean']} ms | {shape['prompt_time_ratio']}× "
            f"| {d['ms_per_new_token_median']} / {h['ms_per_new_token_median']} "
            f"| {shape['per_token_ratio']}× |")
    if results["versus"]:
        options = " ".join(results["versus_flags"])
        lines += ["", f"The same requests on engines with llama-server `{options}` added, "
                  "alternating with the engines above: with ÷ without.", "",
                  "| model shape | caller | engine's time reading a turn, without / with "
                  "| ratio | ms a new token, without / with | ratio |",
                  "|---|---|---:|---:|---:|---:|"]
        for name, callers in results["versus"].items():
            for caller, c in callers.items():
                lines.append(
                    f"| {name} | {'memory-less' if caller == 'client' else 'Hilo'} "
                    f"| {c['without']['prompt_ms_mean']} / {c['with']['prompt_ms_mean']} ms "
                    f"| {c['prompt_time_ratio']}× | {c['without']['ms_per_new_token_median']} / "
                    f"{c['with']['ms_per_new_token_median']} | {c['per_token_ratio']}× |")
    lines += ["", "Not in these figures: Hilo's own time before the engine (~20 ms a turn), "
              "learning calls sharing the engine, and how a real model's replies would "
              "change the conversation."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", choices=list(REAL_SHAPES),
                        help=f"model shapes to replay on (default: {', '.join(DEFAULT_SHAPES)})")
    parser.add_argument("--turns", type=int, default=20, help="turns of the script recorded")
    parser.add_argument("--engine-flag", action="append", default=[], metavar="FLAG",
                        help="an option of llama-server's for the replaying engines "
                             "(--swa-full: keep the whole cache of sliding-window layers)")
    parser.add_argument("--versus-flag", action="append", default=[], metavar="FLAG",
                        help="also replay each caller on engines with this option added, "
                             "alternating with the others: an A/B of the engine's option")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.quick = False
    if not 4 <= args.turns <= len(TURNS):
        parser.error(f"--turns: between 4 and {len(TURNS)}")
    root = Path(tempfile.mkdtemp(prefix="hilo-bench-engine-sizes-"))
    try:
        recorded = record(args.turns, root)
        flags, versus = tuple(args.engine_flag), tuple(args.versus_flag)
        results: dict[str, Any] = {"turns": args.turns, "recorded_on": RECORDING_SHAPE,
                                   "engine_flags": list(flags), "versus_flags": list(versus),
                                   "shapes": {}, "versus": {}}
        for name in args.shape or DEFAULT_SHAPES:
            turns = replay(name, recorded, root, lanes_for(flags, versus))
            results["shapes"][name] = compare(turns)
            if versus:
                results["versus"][name] = versus_compare(turns, versus)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # An A/B of the engine's own options is its own section: the sizes' stays as it is.
    section = "localmodel-engine-options" if versus else "localmodel-engine-sizes"
    emit(args, section, results, markdown(results))


if __name__ == "__main__":
    main()
