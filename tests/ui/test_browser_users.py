"""Two people on one Hilo with their own tokens: each signs in to the memory page with
theirs and sees only their own memory and turns, in a real browser."""

from __future__ import annotations

import json

import httpx

from tests.ui.browser import Page, needs_chromium

pytestmark = needs_chromium  # skipped without chromium, failed under CI

SECONDS = 15_000


def sign_in(page: Page, token: str) -> None:
    page.tab.goto("/ui/login")
    page.tab.locator("input[name=token]").fill(token)
    page.tab.get_by_role("button", name="Sign in").click()
    page.tab.wait_for_url("**/ui", timeout=SECONDS)


def test_a_second_user_sees_nothing_of_the_first(page, chromium, serve):
    ana = json.loads(serve.hilo("token", "add", "ana", "--json"))["token"]
    bo = json.loads(serve.hilo("token", "add", "bo", "--json"))["token"]
    as_ana = {"Authorization": f"Bearer {ana}"}
    httpx.post(f"{serve.url}/memory/facts", headers=as_ana,
               json={"key": "pet", "value": "Ana has a parrot named Kiwi"}).raise_for_status()
    httpx.post(f"{serve.url}/api/chat", headers={**as_ana, "X-Hilo-Session": "u1"}, timeout=30,
               json={"model": "gemma3:4b", "stream": False,
                     "messages": [{"role": "user", "content": "what is my parrot called?"}]}
               ).raise_for_status()

    sign_in(page, ana)
    page.tab.goto("/ui/facts")
    assert "Kiwi" in page.tab.locator("main").inner_text()

    other = Page(chromium, serve.url)
    try:
        sign_in(other, bo)
        for path in ("/ui", "/ui/facts", "/ui/search?q=parrot", "/ui/turns"):
            other.tab.goto(path)
            assert "Kiwi" not in other.tab.locator("main").inner_text(), path
        assert other.tab.locator("a[href^='/ui/turns/']").count() == 0
        ana_turn = httpx.get(f"{serve.url}/memory/turns", headers=as_ana).json()["turns"][0]
        response = other.tab.goto(f"/ui/turns/{ana_turn['id']}")
        assert response.status == 404
    finally:
        other.close()
