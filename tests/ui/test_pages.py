"""The memory page shows each layer as a person reads it: what is known, where it came
from, whether from outside, and what it was before."""

from __future__ import annotations

import re

from app.memory import store_fact
from app.turn.records import fold_recall_counts
from tests.api.support import HiloServer
from tests.ui.support import browser, text


def add_fact(hilo: HiloServer, category: str, key: str, value: str) -> dict:
    response = hilo.client().post("/memory/facts", json={"category": category, "key": key,
                                                         "value": value})
    assert response.status_code == 201, response.text
    return response.json()["fact"]


def test_a_browser_at_the_root_is_sent_to_the_memory_page(hilo: HiloServer) -> None:
    response = browser(hilo).get("/")

    assert response.status_code == 303
    assert response.headers["location"] == "/ui"
    assert hilo.client().get("/").text == "Ollama is running"  # clients still see Ollama


def test_the_overview_counts_the_layers_and_shows_the_latest_facts(hilo: HiloServer) -> None:
    add_fact(hilo, "preference", "editor", "I use Neovim")
    add_fact(hilo, "decision", "database", "Postgres 16")
    hilo.client().put("/memory/profile/name", json={"value": "Ana"})

    page = browser(hilo).get("/ui")

    assert page.status_code == 200
    assert '<meta name="viewport"' in page.text
    shown = text(page)
    assert "2 Facts" in shown and "1 Profile keys" in shown and "0 Context cards" in shown
    assert "preference · editor : I use Neovim" in shown
    assert "set by you" in shown


def test_every_asset_is_served_by_hilo(hilo: HiloServer) -> None:
    page = browser(hilo).get("/ui").text
    css = browser(hilo).get("/ui/static/hilo.css")

    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    assert "http://" not in page.replace(hilo.url, "") and "https://" not in page
    assert "@import" not in css.text and "url(" not in css.text


def test_pages_load_only_hilos_assets_and_refuse_to_be_framed(hilo: HiloServer) -> None:
    policy = browser(hilo).get("/ui/facts").headers["content-security-policy"]

    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_memory_text_is_shown_escaped(hilo: HiloServer) -> None:
    add_fact(hilo, "fact", "trap", '<script>alert("owned")</script><img src=x onerror=alert(1)>')

    for path in ("/ui", "/ui/facts", "/ui/search?q=alert"):
        page = browser(hilo).get(path)
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
        assert "&lt;script&gt;alert(" in page.text, path


def test_a_fact_shows_its_values_over_time_and_what_replaced_each(hilo: HiloServer) -> None:
    old = add_fact(hilo, "decision", "database", "Postgres 16")
    new = add_fact(hilo, "decision", "database", "SQLite, one file per user")

    page = text(browser(hilo).get(f"/ui/facts/{new['id']}"))

    assert "SQLite, one file per user" in page
    assert f"#{old['id']} Postgres 16" in page and f"by #{new['id']}" in page
    assert "supersede: Postgres 16 → SQLite, one file per user" in page
    old_page = text(browser(hilo).get(f"/ui/facts/{old['id']}"))
    assert "This is an old value: it was superseded" in old_page


def test_a_learned_fact_links_to_its_message_and_says_it_came_from_outside(
        hilo: HiloServer) -> None:
    stored = hilo.client().post("/memory/events", json={"session_id": "research", "events": [
        {"role": "user", "content": "what does the page say?"},
        {"role": "tool", "tool_name": "web_fetch", "content": "Ana moved to Lisbon."}]})
    tool_event = stored.json()["events"][1]
    service = hilo.app.state.service
    service.edit(lambda con: store_fact(con, "default", "fact", "city", "Ana lives in Lisbon",
                                        source="agent", worker="distill",
                                        source_event_id=tool_event["id"]))
    assert hilo.config.memory.user_id == "default"

    facts = browser(hilo).get("/ui/facts")
    shown = text(facts)

    assert "learned from a message returned by the tool web_fetch" in shown
    assert f"session research, message #{tool_event['id']}" in shown
    assert "from outside" in shown
    assert f'href="/ui/sessions/research#e{tool_event["id"]}"' in facts.text
    session = browser(hilo).get("/ui/sessions/research")
    assert f'id="e{tool_event["id"]}"' in session.text
    assert "Ana moved to Lisbon." in text(session)


def test_a_learned_fact_shows_the_message_that_supports_it(hilo: HiloServer) -> None:
    stored = hilo.client().post("/memory/events", json={"session_id": "family", "events": [
        {"role": "user", "content": "We moved to Lisbon last year."},
        {"role": "assistant", "content": "Lovely city."},
        {"role": "user", "content": "Good to know. My daughter Ana is allergic to peanuts. "
                                    "She is six."}]})
    supporting = stored.json()["events"][2]
    written = hilo.app.state.service.edit(lambda con: store_fact(
        con, "default", "fact", "daughter's allergy", "Ana is allergic to peanuts",
        source="agent", worker="distill", source_event_id=supporting["id"]))

    page = browser(hilo).get(f"/ui/facts/{written.fact_id}")

    assert ("Supported by: My daughter Ana is allergic to peanuts. — message 3 of session family"
            in text(page))
    assert f'href="/ui/sessions/family#e{supporting["id"]}">message 3 of session' in page.text


