"""A fact forgotten while a client's conversation goes on is never sent to the model again,
whoever forgot it: `hilo memory forget` in another process, or the memory API."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.api.support import HiloServer
from tests.api.test_chat import MODEL, assistant, ollama_client, sent_to_model, user
from tests.conftest import REPO_ROOT


def forget_with_the_cli(server: HiloServer, fact_id: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "memory", "forget", str(fact_id),
         "--data-dir", str(server.config.data_dir)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def forget_with_the_api(server: HiloServer, fact_id: int) -> None:
    assert server.client().delete(f"/memory/facts/{fact_id}").status_code == 200


@pytest.mark.parametrize("forget", [forget_with_the_cli, forget_with_the_api],
                         ids=["hilo memory forget", "DELETE /memory/facts"])
def test_a_fact_forgotten_between_two_requests_of_a_session_is_not_sent_again(
        hilo: HiloServer, forget) -> None:
    added = hilo.client().post("/memory/facts", json={
        "category": "preference", "key": "editor", "value": "uses helix, not vim"})
    fact_id = added.json()["fact"]["id"]
    client = ollama_client(hilo, "s1")
    history = [user("which editor do I use?")]
    reply = client.chat(model=MODEL, messages=history)
    assert "uses helix, not vim" in str(sent_to_model(hilo))

    forget(hilo, fact_id)
    history += [assistant(reply["message"]["content"]), user("and which shell do I use?")]
    client.chat(model=MODEL, messages=history)

    assert "helix" not in str(sent_to_model(hilo))
