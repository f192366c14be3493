"""The client's history wins: what a client sends is the conversation the model sees —
system prompt, few-shot examples, edits and all — with Hilo's memory added; Hilo
stores only what is new, never twice, and never sends an abandoned branch again."""

from __future__ import annotations

from tests.api.support import HiloServer
from tests.api.test_chat import (
    MODEL,
    assistant,
    ollama_client,
    openai_client,
    sent_to_model,
    user,
)


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def test_few_shot_examples_reach_the_model_and_are_not_remembered(hilo: HiloServer) -> None:
    few_shot = [system("Translate to French."), user("cat"), assistant("chat"),
                user("dog"), assistant("chien")]
    client = openai_client(hilo, "s1")
    client.chat.completions.create(model=MODEL, messages=[*few_shot, user("bird")])
    client.chat.completions.create(model=MODEL, messages=[
        *few_shot, user("bird"), assistant("ok: bird"), user("horse")])

    forwarded = sent_to_model(hilo, "/v1/chat/completions")
    assert forwarded[1:] == [user("cat"), assistant("chat"), user("dog"), assistant("chien"),
                             user("bird"), assistant("ok: bird"), user("horse")]
    assert forwarded[0]["content"].startswith("Translate to French.")
    assert hilo.events("s1") == [("user", "bird"), ("assistant", "ok: bird"),
                                 ("user", "horse"), ("assistant", "ok: horse")]


def test_an_edited_message_is_stored_once_and_the_old_branch_never_sent(hilo: HiloServer) -> None:
    client = ollama_client(hilo, "s1")
    client.chat(model=MODEL, messages=[user("plan a trip")])
    client.chat(model=MODEL, messages=[user("plan a trip"), assistant("ok: plan a trip"),
                                       user("to Rome")])

    # The user edits "to Rome" into "to Lisbon", then carries on from there.
    edited = [user("plan a trip"), assistant("ok: plan a trip"), user("to Lisbon")]
    client.chat(model=MODEL, messages=edited)
    client.chat(model=MODEL, messages=[*edited, assistant("ok: to Lisbon"), user("in May")])

    assert "Rome" not in str(sent_to_model(hilo)[1:])
    assert [c for role, c in hilo.events("s1") if role == "user"] == [
        "plan a trip", "to Rome", "to Lisbon", "in May"]


def test_a_regenerated_reply_replaces_the_first_in_what_the_model_sees(hilo: HiloServer) -> None:
    hilo.fake.script_chat("ok: hi", "First try.", "Second try.")
    client = ollama_client(hilo, "s1")
    client.chat(model=MODEL, messages=[user("hi")])
    history = [user("hi"), assistant("ok: hi"), user("a haiku")]
    client.chat(model=MODEL, messages=history)
    client.chat(model=MODEL, messages=history)  # regenerate

    client.chat(model=MODEL, messages=[*history, assistant("Second try."), user("another")])

    assert [m["content"] for m in sent_to_model(hilo)[1:]] == [
        "hi", "ok: hi", "a haiku", "Second try.", "another"]
    assert hilo.events("s1") == [
        ("user", "hi"), ("assistant", "ok: hi"), ("user", "a haiku"),
        ("assistant", "First try."), ("assistant", "Second try."),
        ("user", "another"), ("assistant", "ok: another")]


def test_continue_response_ending_on_an_assistant_message_is_answered(hilo: HiloServer) -> None:
    hilo.fake.script_chat("Once upon", " a time.")
    client = openai_client(hilo, "s1")
    client.chat.completions.create(model=MODEL, messages=[user("tell a story")])

    reply = client.chat.completions.create(model=MODEL, messages=[
        user("tell a story"), assistant("Once upon")])

    assert reply.choices[0].message.content == " a time."
    assert sent_to_model(hilo, "/v1/chat/completions")[-1] == assistant("Once upon")
    assert hilo.events("s1") == [("user", "tell a story"), ("assistant", "Once upon"),
                                 ("assistant", " a time.")]


def test_a_single_message_gets_the_stored_window(hilo: HiloServer) -> None:
    client = ollama_client(hilo, "s1")
    client.chat(model=MODEL, messages=[user("my name is Ana")])

    client.chat(model=MODEL, messages=[system("Be brief."), user("what is my name?")])

    forwarded = sent_to_model(hilo)
    assert forwarded[0]["content"].startswith("Be brief.")
    assert forwarded[1:] == [user("my name is Ana"), assistant("ok: my name is Ana"),
                             user("what is my name?")]


def test_the_clients_system_messages_stay_where_they_are(hilo: HiloServer) -> None:
    hilo.client().put("/memory/profile/city", json={"value": "Madrid"})
    parts = [{"type": "text", "text": "You are terse."}]
    messages = [{"role": "system", "content": parts}, user("a"), assistant("b"),
                system("Now answer in Spanish."), user("c")]
    openai_client(hilo, "s1").chat.completions.create(model=MODEL, messages=messages)

    forwarded = sent_to_model(hilo, "/v1/chat/completions")
    assert forwarded[0]["content"][0] == parts[0]
    assert "city: Madrid" in forwarded[0]["content"][1]["text"]
    assert forwarded[1:] == messages[1:]


def test_the_clients_num_ctx_sets_the_budget(hilo: HiloServer) -> None:
    long_value = "word " * 380  # about 475 tokens
    assert hilo.client().put("/memory/profile/notes", json={"value": long_value}).status_code == 200
    client = ollama_client(hilo, "s1")

    client.chat(model=MODEL, messages=[user("hi")], options={"num_ctx": 600})
    small = sent_to_model(hilo)[0]["content"]
    client.chat(model=MODEL, messages=[user("hi"), assistant("ok: hi"), user("again")],
                options={"num_ctx": 16384})
    large = sent_to_model(hilo)[0]["content"]

    assert "notes:" not in small and "notes:" in large
    assert hilo.fake.bodies("/api/chat")[-1]["options"] == {"num_ctx": 16384}


def test_the_same_words_again_in_a_new_turn_are_stored(hilo: HiloServer) -> None:
    client = openai_client(hilo, "s1")
    history = [user("yes")]
    for _ in range(2):
        reply = client.chat.completions.create(model=MODEL, messages=history)
        history += [assistant(reply.choices[0].message.content), user("yes")]

    assert [c for role, c in hilo.events("s1") if role == "user"] == ["yes", "yes"]


def test_a_message_a_client_augmented_for_one_request_is_not_stored_again(hilo: HiloServer) -> None:
    """Open WebUI adds retrieved documents to the user's message for that request only."""
    hilo.fake.script_chat("Hello.", "On May 3.", "You're welcome.")
    client = ollama_client(hilo, "s1")
    augmented = "When is the party?\n<context>Joana's party is on May 3</context>"
    client.chat(model=MODEL, messages=[user("hi")])
    client.chat(model=MODEL, messages=[user("hi"), assistant("Hello."), user(augmented)])

    client.chat(model=MODEL, messages=[user("hi"), assistant("Hello."), user("When is the party?"),
                                       assistant("On May 3."), user("thanks")])

    assert hilo.events("s1") == [("user", "hi"), ("assistant", "Hello."), ("user", augmented),
                                 ("assistant", "On May 3."), ("user", "thanks"),
                                 ("assistant", "You're welcome.")]
