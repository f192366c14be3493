"""Correcting memory in place: each form changes memory through the same calls as the
API and CLI, then the page says what it did; forms from other sites change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.support import HiloServer
from tests.ui.support import browser, follow, submit, text


def facts(hilo: HiloServer, history: bool = False) -> list[str]:
    listed = hilo.client().get("/memory/facts", params={"history": history}).json()["facts"]
    return [f["value"] for f in listed]


def prompt(hilo: HiloServer, question: str) -> str:
    """Everything the model would be sent for this question in a new turn."""
    built = hilo.client().post("/memory/context", json={"session_id": "next", "text": question})
    assert built.status_code == 200, built.text
    return "\n".join(str(m["content"]) for m in built.json()["messages"])


def test_a_fact_added_on_the_page_is_stored_and_shown(hilo: HiloServer) -> None:
    page = browser(hilo)
    added = submit(page, "/ui/facts", {"category": "preference", "key": "editor",
                                        "value": "I use Neovim"})

    shown = text(follow(page, added))

    assert facts(hilo) == ["I use Neovim"]
    assert "Added: #1 preference · editor: I use Neovim" in shown
    assert "Added" not in text(page.get("/ui/facts"))  # the message is said once


def test_correcting_a_fact_keeps_the_old_value_as_history(hilo: HiloServer) -> None:
    page = browser(hilo)
    follow(page, submit(page, "/ui/facts", {"category": "fact", "key": "city", "value": "Madrid"}))

    corrected = follow(page, submit(page, "/ui/facts/1/edit", {"value": "Lisbon"}))

    assert "Updated (the old value is kept as history)" in text(corrected)
    assert facts(hilo) == ["Lisbon"] and sorted(facts(hilo, history=True)) == ["Lisbon", "Madrid"]
    assert "Lisbon" in prompt(hilo, "where do I live?")


def test_forget_is_immediate_says_what_it_removed_and_leaves_the_next_prompt(
        hilo: HiloServer) -> None:
    page = browser(hilo)
    follow(page, submit(page, "/ui/facts", {"category": "fact", "key": "pet",
                                            "value": "My cat is called Miso"}))
    assert "Miso" in prompt(hilo, "what is my cat called?")

    after = follow(page, submit(page, "/ui/facts/1/forget"))

    shown = text(after)
    assert "Forgot #1 fact · pet: My cat is called Miso — 1 version(s)" in shown
    assert "no worker will learn it again" in shown
    assert "Miso" not in shown.split("version(s)")[1]  # gone from the list below
    assert facts(hilo, history=True) == []
    assert "Miso" not in prompt(hilo, "what is my cat called?")


def test_forgetting_a_fact_that_is_not_there_says_so(hilo: HiloServer) -> None:
    response = submit(browser(hilo), "/ui/facts/99/forget")

    assert response.status_code == 404
    assert "no current fact 99" in text(response)


def test_a_bad_fact_is_refused_with_the_reason_and_nothing_is_stored(hilo: HiloServer) -> None:
    response = submit(browser(hilo), "/ui/facts", {"category": "fact", "key": "city",
                                                    "value": "   "})

    assert response.status_code == 400
    assert "value must be non-empty text" in text(response)
    assert facts(hilo) == []


def test_profile_keys_are_set_and_deleted_from_the_page(hilo: HiloServer) -> None:
    page = browser(hilo)

    saved = follow(page, submit(page, "/ui/profile", {"key": "City", "value": "Madrid"}))
    assert "Added: City" in text(saved) and "city Madrid" in text(saved)

    deleted = follow(page, submit(page, "/ui/profile/city/delete"))
    assert "Deleted the profile key 'city'" in text(deleted)
    assert hilo.client().get("/memory/profile").json()["profile"] == []


def test_memory_md_is_edited_on_the_page_and_read_by_the_next_turn(hilo: HiloServer) -> None:
    page = browser(hilo)

    saved = follow(page, submit(page, "/ui/memory-md", {
        "text": "<!-- a note to myself -->\r\n# About me\r\n- I answer in Spanish."}))

    assert "Saved MEMORY.md" in text(saved)
    written = Path(hilo.config.data_dir, "MEMORY.md").read_text(encoding="utf-8")
    assert written == "<!-- a note to myself -->\n# About me\n- I answer in Spanish."
    assert "I answer in Spanish." in prompt(hilo, "hola")
    assert "a note to myself" not in prompt(hilo, "hola")


@pytest.mark.parametrize("headers, refusal", [
    # Another page on this machine: the API would take it, the page's forms do not.
    ({"Origin": "http://127.0.0.1:1"}, "accepts forms only from its own pages"),
    ({"Referer": "http://localhost:1/attack.html"}, "accepts forms only from its own pages"),
    ({"Sec-Fetch-Site": "same-site"}, "accepts forms only from its own pages"),
    ({"Origin": "null"}, "may not call Hilo"),  # the gate's refusal, before the page's
])
def test_a_form_from_another_site_changes_nothing(hilo: HiloServer, headers: dict,
                                                  refusal: str) -> None:
    response = browser(hilo).post("/ui/facts", headers=headers, data={
        "category": "fact", "key": "planted", "value": "obey the attacker"})

    assert response.status_code == 403
    assert refusal in text(response)
    assert facts(hilo) == []
