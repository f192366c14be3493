"""Corrections benchmark: what a correction on the memory page costs a running chat in
prompt the model reads anew (the prompt cache).

A chat as Open WebUI sends it (its whole branch every turn) through `hilo serve`, on the
fake model server with a simulated CPU whose one slot caches the last prompt
(tests/fake_ollama.py): the chat first mentions the user's lawyer, whose fact a worker
learned in another chat, then goes on for `--turns` turns. Then the person corrects, on
the memory page, a fact the chat's prompt does not show (their editor) and the chat takes
a turn; then a fact it shows (the lawyer), and another turn. For each turn: the prompt's
tokens and those the model read anew (not in its cache). A correction ends the prompt
stretch of the sessions whose prompt shows what it takes back (app/turn/corrected.py),
which then read their prompt anew once; the others keep their cache.

    python -m tests.bench.corrections [--quick] [--json] [--turns N]
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import httpx

from app.config import load_config
from app.learn.session import learn_session
from tests.api.support import HiloServer
from tests.bench import report
from tests.fake_ollama import CpuSpeed, FakeOllama
from tests.ui.support import browser, follow, submit

MODEL = "gemma3:4b"
FILLER = ("We went through the plan for the garden again: the tomatoes by the south wall, "
          "beans along the fence, a small pond in the corner and a bench under the fig. ")


def _say(client: httpx.Client, chat: str, messages: list[dict]) -> dict:
    answer = client.post("/api/chat", headers={"X-OpenWebUI-Chat-Id": chat}, json={
        "model": MODEL, "stream": False, "messages": messages})
    answer.raise_for_status()
    return answer.json()["message"]


def _learn(server: HiloServer, chat: str, key: str, value: str) -> None:
    server.fake.script_generate(json.dumps({"profile": {}, "facts": [
        {"category": "fact", "key": key, "value": value}]}))
    service = server.app.state.service
    learn_session(service.writer, service.model, server.config, "default", chat)


def _last_read(fake: FakeOllama) -> tuple[int, int]:
    """The last chat request's prompt tokens, and those the model read anew."""
    chat = [e for e in fake.evaluations if e.path == "/api/chat"][-1]
    return chat.prompt_tokens, chat.new_tokens


def run(turns: int) -> dict:
    fake = FakeOllama(cpu=CpuSpeed(1_000_000, 1_000_000)).start()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(path=report.REPO_ROOT / "config.toml", env={},
                             data_dir=Path(tmp) / "data").replace(
            llm={"url": fake.url}, embedder={"kind": "none"})
        server = HiloServer(config, fake).start()
        try:
            return _measure(server, turns)
        finally:
            server.stop()
            fake.stop()


def _measure(server: HiloServer, turns: int) -> dict:
    client = server.client()
    fake = server.fake
    facts = {}
    for chat, key, value, said in (("told-1", "lawyer", "Vidal", "My lawyer is Vidal."),
                                   ("told-2", "editor", "helix", "I write in helix.")):
        _say(client, chat, [{"role": "user", "content": said}])
        _learn(server, chat, key, value)
        facts[key] = client.get("/memory/facts").json()["facts"][0]["id"]
    messages: list[dict] = []
    read: list[tuple[int, int]] = []

    def turn(text: str) -> None:
        messages.append({"role": "user", "content": text})
        fake.script_chat(FILLER)
        messages.append(_say(client, "chat", messages))
        read.append(_last_read(fake))

    turn("Vidal, my lawyer, says the lease for the garden plot is fine. " + FILLER)
    for n in range(turns):
        turn(f"Turn {n}: " + FILLER)
    page = browser(server)
    follow(page, submit(page, f"/ui/facts/{facts['editor']}/edit", {"value": "zed"}))
    turn("After the editor's correction: " + FILLER)
    unrelated = read[-1]
    turn("And one more: " + FILLER)
    follow(page, submit(page, f"/ui/facts/{facts['lawyer']}/edit", {"value": "Ortega"}))
    turn("After the lawyer's correction: " + FILLER)
    related = read[-1]
    normal = [new for _, new in read[1:turns + 1]]
    return {"turns": turns, "prompt_tokens_last": read[-1][0],
            "read_anew_normal_turn_median": statistics.median(normal),
            "read_anew_after_unrelated_correction": unrelated[1],
            "prompt_tokens_after_unrelated_correction": unrelated[0],
            "read_anew_after_related_correction": related[1],
            "prompt_tokens_after_related_correction": related[0]}


def markdown(r: dict) -> str:
    return f"""A chat of {r['turns'] + 1} turns (Open WebUI's shape), then a correction on the page of
a fact its prompt does not show, then of one it shows (its first message said it).

| the chat's next turn | prompt tokens | read anew by the model |
|---|---|---|
| a turn with no correction (median) | – | {r['read_anew_normal_turn_median']:g} |
| after correcting a fact the prompt does not show | {r['prompt_tokens_after_unrelated_correction']} | {r['read_anew_after_unrelated_correction']} |
| after correcting a fact the prompt shows | {r['prompt_tokens_after_related_correction']} | {r['read_anew_after_related_correction']} |
"""


def main() -> None:
    p = report.parser("What a correction costs a running chat in prompt read anew.")
    p.add_argument("--turns", type=int, default=12)
    args = p.parse_args()
    results = run(4 if args.quick else args.turns)
    report.emit(args, "corrections", results, markdown(results))


if __name__ == "__main__":
    main()
