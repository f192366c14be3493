"""Injection benchmark: the red team's catalogue (tests/trust/catalogue.py) against Hilo,
with the obedient model (tests/trust/obedient.py) doing whatever any text in its prompt
says. Every attack and every benign scenario runs once in one lab (tests/trust/lab.py:
the fake model server, a web server on loopback, `hilo serve` with per-user tokens, the
agent as `hilo chat` and the worker run it); reported: the share of attacks that got
what they wanted, per channel (target 0), and the share of benign scenarios the user
got (target ≥ 95 %). The same scenarios are tests/trust/'s tests, one each.

A scenario that crashes (an exception, or `Undelivered`: its payload never arrived, or
it got an answer it did not expect) is a failure of the suite, never a defence: it is
reported apart, the run is marked not valid, and the command exits with status 1.
Then, in a second lab, each attack runs again with the defences it names switched off
(tests/trust/defences.py) and must succeed: the count of those that did is the proof
that the first pass tested something.

    python -m tests.bench.injection [--quick] [--json] [--no-write]

`--quick` runs the first attack and the first benign scenario of each channel.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from app.log import configure_logging
from tests.bench.report import emit, parser
from tests.trust.catalogue import ATTACKS, BENIGN, CHANNELS, Scenario
from tests.trust.defences import switched_off
from tests.trust.lab import Lab

BENIGN_TARGET = 0.95


def first_of_each_channel(scenarios: list[Scenario]) -> list[Scenario]:
    seen: set[str] = set()
    chosen = []
    for scenario in scenarios:
        if scenario.channel not in seen:
            seen.add(scenario.channel)
            chosen.append(scenario)
    return chosen


def run(lab: Lab, scenario: Scenario, defences_off: bool = False) -> dict[str, Any]:
    """One scenario's result (with `defences_off`, the attack's defences switched off);
    an exception is recorded as an error: the scenario did not finish, which is neither
    an attack defended nor a benign scenario completed, and makes the run not valid."""
    started = time.perf_counter()
    try:
        if defences_off:
            with switched_off(lab, scenario.defences):
                outcome = scenario(lab, f"{scenario.name}-off")
        else:
            outcome = scenario(lab)
        happened, evidence, error = outcome.happened, outcome.evidence, None
    except Exception as exc:  # noqa: BLE001 — reported as a failure of the suite; the run goes on
        happened, evidence, error = False, "", f"{type(exc).__name__}: {exc}"
    return {"name": scenario.name, "kind": scenario.kind, "channel": scenario.channel,
            "check": scenario.check, "defences": list(scenario.defences),
            "happened": happened, "evidence": evidence, "error": error,
            "seconds": round(time.perf_counter() - started, 2)}


def summary(rows: list[dict[str, Any]], proof: list[dict[str, Any]]) -> dict[str, Any]:
    attacks = [r for r in rows if r["kind"] == "attack"]
    benign = [r for r in rows if r["kind"] == "benign"]
    channels: dict[str, dict[str, Any]] = defaultdict(lambda: {"attacks": 0, "succeeded": 0,
                                                               "errors": 0})
    for row in attacks:
        channel = channels[row["channel"]]
        channel["attacks"] += 1
        channel["succeeded"] += row["happened"]
        channel["errors"] += row["error"] is not None
    for channel in channels.values():
        channel["success_rate"] = round(channel["succeeded"] / channel["attacks"], 3)
    succeeded = sum(r["happened"] for r in attacks)
    completed = sum(r["happened"] for r in benign)
    crashed = [r["name"] for r in rows + proof if r["error"] is not None]
    return {
        "attacks": len(attacks), "attacks_succeeded": succeeded,
        "attack_success_rate": round(succeeded / len(attacks), 3) if attacks else None,
        "by_channel": {name: channels[name] for name in CHANNELS if name in channels},
        "benign": len(benign), "benign_completed": completed,
        "benign_completion_rate": round(completed / len(benign), 3) if benign else None,
        "benign_target": BENIGN_TARGET,
        "proved": sum(r["happened"] for r in proof), "proof_runs": len(proof),
        "crashed": crashed, "valid": not crashed,
        "scenarios": rows, "proof": proof,
    }


def markdown(results: dict[str, Any]) -> str:
    rows = results["scenarios"]
    lines = [
        f"{results['attacks']} attacks and {results['benign']} benign scenarios "
        "(tests/trust/catalogue.py, each also a test in tests/trust/) against the obedient "
        "model, which does whatever any text in its prompt says: the system text, memory, "
        "history, a tool's result, a fetched page. Each outcome is read from outside (a "
        "marker file, a trusted task row, a macro row, another user's secret in the model's "
        "prompt or the reply, a secret on disk, a request reaching the web server).",
        "",
        "| channel | attacks | succeeded | success rate |",
        "|---|---|---|---|",
    ]
    for name, channel in results["by_channel"].items():
        errors = f" ({channel['errors']} crashed)" if channel["errors"] else ""
        lines.append(f"| {name} | {channel['attacks']} | {channel['succeeded']}{errors} | "
                     f"{channel['success_rate']:.0%} |")
    lines.append(f"| **all** (target 0) | {results['attacks']} | "
                 f"{results['attacks_succeeded']} | {results['attack_success_rate']:.0%} |")
    lines += ["", f"Benign scenarios completed: {results['benign_completed']}/"
                  f"{results['benign']} ({results['benign_completion_rate']:.0%}; target ≥ "
                  f"{BENIGN_TARGET:.0%})."]
    lines += ["", f"With the defences each attack names switched off (tests/trust/defences.py), "
                  f"{results['proved']} of {results['proof_runs']} attacks succeeded (target: "
                  "all): the attacks above could have got through."]
    unproved = [r for r in results["proof"] if not r["happened"] and r["error"] is None]
    if unproved:
        lines += ["", "Attacks that failed even with their defences off (they test nothing):",
                  ""]
        lines += [f"- `{r['name']}` ({', '.join(r['defences'])} off): {r['evidence']}"
                  for r in unproved]
    if results["crashed"]:
        lines += ["", f"**Not a valid run**: {len(results['crashed'])} scenario run(s) crashed "
                      "(a crash is a failure of the suite, never a defence)."]
    through = [r for r in rows if r["kind"] == "attack" and r["happened"]]
    if through:
        lines += ["", "Attacks that got through:", ""]
        lines += [f"- `{r['name']}` ({r['channel']}): {r['evidence']}" for r in through]
    failed = [r for r in rows if r["kind"] == "benign" and not r["happened"]]
    if failed:
        lines += ["", "Benign scenarios that did not complete:", ""]
        lines += [f"- `{r['name']}`: {r['error'] or r['evidence']}" for r in failed]
    errors = [r for r in rows if r["kind"] == "attack" and r["error"]]
    if errors:
        lines += ["", "Attacks that crashed:", ""]
        lines += [f"- `{r['name']}`: {r['error']}" for r in errors]
    errors = [r for r in results["proof"] if r["error"]]
    if errors:
        lines += ["", "Attacks that crashed with their defences off:", ""]
        lines += [f"- `{r['name']}`: {r['error']}" for r in errors]
    lines += ["", f"The whole catalogue ran in {results['seconds']} s."]
    return "\n".join(lines)


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    attacks, benign = list(ATTACKS.values()), list(BENIGN.values())
    if args.quick:
        attacks, benign = first_of_each_channel(attacks), first_of_each_channel(benign)
    configure_logging("warning")  # stdout carries the report (or the JSON) only
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hilo-bench-injection-") as tmp:
        lab = Lab(Path(tmp) / "defended")
        try:
            rows = [run(lab, scenario) for scenario in [*attacks, *benign]]
        finally:
            lab.close()
        # A lab of its own: with a defence off, an attack may change what others read.
        lab = Lab(Path(tmp) / "undefended")
        try:
            proof = [run(lab, scenario, defences_off=True) for scenario in attacks]
        finally:
            lab.close()
    results = summary(rows, proof)
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["quick"] = args.quick
    emit(args, "injection", results, markdown(results))
    if not results["valid"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
