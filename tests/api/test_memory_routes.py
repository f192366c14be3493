"""The JSON memory API of `hilo serve`, and that one user never sees another's rows."""

from __future__ import annotations

import ollama
import pytest

from tests.api.support import HiloServer

MODEL = "gemma3:4b"


# -- profile ---------------------------------------------------------------------------------


def test_profile_keys_can_be_set_listed_and_deleted(hilo: HiloServer) -> None:
    api = hilo.client()

    assert api.put("/memory/profile/Name", json={"value": "Ana"}).json()["action"] == "insert"
    assert api.put("/memory/profile/city", json={"value": "Madrid"}).status_code == 200
    assert api.put("/memory/profile/city", json={"value": "Lisboa"}).json()["action"] == "update"
    listed = api.get("/memory/profile").json()["profile"]
    assert [(p["key"], p["value"], p["source"]) for p in listed] == [
        ("city", "Lisboa", "user"), ("name", "Ana", "user")]

    assert api.delete("/memory/profile/city").json() == {"key": "city", "deleted": True}
    assert [p["key"] for p in api.get("/memory/profile").json()["profile"]] == ["name"]


def test_deleting_a_missing_profile_key_is_a_404(hilo: HiloServer) -> None:
    response = hilo.client().delete("/memory/profile/nothing")

    assert response.status_code == 404
    assert response.json() == {"error": "no profile key 'nothing'"}


def test_an_empty_profile_value_is_refused_with_the_reason(hilo: HiloServer) -> None:
    response = hilo.client().put("/memory/profile/name", json={"value": "   "})

    assert response.status_code == 400
    assert response.json() == {"error": "value must be non-empty text"}


# -- facts -----------------------------------------------------------------------------------


def test_facts_can_be_added_listed_and_deleted(hilo: HiloServer) -> None:
    api = hilo.client()
    added = api.post("/memory/facts", json={"category": "decision", "key": "database",
                                            "value": "Postgres 16"})
    assert added.status_code == 201
    fact = added.json()["fact"]
    assert (added.json()["action"], fact["category"], fact["value"]) == ("insert", "decision",
                                                                         "Postgres 16")

    changed = api.post("/memory/facts", json={"category": "decision", "key": "database",
                                              "value": "SQLite"}).json()
    assert changed["action"] == "supersede"
    assert [f["value"] for f in api.get("/memory/facts").json()["facts"]] == ["SQLite"]
    assert [f["value"] for f in api.get("/memory/facts?history=true").json()["facts"]] == [
        "SQLite", "Postgres 16"]
    history = api.get(f"/memory/facts/{changed['fact']['id']}").json()["history"]
    assert [(h["action"], h["new_value"]) for h in history] == [
        ("insert", "Postgres 16"), ("supersede", "SQLite")]

    assert api.delete(f"/memory/facts/{changed['fact']['id']}").json()["deleted"] is True
    assert api.get("/memory/facts").json()["facts"] == []
    assert api.delete(f"/memory/facts/{changed['fact']['id']}").status_code == 404


def test_facts_can_be_listed_by_category(hilo: HiloServer) -> None:
    api = hilo.client()
    api.post("/memory/facts", json={"category": "preference", "key": "editor", "value": "vim"})
    api.post("/memory/facts", json={"category": "fact", "key": "pet", "value": "a cat"})

    listed = api.get("/memory/facts", params={"category": "preference"}).json()["facts"]
    assert [f["key"] for f in listed] == ["editor"]
    assert api.get("/memory/facts", params={"category": "gossip"}).status_code == 422


def test_a_fact_with_an_unknown_category_is_refused(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/facts", json={"category": "rumour", "key": "k",
                                                         "value": "v"})

    assert response.status_code == 422
    assert "category" in response.json()["error"]


# -- search and context ----------------------------------------------------------------------


