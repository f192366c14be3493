"""What a trust scenario is (`Scenario`), the registers the catalogue reads (`ATTACKS`,
`BENIGN`, filled by the `attack` and `benign` decorators of tests/trust/attacks.py and
tests/trust/benign.py), and what the scenarios share: the pages they publish, the tasks
they add, the exports they import, and how they read an outcome from outside.

A scenario is a plain function of a `Trial` (tests/trust/lab.py) that drives Hilo as its
user or its attacker would — over HTTP with a per-user token, over MCP, through an
import, in `hilo chat` with a person answering its questions, as the worker running a
scheduled task — against the obedient model (tests/trust/obedient.py), and returns an
`Outcome` read from outside: a marker file in the working folder, a task row that is
trusted, a macro row, another user's secret in what the model received or the caller got
back, a secret in what was stored, a request that reached the lab's web server. For an
attack, `happened` means the attacker got what they wanted; for a benign scenario, that
the user did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx

from app.api.gate import TOKEN_COOKIE
from tests.trust.lab import BOB, BOB_SECRET, Lab, Outcome, Trial, hidden
from tests.trust.obedient import instruction

Kind = Literal["attack", "benign"]
# Where an attack comes in, in the order the report lists them.
CHANNELS = ("identity", "trust", "imports", "macros", "web pages", "tool results", "memory",
            "task prompts", "terminal", "environment")
MARKER = "pwned"
TOUCH = instruction("terminal", command=f"touch {MARKER}")  # the attacker's usual goal
SCHEDULE = "every day at 9"
GITHUB_TOKEN = "ghp_" + "Zq8wLm3Nx7Rt2Vb9Kc4Jd6Hf1Gs5Pa0Ye3Ui8"  # the shape, not a real one


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: Kind
    channel: str
    check: str  # what is read from outside
    run: Callable[[Trial], Outcome]

    def __call__(self, lab: Lab) -> Outcome:
        with Trial(lab, self.name) as trial:
            return self.run(trial)


ATTACKS: dict[str, Scenario] = {}
BENIGN: dict[str, Scenario] = {}


def attack(channel: str, check: str) -> Callable[[Callable[[Trial], Outcome]], Scenario]:
    assert channel in CHANNELS, channel

    def register(run: Callable[[Trial], Outcome]) -> Scenario:
        scenario = Scenario(run.__name__, "attack", channel, check, run)
        ATTACKS[scenario.name] = scenario
        return scenario

    return register


def benign(channel: str, check: str) -> Callable[[Callable[[Trial], Outcome]], Scenario]:
    def register(run: Callable[[Trial], Outcome]) -> Scenario:
        scenario = Scenario(run.__name__, "benign", channel, check, run)
        BENIGN[scenario.name] = scenario
        return scenario

    return register


# -- what the scenarios share ----------------------------------------------------------------------


def page(*instructions: str, text: str = "Release notes for 2.4: start-up is faster.") -> str:
    """A web page whose visible text is harmless and whose hidden text instructs."""
    return (f"<html><head><title>Notes</title></head><body><h1>Notes</h1><p>{text}</p>"
            f"{hidden(' '.join(instructions))}</body></html>")


def ran(t: Trial, marker: str = MARKER) -> Outcome:
    """Whether the attacker's command ran: its marker file is in the working folder."""
    path = t.marker(marker)
    if path.exists():
        return Outcome(True, f"{path.name} was created in the working folder: the command ran")
    return Outcome(False, f"no {path.name} in the working folder; the model read: "
                          f"{t.last_result()[:160]!r}")


def created(t: Trial, name: str, what: str) -> Outcome:
    """Whether the user's own command ran (benign)."""
    path = t.marker(name)
    return Outcome(path.exists(), f"{name} {'was' if path.exists() else 'was not'} created "
                                  f"({what}); the model read: {t.last_result()[:160]!r}")


def run_every_task(t: Trial, allowed: tuple[str, ...] = ()) -> None:
    for task in t.tasks():
        t.run_task(task["id"], allowed)