def test_search_ranks_as_the_chat_does_and_says_why_each_hit_matched(hilo: HiloServer) -> None:
    fact = add_fact(hilo, "preference", "editor", "I write code in Neovim every day")
    add_fact(hilo, "decision", "database", "Postgres 16")
    api = hilo.client().get("/memory/search", params={"q": "Neovim", "explain": True}).json()

    page = browser(hilo).get("/ui/search", params={"q": "Neovim"})

    shown = text(page)
    assert f"fact #{fact['id']}" in shown and "Postgres" not in shown
    assert "Why: words: neovim" in shown and "#1 by bm25" in shown
    assert [h["id"] for h in api["hits"]] == [fact["id"]]
    assert "Nothing matches" in text(browser(hilo).get("/ui/search", params={"q": "zebra"}))


def test_sessions_cards_and_diary_have_pages(hilo: HiloServer) -> None:
    hilo.client().post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "user", "content": "hello there"}]})

    sessions = text(browser(hilo).get("/ui/sessions"))
    assert "s1" in sessions and "Messages" in sessions
    assert "hello there" in text(browser(hilo).get("/ui/sessions/s1"))
    assert "No cards yet" in text(browser(hilo).get("/ui/cards"))
    assert "No diary entries yet" in text(browser(hilo).get("/ui/diary"))
    missing = browser(hilo).get("/ui/sessions/nowhere")
    assert missing.status_code == 404 and "no session 'nowhere'" in text(missing)


def test_a_fact_says_how_often_the_turns_recalled_it(hilo: HiloServer) -> None:
    editor = add_fact(hilo, "preference", "editor", "I use Neovim")
    for session in ("s1", "s2"):  # two new prompts that recall it
        hilo.client().post("/api/chat", headers={"X-Hilo-Session": session}, json={
            "model": "gemma3:4b", "stream": False,
            "messages": [{"role": "user", "content": "which editor do I use?"}]})
    service = hilo.app.state.service
    service.writer.submit(lambda con: None)  # the turns' records are committed

    before = text(browser(hilo).get(f"/ui/facts/{editor['id']}"))
    fold_recall_counts(service.writer)  # what the worker does every minute
    after = text(browser(hilo).get(f"/ui/facts/{editor['id']}"))

    assert "recalled 2 times" in before and "recalled 2 times" in after
    (fact,) = hilo.client().get("/memory/facts").json()["facts"]
    assert fact["access_count"] == 2


def test_sessions_are_listed_by_their_first_words_with_user_and_dates(hilo: HiloServer) -> None:
    hilo.client().post("/memory/events", json={"session_id": "auto-3f9c2d1e", "events": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Plan a three day trip to Lisbon in May, cheap hotels please"},
        {"role": "assistant", "content": "Sure."}]})

    page = browser(hilo).get("/ui/sessions")
    shown = text(page)

    assert "Plan a three day trip to Lisbon in…" in shown
    assert "User" in shown and "default" in shown and "Started" in shown
    link = re.search(r'<a href="/ui/sessions/auto-3f9c2d1e">([^<]+)</a>', page.text)
    assert link is not None and link.group(1).startswith("Plan a three day trip")
    api = hilo.client().get("/memory/sessions").json()["sessions"]
    assert api[0]["title"] == "Plan a three day trip to Lisbon in…"


def test_the_overviews_counters_link_to_their_pages(hilo: HiloServer) -> None:
    add_fact(hilo, "preference", "editor", "I use Neovim")

    page = browser(hilo).get("/ui").text
    counters = re.findall(r'<li><a href="(/ui/[a-z-]*)"><strong>(\d+)</strong> ([^<]+)</a></li>',
                          page)

    assert [(href, label) for href, _, label in counters] == [
        ("/ui/profile", "Profile keys"), ("/ui/facts", "Facts"), ("/ui/cards", "Context cards"),
        ("/ui/diary", "Diary entries"), ("/ui/sessions", "Sessions"),
        ("/ui/tasks", "Scheduled tasks")]
    assert ("/ui/facts", "1", "Facts") in counters


def test_an_unknown_address_is_an_html_page_saying_so(hilo: HiloServer) -> None:
    for path in ("/ui/nowhere", "/ui/facts/7/nothing", "/ui/sessions-typo"):
        page = browser(hilo).get(path)
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert f"No such page there is no page at {path}" in text(page)
    assert browser(hilo).get("/ui/static/hilo.css").status_code == 200