def test_search_finds_facts_and_events_and_explains_ranks(hilo: HiloServer) -> None:
    api = hilo.client()
    api.post("/memory/facts", json={"key": "bike", "value": "a red Brompton"})
    api.post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "user", "content": "my Brompton has a flat tyre"}]})

    hits = api.get("/memory/search", params={"q": "Brompton", "explain": "true"}).json()["hits"]

    assert [(h["kind"], h["text"]) for h in hits] == [
        ("fact", "fact · bike: a red Brompton"), ("event", "user: my Brompton has a flat tyre")]
    assert hits[0]["explain"]["ranks"]["bm25"] == 1
    assert hits[0]["explain"]["score"] > 0
    plain = api.get("/memory/search", params={"q": "Brompton"}).json()["hits"]
    assert "explain" not in plain[0]


def test_search_shows_what_ranks_highest_and_why(hilo: HiloServer) -> None:
    api = hilo.client()
    api.post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "user", "content": "my Brompton has a flat tyre"},
        {"role": "assistant", "content": "Patch kits are cheap."},
        {"role": "user", "content": "We cooked pasta on Friday"}]})

    hits = api.get("/memory/search", params={"q": "flat tyre"}).json()["hits"]

    assert (hits[0]["text"], hits[0]["why"]) == (
        "user: my Brompton has a flat tyre", {"words": ["flat", "tyre"]})
    # The reply beside it ranks next, for that reason; every hit says why it is there.
    assert hits[1]["text"] == "assistant: Patch kits are cheap."
    assert hits[1]["why"] == {"beside": hits[0]["id"], "link": "near"}
    assert all(h["why"] for h in hits)


def test_context_shows_what_the_model_would_get_and_why(hilo: HiloServer) -> None:
    api = hilo.client()
    api.put("/memory/profile/name", json={"value": "Ana"})
    api.post("/memory/facts", json={"key": "bike", "value": "a red Brompton"})
    api.post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi Ana"}]})

    context = api.post("/memory/context", json={
        "session_id": "s1", "text": "which bike do I ride?", "system": "Be brief."}).json()

    system, *window, question = context["messages"]
    assert system["content"].startswith("Be brief.")
    assert "name: Ana" in system["content"] and "a red Brompton" in system["content"]
    assert [m["content"] for m in window] == ["hello", "hi Ana"]
    assert question == {"role": "user", "content": "which bike do I ride?"}
    assert context["tokens"] <= context["budget"]
    layers = {layer["name"]: layer["status"] for layer in context["explain"]["layers"]}
    assert layers["profile"] == "included" and layers["facts"] == "included"
    assert context["explain"]["facts"][0]["why"] == "relevant"
    # Asking for the context stores nothing.
    assert len(hilo.events("s1")) == 2


# -- events and sessions ---------------------------------------------------------------------


def test_appended_events_are_stored_sanitised(hilo: HiloServer) -> None:
    secret = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"
    response = hilo.client().post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "user", "content": f"my key is {secret}"},
        {"role": "tool", "content": "42", "tool_name": "calculator"}]})

    assert response.status_code == 201
    stored = response.json()["events"]
    assert secret not in stored[0]["content"] and stored[0]["redactions"]
    assert [(role, content) for role, content in hilo.events("s1")][1] == ("tool", "42")


def test_events_and_facts_say_where_they_came_from(hilo: HiloServer) -> None:
    api = hilo.client()
    api.post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "user", "content": "hello"},
        {"role": "tool", "content": "sunny", "tool_name": "weather"}]})
    ollama.Client(host=hilo.url, headers={"X-Hilo-Session": "s2"}).chat(
        model=MODEL, messages=[{"role": "user", "content": "plan a trip"}])
    api.post("/memory/facts", json={"key": "city", "value": "Lisbon"})

    events = {s: api.get(f"/memory/sessions/{s}/events").json()["events"] for s in ("s1", "s2")}
    # Only the person's message as typed is theirs: what a client posts to the memory API
    # is its own word (app.memory.provenance), the reply to the typed message is Hilo's.
    assert [(e["role"], e["origin"], e["from_outside"]) for e in events["s1"] + events["s2"]] == [
        ("user", "client", True), ("tool", "client", True),
        ("user", "typed", False), ("assistant", "model", False)]
    assert [f["from_outside"] for f in api.get("/memory/facts").json()["facts"]] == [True]
    # A session holds content from outside once one of its events is.
    assert {s["id"]: s["from_outside"] for s in api.get("/memory/sessions").json()["sessions"]
            } == {"s1": True, "s2": False}


