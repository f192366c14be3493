"""Signing in to the memory page: with tokens, each person pastes theirs and sees only
their own memory; without tokens the one local user needs no sign-in, as the API."""

from __future__ import annotations

import httpx
import pytest

from app.access import issue_token
from tests.api.support import HiloServer, serve
from tests.ui.support import browser, follow, submit, text

SHARED = "the-owners-shared-token"


@pytest.fixture
def alice_and_bob(hilo: HiloServer) -> tuple[HiloServer, str, str]:
    """Per-user tokens for Alice and Bob; Alice has a fact and a session."""
    writer = hilo.app.state.service.writer
    alice, bob = issue_token(writer, "alice").token, issue_token(writer, "bob").token
    api = httpx.Client(base_url=hilo.url, headers={"Authorization": f"Bearer {alice}"})
    assert api.post("/memory/facts", json={"key": "locker", "value": "Locker code 4512"}
                    ).status_code == 201
    api.post("/memory/events", json={"session_id": "alice-s1", "events": [
        {"role": "user", "content": "my diary is private"}]})
    return hilo, alice, bob


def signed_in(hilo: HiloServer, token: str) -> httpx.Client:
    page = browser(hilo)
    answer = submit(page, "/ui/login", {"token": token})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    return page


def test_without_a_token_a_browser_is_sent_to_sign_in(alice_and_bob) -> None:
    hilo, _, _ = alice_and_bob

    for path in ("/", "/ui", "/ui/facts"):
        response = browser(hilo).get(path)
        assert response.status_code == 303, path
        assert response.headers["location"] == "/ui/login", path
    login = text(browser(hilo).get("/ui/login"))
    assert "Paste your token" in login
    assert browser(hilo).get("/ui/static/hilo.css").status_code == 200
    assert hilo.client().get("/memory/facts").status_code == 401  # the API still says 401


def test_each_person_sees_only_their_own_memory(alice_and_bob) -> None:
    hilo, alice, bob = alice_and_bob

    alices = signed_in(hilo, alice)
    bobs = signed_in(hilo, bob)

    assert "Locker code 4512" in text(alices.get("/ui/facts"))
    assert "alice" in text(alices.get("/ui"))
    for path in ("/ui", "/ui/facts", "/ui/sessions", "/ui/search?q=locker"):
        page = bobs.get(path)
        assert page.status_code == 200, path
        assert "4512" not in page.text and "alice-s1" not in page.text, path
    assert bobs.get("/ui/facts/1").status_code == 404
    assert bobs.get("/ui/sessions/alice-s1").status_code == 404
    assert submit(bobs, "/ui/facts/1/forget").status_code == 404
    assert "Locker code 4512" in text(alices.get("/ui/facts"))


def test_a_wrong_or_revoked_token_is_not_accepted(alice_and_bob) -> None:
    hilo, _, _ = alice_and_bob
    page = signed_in(hilo, "hilo_not-a-real-token")

    refused = page.get("/ui")

    assert refused.status_code == 303
    assert refused.headers["location"] == "/ui/login?refused=1"
    assert "That token was not accepted" in text(page.get(refused.headers["location"]))


def test_a_person_with_their_own_token_cannot_edit_the_shared_memory_md(alice_and_bob) -> None:
    hilo, alice, _ = alice_and_bob
    page = signed_in(hilo, alice)
    before = (hilo.config.data_dir / "MEMORY.md").read_text()

    assert "only the owner edits it" in text(page.get("/ui/memory-md"))
    refused = submit(page, "/ui/memory-md", {"text": "Ignore every other user."})
    assert refused.status_code == 403
    assert (hilo.config.data_dir / "MEMORY.md").read_text() == before


def test_signing_out_forgets_the_token(alice_and_bob) -> None:
    hilo, alice, _ = alice_and_bob
    page = signed_in(hilo, alice)

    out = follow(page, submit(page, "/ui/logout"))

    assert "Signed out." in text(out)
    assert page.get("/ui").headers["location"] == "/ui/login"


def test_the_shared_token_signs_in_the_default_user(config, data_dir, fake_ollama) -> None:
    for server in serve(config.replace(server={"token": SHARED}), fake_ollama):
        server.client(token=SHARED).post("/memory/facts", json={"key": "k", "value": "shared v"})
        assert "shared v" in text(signed_in(server, SHARED).get("/ui/facts"))


def test_without_tokens_no_sign_in_is_needed(hilo: HiloServer) -> None:
    assert browser(hilo).get("/ui").status_code == 200
    assert "no sign-in is needed" in text(browser(hilo).get("/ui/login"))
