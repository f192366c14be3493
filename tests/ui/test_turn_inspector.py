"""The turn inspector shows what a turn told the model: the prompt by layer, what was
recalled and why, what the model's cache held, and the jobs it set off — as the memory is
now, so a fact forgotten since shows as forgotten, without its words."""

from __future__ import annotations

from tests.api.support import HiloServer
from tests.ui.support import browser, text


def chat(hilo: HiloServer, message: str, session: str = "s1", user: str | None = None) -> None:
    response = hilo.client(user).post("/api/chat", headers={"X-Hilo-Session": session}, json={
        "model": "gemma3:4b", "stream": False,
        "messages": [{"role": "user", "content": message}]})
    assert response.status_code == 200, response.text


def add_fact(hilo: HiloServer, key: str, value: str) -> int:
    response = hilo.client().post("/memory/facts", json={"key": key, "value": value})
    assert response.status_code == 201, response.text
    return response.json()["fact"]["id"]


def last_turn(hilo: HiloServer, user: str | None = None) -> dict:
    hilo.app.state.service.writer.submit(lambda con: None)  # the turn's record is committed
    turns = hilo.client(user).get("/memory/turns").json()["turns"]
    assert turns, "no turn recorded"
    return hilo.client(user).get(f"/memory/turns/{turns[0]['id']}").json()


def test_a_turn_shows_its_prompt_by_layer_and_why_each_fact_was_recalled(hilo: HiloServer):
    fact_id = add_fact(hilo, "pet", "Ana has a parrot named Kiwi")
    chat(hilo, "what is my parrot called?")
    turn = last_turn(hilo)

    page = text(browser(hilo).get(f"/ui/turns/{turn['id']}"))

    assert f"fact #{fact_id}" in page and "Ana has a parrot named Kiwi" in page
    assert "its words (rank 1)" in page
    assert "facts" in page and "the new message" in page and "MEMORY.md" in page
    assert "what is my parrot called?" in page
    assert "distill" in page


def test_a_fact_forgotten_after_the_turn_shows_as_forgotten_without_its_words(
        hilo: HiloServer):
    fact_id = add_fact(hilo, "pet", "Ana has a parrot named Kiwi")
    chat(hilo, "what is my parrot called?")
    assert hilo.client().delete(f"/memory/facts/{fact_id}").status_code == 200
    turn = last_turn(hilo)

    page = text(browser(hilo).get(f"/ui/turns/{turn['id']}"))

    assert f"fact #{fact_id}" in page and "forgotten" in page and "Kiwi" not in page
    [recalled] = [r for r in turn["recalled"] if r["kind"] == "fact"]
    assert recalled["state"] == "forgotten" and recalled["text"] is None


def test_another_users_turn_is_not_found(hilo: HiloServer):
    chat(hilo, "hello", user="ana")
    turn = last_turn(hilo, "ana")

    assert hilo.client("bo").get(f"/memory/turns/{turn['id']}").status_code == 404
    assert hilo.client("bo").get("/memory/turns").json()["turns"] == []