def test_an_event_with_an_unknown_role_is_refused(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "narrator", "content": "once upon a time"}]})

    assert response.status_code == 422
    assert "role" in response.json()["error"]


def test_sessions_are_listed_and_can_be_ended(hilo: HiloServer) -> None:
    api = hilo.client()
    ollama.Client(host=hilo.url, headers={"X-Hilo-Session": "trip"}).chat(
        model=MODEL, messages=[{"role": "user", "content": "plan a trip"}])

    sessions = api.get("/memory/sessions").json()["sessions"]
    assert [(s["id"], s["events"], s["ended_at"]) for s in sessions] == [("trip", 2, None)]

    assert api.post("/memory/sessions/trip/end").json() == {"session_id": "trip", "ended": True}
    assert api.get("/memory/sessions").json()["sessions"][0]["ended_at"] is not None
    assert api.post("/memory/sessions/trip/end").json()["ended"] is False
    assert api.post("/memory/sessions/nowhere/end").status_code == 404


# -- isolation -------------------------------------------------------------------------------


@pytest.fixture
def alice_has_memories(hilo: HiloServer) -> dict:
    alice = hilo.client(user="alice")
    alice.put("/memory/profile/name", json={"value": "Alice"})
    fact = alice.post("/memory/facts", json={"key": "passport", "value": "expires in May"})
    alice.post("/memory/events", json={"session_id": "diary", "events": [
        {"role": "user", "content": "my passport expires in May"}]})
    return {"fact_id": fact.json()["fact"]["id"]}


def test_one_user_cannot_read_anothers_memory_through_any_route(
        hilo: HiloServer, alice_has_memories: dict) -> None:
    bob = hilo.client(user="bob")
    fact_id = alice_has_memories["fact_id"]

    assert bob.get("/memory/profile").json() == {"profile": []}
    assert bob.get("/memory/facts").json() == {"facts": []}
    assert bob.get("/memory/facts?history=true").json() == {"facts": []}
    assert bob.get(f"/memory/facts/{fact_id}").status_code == 404
    assert bob.get("/memory/search", params={"q": "passport"}).json() == {"hits": []}
    assert bob.get("/memory/sessions").json() == {"sessions": []}
    assert bob.get("/memory/sessions/diary/events").status_code == 404
    context = bob.post("/memory/context", json={"session_id": "diary",
                                                "text": "when does my passport expire?"}).json()
    assert "Alice" not in context["messages"][0]["content"]
    assert "May" not in str(context["messages"])


def test_one_user_cannot_change_anothers_memory(hilo: HiloServer, alice_has_memories: dict) -> None:
    bob = hilo.client(user="bob")

    assert bob.delete(f"/memory/facts/{alice_has_memories['fact_id']}").status_code == 404
    assert bob.delete("/memory/profile/name").status_code == 404
    assert bob.post("/memory/sessions/diary/end").status_code == 404
    alice = hilo.client(user="alice")
    assert [f["value"] for f in alice.get("/memory/facts").json()["facts"]] == ["expires in May"]
    assert alice.get("/memory/profile").json()["profile"][0]["value"] == "Alice"


def test_a_chat_turn_only_carries_the_callers_memory(hilo: HiloServer,
                                                      alice_has_memories: dict) -> None:
    ollama.Client(host=hilo.url, headers={"X-Hilo-User": "bob", "X-Hilo-Session": "diary"}).chat(
        model=MODEL, messages=[{"role": "user", "content": "when does my passport expire?"}])

    sent = hilo.fake.bodies("/api/chat")[-1]["messages"]
    assert "Alice" not in sent[0]["content"] and "expires in May" not in str(sent)
    # Same session name, different users: two separate conversations.
    assert hilo.events("diary", user="alice") == [("user", "my passport expires in May")]
    assert len(hilo.events("diary", user="bob")) == 2


def test_a_user_header_that_is_too_long_is_refused(hilo: HiloServer) -> None:
    response = hilo.client(user="x" * 500).get("/memory/profile")

    assert response.status_code == 400
    assert "user must be" in response.json()["error"]
