"""Odd but valid input gets a 4xx with a clear message, or is cleaned: never a 500, and
nothing empty or garbled is stored."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

from app.config import Config
from app.events import MAX_TOOL_NAME_LENGTH, InvalidEvent, append_event
from tests.api.support import HiloServer

MODEL = "gemma3:4b"


def stored_rows(hilo: HiloServer, sql: str) -> list[tuple]:
    return list(hilo.app.state.service.reader().execute(sql))


def chat(hilo: HiloServer, body: bytes, session: str | None = None):
    headers = {"Content-Type": "application/json"}
    if session is not None:
        headers["X-Hilo-Session"] = session
    return hilo.client().post("/api/chat", content=body, headers=headers)


def test_a_lone_surrogate_in_the_first_message_is_answered_and_stored_cleaned(
        hilo: HiloServer) -> None:
    # No session header: the session is derived from the first message, surrogate and all.
    response = chat(hilo, b'{"model": "gemma3:4b", "stream": false, "messages": '
                          b'[{"role": "user", "content": "hola \\ud800 amigo"}]}')

    assert response.status_code == 200, response.text
    assert stored_rows(hilo, "SELECT content FROM events WHERE role = 'user'") == [
        ("hola ? amigo",)]


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("fact_id", [2**63, 2**64, 10**30])
def test_a_fact_id_beyond_sqlites_range_is_a_4xx(hilo: HiloServer, method: str,
                                                  fact_id: int) -> None:
    response = hilo.client().request(method, f"/memory/facts/{fact_id}")

    assert 400 <= response.status_code < 500
    assert "fact_id" in response.json()["error"]


def test_a_nul_only_message_is_refused_and_nothing_is_stored(hilo: HiloServer) -> None:
    response = chat(hilo, b'{"model": "gemma3:4b", "stream": false, "messages": '
                          b'[{"role": "user", "content": "\\u0000\\u0000"}]}', "s1")

    assert response.status_code == 400
    # Worded by the one place events are validated (app/events.py).
    assert response.json()["error"] == "content is empty: a user message needs text"
    assert stored_rows(hilo, "SELECT count(*) FROM events") == [(0,)]


def test_a_request_whose_last_message_is_refused_stores_none_of_its_messages(
        hilo: HiloServer) -> None:
    # The reply before it is new too: a request's messages are stored all together or not.
    hilo.client().post("/api/chat", headers={"X-Hilo-Session": "s1"}, json={
        "model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}]})
    response = chat(hilo, b'{"model": "gemma3:4b", "stream": false, "messages": ['
                          b'{"role": "user", "content": "hi"},'
                          b'{"role": "assistant", "content": "an answer the client edited"},'
                          b'{"role": "user", "content": "\\u0000"}]}', "s1")

    assert response.status_code == 400
    assert stored_rows(hilo, "SELECT role, content FROM events ORDER BY id") == [
        ("user", "hi"), ("assistant", "ok: hi")]


def test_a_lone_surrogate_in_the_system_prompt_is_cleaned(hilo: HiloServer) -> None:
    response = chat(hilo, b'{"model": "gemma3:4b", "stream": false, "messages": ['
                          b'{"role": "system", "content": "be brief \\udc80"},'
                          b'{"role": "user", "content": "hi"}]}', "s1")

    assert response.status_code == 200, response.text
    assert "be brief ?" in hilo.fake.bodies("/api/chat")[-1]["messages"][0]["content"]


def test_a_nul_only_message_resent_in_a_session_is_refused_too(hilo: HiloServer) -> None:
    # With a stored message the resend check runs first; it must not turn this into a 500.
    hilo.client().post("/api/chat", headers={"X-Hilo-Session": "s1"}, json={
        "model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}]})
    response = chat(hilo, b'{"model": "gemma3:4b", "stream": false, "messages": '
                          b'[{"role": "user", "content": "\\u0000"}]}', "s1")

    assert response.status_code == 400


def test_content_parts_whose_text_is_not_a_string_are_refused(hilo: HiloServer) -> None:
    response = hilo.client().post("/v1/chat/completions", headers={"X-Hilo-Session": "s1"}, json={
        "model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "text", "text": {"nested": "object"}}]}]})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == 'the "text" of a text content part must be a string'
    assert stored_rows(hilo, "SELECT count(*) FROM events") == [(0,)]


def test_nul_bytes_are_dropped_from_fact_keys_and_values(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/facts", json={"key": "ci\x00ty", "value": "Ma\x00drid"})

    assert response.status_code == 201
    assert (response.json()["fact"]["key"], response.json()["fact"]["value"]) == ("city", "Madrid")
    assert stored_rows(hilo, "SELECT key, value FROM facts") == [("city", "Madrid")]


def test_nul_bytes_are_dropped_from_profile_keys_and_values(hilo: HiloServer) -> None:
    response = hilo.client().put("/memory/profile/na%00me", json={"value": "A\x00na"})

    assert response.status_code == 200
    assert response.json() == {"key": "name", "value": "Ana", "action": "insert"}
    assert stored_rows(hilo, "SELECT key, value FROM profile") == [("name", "Ana")]


@pytest.mark.parametrize("key", ["\x00", "na\x01me", "\x00\x00 "])
def test_a_key_of_control_characters_is_refused(hilo: HiloServer, key: str) -> None:
    response = hilo.client().post("/memory/facts", json={"key": key, "value": "x"})

    assert response.status_code == 400
    assert "key must be" in response.json()["error"]
    assert stored_rows(hilo, "SELECT count(*) FROM facts") == [(0,)]


def test_nul_bytes_are_dropped_from_tool_fields(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "tool", "content": "42", "tool_name": "calc\x00", "tool_call_id": "c\x00all-1"}]})

    assert response.status_code == 201
    assert stored_rows(hilo, "SELECT tool_name, tool_call_id FROM events") == [("calc", "call-1")]


def test_a_megabyte_tool_name_is_refused(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "tool", "content": "42", "tool_name": "x" * 1_000_000}]})

    assert response.status_code == 400
    assert f"at most {MAX_TOOL_NAME_LENGTH}" in response.json()["error"]
    assert stored_rows(hilo, "SELECT count(*) FROM events") == [(0,)]


def test_nul_bytes_inside_tool_calls_are_dropped(writer, config: Config) -> None:
    calls = [{"function": {"name": "sh\x00", "arguments": {"cmd": "ls\x00 -l"}}}]
    event = append_event(writer, config, "ana", "s1", "assistant", "", tool_calls=calls)

    assert "\\u0000" not in event.tool_calls_json and "\x00" not in event.tool_calls_json
    assert '"ls -l"' in event.tool_calls_json


def test_a_tool_name_that_is_not_text_is_refused(writer, config: Config) -> None:
    with pytest.raises(InvalidEvent, match="tool_name must be a string"):
        append_event(writer, config, "ana", "s1", "tool", "42", tool_name=["calc"])


ODD_TEXTS = ["\ud800", "\udfff\ud800", "\x00", "a\x00b", "\x1b[31m", "\u202e", "\ufeff",
             "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "x" * 5000, " ", "\n\t", "'\"; DROP TABLE facts; --", "NEAR(a b)",
             "* OR 1=1", "%00", "\\u0000"]


def send(client: httpx.Client, method: str, url: str, body: object, **headers: str):
    """JSON with ASCII escapes, so lone surrogates travel as a client would send them."""
    return client.request(method, url, content=json.dumps(body),
                          headers={"Content-Type": "application/json", **headers})


@pytest.mark.parametrize("text", ODD_TEXTS, ids=range(len(ODD_TEXTS)))
def test_the_memory_routes_never_answer_odd_text_with_a_500(hilo: HiloServer, text: str) -> None:
    client = hilo.client()
    in_url = quote(text.encode("utf-8", "surrogatepass"), safe="")
    responses = [
        send(client, "POST", "/memory/facts", {"key": text, "value": text}),
        send(client, "PUT", f"/memory/profile/{in_url[:300] or 'k'}", {"value": text}),
        client.get(f"/memory/search?q={in_url}"),
        send(client, "POST", "/memory/context", {"session_id": "s1", "text": text}),
        send(client, "POST", "/memory/events", {"session_id": "s1", "events": [
            {"role": "user", "content": text, "tool_name": text[:200], "tool_call_id": text[:200]}]}),
        send(client, "POST", "/api/chat", {
            "model": MODEL, "stream": False, "messages": [{"role": "user", "content": text}]},
            **{"X-Hilo-Session": "s1"}),
    ]

    assert [r.status_code for r in responses if r.status_code >= 500] == []
    for response in responses:
        if response.status_code >= 400:
            assert response.json()["error"], "an error without a message"
    contents = stored_rows(hilo, "SELECT content, coalesce(tool_name, ''), "
                                 "coalesce(tool_call_id, '') FROM events")
    assert all("\x00" not in field for row in contents for field in row)
    assert all(row[0].strip() for row in contents), "an empty event was stored"


@pytest.mark.parametrize("content", ["\x00", "\x00 \x00", b"\x00\x00"])
def test_an_event_of_nul_bytes_only_is_refused(writer, config: Config, content) -> None:
    with pytest.raises(InvalidEvent, match="no text once NUL bytes"):
        append_event(writer, config, "ana", "s1", "user", content)


@pytest.mark.parametrize("role", ["user", "system", "assistant"])
def test_an_empty_message_is_refused_but_an_empty_tool_result_is_kept(writer, config: Config,
                                                                       role: str) -> None:
    with pytest.raises(InvalidEvent, match="content is empty"):
        append_event(writer, config, "ana", "s1", role, " \n")
    assert append_event(writer, config, "ana", "s1", "tool", "").content == ""


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("levels", [500, 5_000, 100_000])
@pytest.mark.parametrize("path, body", [
    ("/api/chat", '{"model": "gemma3:4b", "messages": [{"role": "user", "content": "hi"}], '
                  '"options": %s}'),
    ("/v1/chat/completions", '{"model": "gemma3:4b", "messages": '
                             '[{"role": "user", "content": %s}]}'),
    ("/api/chat", '{"model": "gemma3:4b", "messages": %s}'),
])
def test_a_body_nested_too_deep_is_a_400_in_the_apis_shape_and_nothing_is_stored(
        hilo: HiloServer, path: str, body: str, levels: int) -> None:
    response = hilo.client().post(path, content=body % nested(levels),
                                  headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    message = error["message"] if path.startswith("/v1/") else error
    assert message == "the request body nests deeper than 100 levels: send flatter JSON"
    assert stored_rows(hilo, "SELECT count(*) FROM events") == [(0,)]
    # The same keep-alive connection still answers.
    assert hilo.client().get("/health").status_code == 200


def test_a_body_nested_as_deep_as_allowed_is_answered(hilo: HiloServer) -> None:
    body = ('{"model": "gemma3:4b", "stream": false, "messages": [{"role": "user", '
            '"content": "hi"}], "options": {"a": ' + nested(98) + '}}')

    response = chat(hilo, body.encode(), "s1")

    assert response.status_code == 200, response.text
    assert stored_rows(hilo, "SELECT content FROM events WHERE role = 'user'") == [("hi",)]


def test_a_memory_route_body_nested_beyond_the_parser_is_a_400_saying_so(
        hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/facts", content='{"key": "a", "value": '
                                  + nested(100_000) + "}", headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    assert response.json()["error"] == ("the request body nests deeper than 100 levels: "
                                        "send flatter JSON")
    assert stored_rows(hilo, "SELECT count(*) FROM facts") == [(0,)]
