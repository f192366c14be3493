"""Sessions are conversations, users are who the client says, and a client's own
housekeeping is not the user speaking."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.api.support import HiloServer
from tests.api.test_chat import MODEL, assistant, ollama_client, openai_client, user
from tests.fixtures import open_webui


def sessions(server: HiloServer, user_id: str | None = None) -> list[dict]:
    return server.client(user_id).get("/memory/sessions").json()["sessions"]


def all_events(server: HiloServer, user_id: str | None = None) -> list[tuple[str, str]]:
    return [event for s in sessions(server, user_id) for event in server.events(s["id"], user_id)]


# -- sessions -------------------------------------------------------------------------------


def test_two_chats_opening_with_the_same_words_stay_apart(hilo: HiloServer) -> None:
    hilo.fake.script_chat("Hi! (first chat)", "Hi! (second chat)")
    client = ollama_client(hilo)
    client.chat(model=MODEL, messages=[user("hello")])
    client.chat(model=MODEL, messages=[user("hello")])

    hilo.fake.script_chat("Lovely, a secret party.", "Sure, the budget.")
    first = [user("hello"), assistant("Hi! (first chat)"),
             user("let's plan a secret birthday party for Joana")]
    client.chat(model=MODEL, messages=first)
    client.chat(model=MODEL, messages=[user("hello"), assistant("Hi! (second chat)"),
                                       user("help me with my budget")])

    chats = {tuple(c for _, c in hilo.events(s["id"])) for s in sessions(hilo)}
    assert chats == {
        ("hello", "Hi! (first chat)", "let's plan a secret birthday party for Joana",
         "Lovely, a secret party."),
        ("hello", "Hi! (second chat)", "help me with my budget", "Sure, the budget.")}
    assert "Joana" not in str(hilo.fake.bodies("/api/chat")[-1]["messages"])


def test_a_conversation_without_an_id_continues_its_session(hilo: HiloServer) -> None:
    first = hilo.client().post("/v1/chat/completions", json={
        "model": MODEL, "messages": [user("plan my trip")]})
    history = [user("plan my trip"), assistant("ok: plan my trip"), user("to Lisbon")]
    second = hilo.client().post("/v1/chat/completions", json={"model": MODEL, "messages": history})

    assert second.headers["X-Hilo-Session"] == first.headers["X-Hilo-Session"]
    assert first.headers["X-Hilo-Session"].startswith("auto-")
    assert len(sessions(hilo)) == 1


def test_open_webuis_chat_id_names_the_session(hilo: HiloServer) -> None:
    ollama_client(hilo, **{"X-OpenWebUI-Chat-Id": "c0ffee-chat"}).chat(
        model=MODEL, messages=[user("hi")])

    assert hilo.events("c0ffee-chat") == [("user", "hi"), ("assistant", "ok: hi")]


# -- users -------------------------------------------------------------------------------------


def test_openais_user_field_is_the_user(hilo: HiloServer) -> None:
    openai_client(hilo).chat.completions.create(model=MODEL, messages=[user("I am Ana")],
                                                user="ana")

    assert all_events(hilo, "ana") == [("user", "I am Ana"), ("assistant", "ok: I am Ana")]
    assert sessions(hilo) == [] and sessions(hilo, "bob") == []


def test_x_hilo_user_wins_over_the_user_field(hilo: HiloServer) -> None:
    openai_client(hilo, **{"X-Hilo-User": "carla"}).chat.completions.create(
        model=MODEL, messages=[user("hi")], user="ana")

    assert len(all_events(hilo, "carla")) == 2 and sessions(hilo, "ana") == []


def test_a_user_field_that_is_no_id_is_refused(hilo: HiloServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(hilo).chat.completions.create(model=MODEL, messages=[user("hi")],
                                                    user="x" * 500)

    assert "user must be 1 to 200 printable characters" in caught.value.body["message"]


# -- housekeeping --------------------------------------------------------------------------


# Open WebUI with ENABLE_FORWARD_USER_INFO_HEADERS=true, as docs/clients.md recommends: its
# task requests name the chat they are about.
OPEN_WEBUI_HEADERS = {"X-OpenWebUI-User-Name": "Ana", "X-OpenWebUI-User-Id": "u-1",
                      "X-OpenWebUI-User-Role": "user", "X-OpenWebUI-Chat-Id": "chat-1"}


@pytest.mark.parametrize("version", open_webui.VERSIONS)
@pytest.mark.parametrize("task", range(len(open_webui.TASKS)), ids=open_webui.TASKS)
def test_open_webuis_background_requests_are_relayed_without_memory_and_not_stored(
        hilo: HiloServer, version: str, task: int) -> None:
    hilo.client().put("/memory/profile/name", json={"value": "Ana"})
    body = open_webui.fixture(version)["requests"][task]["body"]

    response = hilo.client().post("/api/chat", json=body, headers=OPEN_WEBUI_HEADERS)

    assert response.status_code == 200 and response.json()["done"]
    assert hilo.fake.bodies("/api/chat")[-1] == body  # as sent: no memory added
    assert sessions(hilo) == []


@pytest.mark.parametrize("wording", [
    "Write a two-word title for the chat history below.",
    "Predict the user's mood from the chat.",
])
def test_a_task_prompt_in_new_words_is_known_by_its_structure(hilo: HiloServer,
                                                              wording: str) -> None:
    """A later Open WebUI rewords its prompts; their shape stays."""
    prompt = (f"### Task:\n{wording}\n### Guidelines:\n- Be brief.\n### Output:\n"
              'JSON format: { "answer": "..." }\n### Chat History:\n<chat_history>\n'
              "USER: let's plan a secret birthday party for Joana\nASSISTANT: Lovely!\n"
              "</chat_history>")
    body = {"model": MODEL, "messages": [user(prompt)], "stream": False}

    hilo.client().post("/api/chat", json=body, headers=OPEN_WEBUI_HEADERS)

    assert hilo.fake.bodies("/api/chat")[-1] == body
    assert sessions(hilo) == []


def test_three_chats_with_open_webui_store_only_what_was_said(hilo: HiloServer) -> None:
    said = 0
    for chat in ("quiche recipe", "a trip to Porto", "fix my bike"):
        history = [user(chat)]
        for turn in range(2):
            reply = hilo.client().post("/api/chat", json={
                "model": MODEL, "messages": history, "stream": False}).json()
            history.append(assistant(reply["message"]["content"]))
            said += 2
            for body in open_webui.task_requests(MODEL, history)[:3]:  # title, tags, follow-ups
                hilo.client().post("/api/chat", json=body)
            history.append(user(f"more about {chat} ({turn})"))

    stored = all_events(hilo)
    assert len(stored) == said == 12
    assert not any("### Task" in content for _, content in stored)
    assert len(sessions(hilo)) == 3


def test_a_chat_whose_message_quotes_documents_is_remembered(hilo: HiloServer) -> None:
    """Open WebUI's RAG template also opens with "### Task:" — but it is the user asking."""
    rag = ("### Task:\nRespond to the user query using the provided context, incorporating "
           "inline citations.\n<context>Joana's party is on May 3</context>\n"
           "When is the party?")
    hilo.client().post("/api/chat", json={"model": MODEL, "messages": [user(rag)]},
                       headers={"X-Hilo-Session": "s1"})

    assert hilo.events("s1")[0] == ("user", rag)


def test_a_client_marks_a_request_not_to_remember(hilo: HiloServer) -> None:
    body = {"model": MODEL, "messages": [user("summarise our chat")], "stream": False}
    response = hilo.client().post("/api/chat", json=body, headers={"X-Hilo-Remember": "no"})

    assert response.status_code == 200
    assert hilo.fake.bodies("/api/chat")[-1] == body
    assert sessions(hilo) == []


def test_housekeeping_patterns_are_configurable(config, data_dir, fake_ollama) -> None:
    from tests.api.support import serve

    patterns = ("^Summarise this thread:",)
    for server in serve(config.replace(server={"housekeeping_patterns": patterns}), fake_ollama):
        client = httpx.Client(base_url=server.url)
        client.post("/api/chat", json={"model": MODEL, "messages": [
            user("Summarise this thread: a, b")]})
        emoji = open_webui.TASKS.index("emoji")
        client.post("/api/chat", json=open_webui.task_requests(
            MODEL, [user("a"), assistant("b")])[emoji])
        client.close()

        # Only the configured pattern is housekeeping now: Open WebUI's emoji is stored.
        assert [c for _, c in all_events(server) if c.startswith("Your task is")]
        assert not [c for _, c in all_events(server) if c.startswith("Summarise")]
