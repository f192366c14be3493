"""Events: the front-end's only write — sanitised, capped, never crashing on odd input."""

from __future__ import annotations

import json

import pytest

from app.db import connect_readonly
from app.events import InvalidEvent, append_event, session_events


def stored(writer, event_id: int) -> tuple:
    con = connect_readonly(writer.path)
    return con.execute(
        "SELECT content, original_length, role, created_at FROM events WHERE id = ?", (event_id,)
    ).fetchone()


def test_event_is_stored_with_session_and_rfc3339_time(writer, config):
    event = append_event(writer, config, "ana", "s1", "user", "hola, soy Ana")
    content, original_length, role, created_at = stored(writer, event.id)
    assert (content, original_length, role) == ("hola, soy Ana", None, "user")
    assert created_at.endswith("Z") and "T" in created_at
    con = connect_readonly(writer.path)
    assert con.execute("SELECT id FROM sessions WHERE user_id = 'ana'").fetchall() == [("s1",)]
    assert event.importance == config.importance.user


def test_secrets_are_redacted_before_the_first_write(writer, config):
    key = "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"
    event = append_event(writer, config, "ana", "s1", "user", f"my key is {key}, keep it")
    content = stored(writer, event.id)[0]
    assert key not in content and "[REDACTED:api_key]" in content
    assert event.redactions == ("api_key",)
    con = connect_readonly(writer.path)
    hits = con.execute("SELECT count(*) FROM events_fts WHERE events_fts MATCH ?",
                       ('"Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"',)).fetchone()[0]
    assert hits == 0


def test_huge_message_is_truncated_with_a_visible_marker(writer, config):
    text = "log line\n" * 20_000  # 180,000 characters
    event = append_event(writer, config, "ana", "s1", "tool", text)
    content, original_length, _, _ = stored(writer, event.id)
    assert original_length == len(text)
    assert len(content) <= config.memory.max_message_chars
    assert content.endswith(f"[… truncated by Hilo: {len(text)} characters in all]")


def test_binary_bytes_become_a_marker(writer, config):
    blob = bytes(range(256)) * 40
    event = append_event(writer, config, "ana", "s1", "tool", blob)
    assert stored(writer, event.id)[0] == f"[binary content omitted: {len(blob)} bytes]"


def test_invalid_utf8_and_nul_bytes_are_stored_safely(writer, config):
    raw = "café ".encode() + b"\xff\xfe broken \x00 bytes"
    event = append_event(writer, config, "ana", "s1", "user", raw)
    content = stored(writer, event.id)[0]
    assert content.startswith("café ") and "\x00" not in content and "broken" in content


def test_lone_surrogates_do_not_crash(writer, config):
    event = append_event(writer, config, "ana", "s1", "user", "bad \udcff surrogate")
    assert "surrogate" in stored(writer, event.id)[0]


@pytest.mark.parametrize("role", ["robot", "", "USER"])
def test_bad_role_is_a_clear_error_and_nothing_is_stored(writer, config, role):
    with pytest.raises(InvalidEvent, match="role must be one of user, assistant, tool, system"):
        append_event(writer, config, "ana", "s1", role, "hi")
    assert connect_readonly(writer.path).execute("SELECT count(*) FROM events").fetchone() == (0,)


@pytest.mark.parametrize("field, value", [("user_id", ""), ("session_id", "x" * 500)])
def test_bad_ids_are_clear_errors(writer, config, field, value):
    ids = {"user_id": "ana", "session_id": "s1", field: value}
    with pytest.raises(InvalidEvent, match=field):
        append_event(writer, config, ids["user_id"], ids["session_id"], "user", "hi")


def test_tool_calls_are_kept_as_json_and_sanitised(writer, config):
    calls = [{"function": {"name": "db", "arguments": {"dsn": "postgres://app:s3cret@db/x"}}}]
    event = append_event(writer, config, "ana", "s1", "assistant", "", tool_calls=calls)
    assert "s3cret" not in event.tool_calls_json and '"db"' in event.tool_calls_json


@pytest.mark.parametrize("arguments, secret", [
    ({"command": 'curl -H "Authorization: Basic dXNlcjpwYXNzd29yZA==" https://x'},
     "dXNlcjpwYXNzd29yZA=="),
    ({"headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}}, "dXNlcjpwYXNzd29yZA=="),
    ('{"password": "Plum-Tree-4417"}', "Plum-Tree-4417"),  # arguments left as JSON text
])
def test_a_tool_call_with_a_secret_is_stored_redacted_and_still_parses(writer, config,
                                                                       arguments, secret):
    calls = [{"id": "c1", "name": "terminal", "arguments": arguments}]
    event = append_event(writer, config, "ana", "s1", "assistant", "", tool_calls=calls)
    assert secret not in event.tool_calls_json and "[REDACTED:" in event.tool_calls_json
    [stored] = json.loads(event.tool_calls_json)  # the call is still there to pair
    assert (stored["id"], stored["name"]) == ("c1", "terminal")


def test_session_events_returns_the_latest_in_order(writer, config):
    for i in range(5):
        append_event(writer, config, "ana", "s1", "user", f"message {i}")
    append_event(writer, config, "bob", "s1", "user", "not ana's")
    con = connect_readonly(writer.path)
    window = session_events(con, "ana", "s1", limit=3)
    assert [e.content for e in window] == ["message 2", "message 3", "message 4"]