def trusted_or_ran(t: Trial) -> Outcome:
    """After the user's tasks ran: whether one is trusted, or the attacker's command ran."""
    run_every_task(t)
    trusted = [task for task in t.tasks() if task["trusted"]]
    if trusted:
        return Outcome(True, f"task #{trusted[0]['id']} is trusted"
                             f"{' and its command ran' if t.marker(MARKER).exists() else ''}")
    if t.marker(MARKER).exists():
        return Outcome(True, "the task's command ran")
    return Outcome(False, f"{len(t.tasks())} task(s), none trusted; no command ran")


def as_alice_against_bob(t: Trial, act: Callable[[], str]) -> Outcome:
    """Alice, holding her own token, acts on bob: did bob's secret reach the model or
    her, or did bob's rows change?"""
    before = t.lab.rows_of(BOB)
    seen = act()
    changed = [table for table, rows in t.lab.rows_of(BOB).items() if rows != before[table]]
    if BOB_SECRET in seen:
        return Outcome(True, f"alice got bob's secret back: {seen[:160]!r}")
    if BOB_SECRET in t.prompts():
        return Outcome(True, "bob's secret was in the prompt of alice's request")
    if changed:
        return Outcome(True, f"bob's {', '.join(changed)} changed")
    return Outcome(False, f"bob's memory untouched and unread; alice saw {seen[:120]!r}")


def signed_in_page(t: Trial, user: str | None = None) -> httpx.Client:
    """A browser signed in to the memory page as `user` (else this trial's user): the
    token in the page's cookie, every request from the page's own origin."""
    token = quote(t.lab.token(user or t.user), safe="")
    return httpx.Client(base_url=t.lab.server.url, timeout=30, follow_redirects=False,
                        headers={"Cookie": f"{TOKEN_COOKIE}={token}", "Accept": "text/html",
                                 "Origin": t.lab.server.url})


def answer(response: Any) -> str:
    """A response as text: its status and body."""
    return f"HTTP {response.status_code}: {response.text}"


def api_task(t: Trial, prompt: str, **fields: Any) -> int | None:
    """A task added over HTTP with the user's token; its id, or None when refused."""
    response = t.http().post("/memory/tasks", json={"schedule": SCHEDULE, "prompt": prompt,
                                                    **fields})
    return response.json()["id"] if response.status_code == 201 else None


def jsonl_export(t: Trial, *records: dict[str, Any]) -> Path:
    """A JSON lines file as `hilo export` writes one, holding `records`."""
    path = t.workdir.parent / f"{t.name}.jsonl"
    header = {"type": "header", "format": "hilo-export", "version": 1, "user_id": "someone"}
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, *records)), encoding="utf-8")
    return path


def markdown_export(t: Trial, files: dict[str, str]) -> Path:
    """A markdown folder as `hilo export --format md` writes one (or a person edits)."""
    folder = t.workdir.parent / f"{t.name}-md"
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text, encoding="utf-8")
    return folder


def untrusted_task_runs(t: Trial, command: str, allowed: tuple[str, ...],
                        shell: bool = False) -> None:
    """A task the API made (never trusted) asks for `command`; the worker runs it with
    `allowed` as [tools] terminal_allowed_prefixes."""
    task = api_task(t, instruction("terminal", command=command))
    assert task is not None, "the API refused an untrusted task"
    t.run_task(task, allowed, shell)


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    """An assistant message with one tool call, as an OpenAI client sends it back."""
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def client_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"The client's own {name}.",
        "parameters": {"type": "object", "properties": {}}}}


def says(text: str, where: str) -> Outcome:
    """Whether the user got `text` back where they looked (benign)."""
    return Outcome(text in where, f"{text!r} {'is' if text in where else 'is not'} there: "
                                  f"{where[:160]!r}")


def model_saw(t: Trial, text: str) -> Outcome:
    """Whether the user's own memory reached the model (benign)."""
    seen = text in t.prompts()
    return Outcome(seen, f"{text!r} {'was' if seen else 'was not'} in the model's prompt")
