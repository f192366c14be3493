"""The memory page in a real browser (headless Chromium on a real `hilo serve`): find a
fact, correct it, forget it and see it leave the next prompt in the turn inspector; retry
a failed job; and the API docs render with nothing loaded from off the machine."""

from __future__ import annotations

import httpx
import pytest

from app.config import load_config
from tests.conftest import REPO_ROOT
from tests.ui.browser import Page, ServeProcess, needs_chromium

pytestmark = needs_chromium  # skipped without chromium, failed under CI

SECONDS = 15_000  # Playwright's waits, in milliseconds: generous on a busy machine


def chat(serve: ServeProcess, message: str, session: str = "b1") -> None:
    response = httpx.post(f"{serve.url}/api/chat", headers={"X-Hilo-Session": session},
                          json={"model": "gemma3:4b", "stream": False,
                                "messages": [{"role": "user", "content": message}]},
                          timeout=30)
    assert response.status_code == 200, response.text


def open_last_turn(page: Page) -> None:
    page.tab.goto("/ui/turns")
    page.tab.locator("table a[href^='/ui/turns/']").first.click()
    page.tab.wait_for_selector("#recalled", timeout=SECONDS)


def recalled(page: Page) -> str:
    items = page.tab.locator("#recalled-items")
    return items.inner_text() if items.count() else ""


def test_find_a_fact_correct_it_forget_it_and_see_it_leave_the_next_prompt(page, serve):
    added = httpx.post(f"{serve.url}/memory/facts", json={
        "key": "pet", "value": "Ana has a parrot named Kiwi"}).json()["fact"]

    page.tab.goto("/ui/search?q=parrot")
    page.tab.get_by_role("link", name=f"fact #{added['id']}").click()
    page.tab.locator("textarea[name=value]").fill("Ana has a parrot named Mango")
    page.tab.get_by_role("button", name="Save the new value").click()
    page.tab.get_by_text("Ana has a parrot named Mango").first.wait_for(timeout=SECONDS)

    chat(serve, "what is my parrot called?")
    open_last_turn(page)
    assert "Mango" in recalled(page) and "its words" in recalled(page)
    assert page.tab.locator("#prompt-layers tr[data-layer=facts]").is_visible()

    page.tab.goto("/ui/search?q=parrot")
    page.tab.get_by_role("link", name="fact #").first.click()
    page.tab.get_by_role("button", name="Forget it for good…").click()
    page.tab.get_by_role("button", name="Yes, forget it for good").click()  # asked once
    page.tab.get_by_role("status").wait_for(timeout=SECONDS)
    assert "Mango" in page.tab.get_by_role("status").inner_text()  # says what it removed

    chat(serve, "and what about my parrot now?")
    open_last_turn(page)
    assert "Mango" not in recalled(page) and "Kiwi" not in recalled(page)
    assert "Mango" not in page.tab.locator("main").inner_text().split("Recalled")[0]


def test_inspect_a_turn_shows_the_prompt_by_layer_and_the_cache(page, serve):
    chat(serve, "hello there", session="b2")
    open_last_turn(page)
    layers = page.tab.locator("#prompt-layers").inner_text()
    for part in ("system prompt", "MEMORY.md", "profile", "facts", "the new message"):
        assert part in layers
    assert "The model server read a prompt of" in page.tab.locator("#cache-summary").inner_text()
    assert page.tab.locator("#turn-jobs li[data-job=distill]").count() == 1


def test_retry_a_failed_job_from_the_queue_page(page, serve):
    from workers import jobs
    from workers.queue import configure

    config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=serve.data_dir)
    queue = configure(config)
    queue.enqueue(jobs.compact.s(config.memory.user_id, "b3"))
    queue.execute(queue.dequeue())  # no job runner here: it fails, as a broken job does

    page.tab.goto("/ui/queue")
    page.tab.get_by_role("button", name="Retry").first.click()
    page.tab.get_by_role("status").wait_for(timeout=SECONDS)
    assert "No failed jobs." in page.tab.locator("main").inner_text()


@pytest.mark.parametrize("path, shown", [("/docs", ".swagger-ui .info .title"),
                                         ("/redoc", "h1")])
def test_the_api_docs_render_with_nothing_from_off_the_machine(page, path, shown):
    page.tab.goto(path)
    title = page.tab.locator(shown).first
    title.wait_for(state="visible", timeout=SECONDS)
    assert "Hilo" in title.inner_text()
    assert page.offsite == []
    assert any("/docs-assets/" in url for url in page.requests)


def test_forget_then_undo_in_the_browser(page, serve):
    added = httpx.post(f"{serve.url}/memory/facts", json={
        "key": "plant", "value": "Ana waters the fern on Sundays"}).json()["fact"]

    page.tab.goto("/ui/facts")
    page.tab.locator(f"#f{added['id']}").get_by_role("button", name="Forget…").click()
    page.tab.get_by_role("button", name="Yes, forget it for good").click()
    page.tab.get_by_role("status").wait_for(timeout=SECONDS)
    assert "fern" not in httpx.get(f"{serve.url}/memory/facts").text
    undo = page.tab.locator(".undos form", has_text=f"#{added['id']} fact · plant")
    undo.get_by_role("button", name="Undo").click()
    page.tab.get_by_role("status").wait_for(timeout=SECONDS)

    assert "Brought back" in page.tab.get_by_role("status").inner_text()
    assert "Ana waters the fern on Sundays" in httpx.get(f"{serve.url}/memory/facts").text
