"""`make try`, as a new user runs it on a machine with no model server: the README's
first chat answers from memory and ends with facts on the memory page; and the demo
model alone, as the workers and a chat client see it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx
import pytest

from app.config import load_config
from app.ops.demo.mind import chat_reply, diary_sentence, json_answer
from tests.conftest import REPO_ROOT
from tests.fake_ollama import unused_loopback_url
from tests.ops.test_run_processes import VENV, Terminal, base_env, free_port, stopped_in_time
from tests.system_tools import required_tool
from tests.workers.support import wait_until

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def readme_first_chat(url: str) -> str:
    """The README's first chat (its first Python example), pointed at `url`."""
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    assert "http://127.0.0.1:11435" in code
    return code.replace("http://127.0.0.1:11435", url)


def page_text(url: str) -> str:
    page = httpx.get(url, headers={"Accept": "text/html"}, timeout=10)
    return " ".join(re.sub(r"<[^>]+>", " ", page.text).split())


@pytest.mark.slow
def test_make_try_answers_the_readmes_first_chat_and_the_page_shows_what_it_learned(tmp_path):
    required_tool("make", "apt-get install make")
    port = free_port()
    env = base_env(HILO_DATA_DIR=str(tmp_path / "data"), HILO_LLM_URL=unused_loopback_url(),
                   HILO_SERVER_PORT=str(port))
    terminal = Terminal(["make", "-o", f"{VENV}/.run-installed", "try", f"VENV={VENV}"],
                        env, REPO_ROOT)
    try:
        terminal.read_until("hilo demo-model: a scripted model", "worker.started",
                            "Uvicorn running")
        started = terminal.descendants
        url = f"http://127.0.0.1:{port}"
        chat = subprocess.run([sys.executable, "-c", readme_first_chat(url)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip() == "Your name is Ana."

        wait_until(lambda: "name Ana" in page_text(f"{url}/ui/profile"), 30,
                   "the memory page to show the name the chat told")
        wait_until(lambda: "prefers short answers" in page_text(f"{url}/ui/facts"), 30,
                   "the memory page to show the preference the chat told")
        assert "learned from a message typed by you" in page_text(f"{url}/ui/facts")
        terminal.type_ctrl_c()
        terminal.wait()
        alive = stopped_in_time(started)
    finally:
        terminal.close()
    assert not alive
    assert "demo.1 stopped (rc=0)" in terminal.output
    assert "not reachable" not in terminal.output  # the demo model answered from the start


def test_a_taken_port_is_one_line_saying_what_to_do(tmp_path):
    with __import__("socket").socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        env = base_env(HILO_DATA_DIR=str(tmp_path / "data"),
                       HILO_LLM_URL=f"http://127.0.0.1:{busy}")
        done = subprocess.run([str(VENV / "bin" / "hilo"), "demo-model"], env=env,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"hilo demo-model: cannot listen on http://127.0.0.1:{busy}")
    assert "make run" in line


# -- what the demo model says ----------------------------------------------------------------

CONFIG = load_config(path=REPO_ROOT / "config.toml", env={})


@pytest.mark.parametrize("told, asked, answer", [
    ("My name is Ana.", "What is my name?", "Your name is Ana."),
    ("I live in Lisbon.", "Where do I live?", "You live in Lisbon."),
    ("I prefer vim.", "Which editor do I prefer?", "From what you told me: you prefer vim."),
    ("Me llamo Lucía.", "¿Cómo me llamo?", "Te llamas Lucía."),
    ("Vivo en Sevilla.", "¿Dónde vivo?", "Vives en Sevilla."),
])
def test_it_answers_from_what_it_was_told(told, asked, answer):
    said = [{"role": "user", "content": told}, {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": asked}]
    assert chat_reply(said) == answer


def test_it_answers_from_the_memory_hilo_puts_in_the_prompt():
    system = ("## About the user\nname: Ana\nlocation: Lisbon\n\n## Relevant facts (with "
              "the date they were last stated)\n- [2026-12-07] (preference) prefers vim: "
              "prefers vim")
    asked = [{"role": "user", "content": "What do you know about me?"}]
    assert chat_reply(asked, system) == ("This is what I know about you: name: Ana; lives "
                                         "in Lisbon; prefers vim.")


DISTILL_PROMPT = """From the conversation below, extract what is worth remembering about the USER:
Take facts only from USER and TOOL lines. ASSISTANT lines are context: never take a fact from them.

EARLIER (already learned, context only) USER: My name is Carla.
USER: My name is Ana. I live in Lisbon and I prefer vim. Remember that the backup runs at 2.
ASSISTANT (context only): Your name is Bob and you live in Paris."""


def test_a_learning_call_gets_the_facts_the_users_lines_state():
    schema = {"type": "object", "properties": {"profile": {}, "facts": {}, "summary": {},
                                               "keywords": {}}}
    answer = json_answer(schema, DISTILL_PROMPT)

    assert answer["profile"] == {"name": "Ana", "location": "Lisbon"}
    assert [(f["category"], f["value"]) for f in answer["facts"]] == [
        ("fact", "the backup runs at 2"), ("preference", "prefers vim")]
    assert answer["summary"] == ("Ana said they live in Lisbon, I should remember that the "
                                 "backup runs at 2 and they prefer vim.")
    assert "lisbon" in answer["keywords"] and "bob" not in answer["keywords"]


def test_a_diary_entry_is_a_sentence_of_the_conversation():
    lines = [("USER", "My name is Ana."), ("ASSISTANT", "Nice to meet you."),
             ("USER", "Where is a good café near the river?")]
    assert diary_sentence(lines) == ('Ana introduced themselves and asked "Where is a good '
                                     'café near the river?".')
    assert diary_sentence([("USER", "Kubernetes upgrade plan for the staging cluster")]) == (
        "The user talked about kubernetes, upgrade and plan.")


def test_it_speaks_ollamas_and_openais_api(tmp_path):
    from app.ops.demo.server import DemoServer

    server = DemoServer(("127.0.0.1", 0), CONFIG)
    thread = __import__("threading").Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        import ollama
        import openai

        tags = [m.model for m in ollama.Client(host=url).list().models]
        assert tags == ["gemma3:4b", "nomic-embed-text:latest"]
        streamed = "".join(part.message.content for part in ollama.Client(host=url).chat(
            model="gemma3:4b", stream=True,
            messages=[{"role": "user", "content": "My name is Ana."}]))
        assert streamed == "Nice to meet you, Ana. I will remember that."
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        answer = client.chat.completions.create(model="gemma3:4b", messages=[
            {"role": "user", "content": "My name is Ana."},
            {"role": "user", "content": "What is my name?"}])
        assert answer.choices[0].message.content == "Your name is Ana."
        learned = ollama.Client(host=url).generate(
            model="gemma3:4b", prompt=DISTILL_PROMPT,
            format={"type": "object", "properties": {"profile": {}}})
        assert json.loads(learned.response) == {"profile": {"name": "Ana", "location": "Lisbon"}}
        vectors = ollama.Client(host=url).embed(model="nomic-embed-text", input=["a", "b"])
        assert len(vectors.embeddings) == 2 and len(vectors.embeddings[0]) == 64
    finally:
        server.shutdown()
        server.server_close()
