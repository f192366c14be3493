"""Each door a secret could come through, one at a time (the end-to-end sweep over real
processes is test_secrets_never_leak.py): tool fields, the memory API, ids, the access log
and what is sent to the model server for embedding."""

from __future__ import annotations

import logging

import pytest

from app.db import QUEUE_DB
from app.http.access_log import PathOnly
from tests.api.support import HiloServer
from tests.reliability.secrets_corpus import Maker

MODEL = "gemma3:4b"
_MAKE = Maker("secret-paths")
STRIPE = "sk_live_" + _MAKE.chars(24)
HUGGING_FACE = "hf_" + _MAKE.chars(34, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
NPM = "npm_" + _MAKE.chars(36)


def test_tool_names_and_call_ids_are_redacted(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/events", json={"session_id": "s1", "events": [
        {"role": "tool", "content": "ok", "tool_name": f"deploy {STRIPE}", "tool_call_id": NPM}]})

    assert response.status_code == 201
    row = hilo.app.state.service.reader().execute(
        "SELECT tool_name, tool_call_id FROM events").fetchone()
    assert row == ("deploy [REDACTED:stripe_key]", "[REDACTED:npm_token]")


def test_fact_values_written_through_the_api_are_redacted(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/facts", json={
        "key": "deploy", "value": f"we deploy with {HUGGING_FACE}"})

    assert response.json()["fact"]["value"] == "we deploy with [REDACTED:huggingface_token]"
    assert HUGGING_FACE not in str(list(hilo.app.state.service.reader().execute(
        "SELECT * FROM facts")))


@pytest.mark.parametrize("key, value", [("wifi password", "swordfish"),
                                        ("contraseña del banco", "mariposa"),
                                        ("github token", "plainword")])
def test_a_profile_value_under_a_secrets_name_is_redacted_whole(hilo: HiloServer, key: str,
                                                                value: str) -> None:
    response = hilo.client().put(f"/memory/profile/{key}", json={"value": value})

    assert response.status_code == 200
    assert response.json()["value"].startswith("[REDACTED:")
    assert value not in str(hilo.client().get("/memory/profile").json())


def test_profile_values_in_prose_are_redacted(hilo: HiloServer) -> None:
    response = hilo.client().put("/memory/profile/note", json={"value": "mi contraseña es perro123"})

    assert response.json()["value"] == "mi contraseña es [REDACTED:password]"


def test_a_session_id_that_is_a_secret_is_refused_and_never_queued(hilo: HiloServer) -> None:
    response = hilo.client().post("/api/chat", headers={"X-Hilo-Session": STRIPE}, json={
        "model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}]})
    ok = hilo.client().post("/api/chat", headers={"X-Hilo-Session": "s1"}, json={
        "model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}]})

    assert response.status_code == 400
    assert "session looks like a secret (stripe_key)" in response.json()["error"]
    assert ok.status_code == 200  # the queue got the good one
    queue = b"".join(path.read_bytes() for path in hilo.config.data_dir.glob(f"{QUEUE_DB}*"))
    assert b"s1" in queue and STRIPE.encode() not in queue
    assert hilo.app.state.service.reader().execute(
        "SELECT id FROM sessions").fetchall() == [("s1",)]


@pytest.mark.parametrize("header", ["X-Hilo-User", "X-Hilo-Session"])
def test_ids_that_are_secrets_are_refused_on_every_route(hilo: HiloServer, header: str) -> None:
    response = hilo.client().get("/memory/facts", headers={header: NPM})

    assert response.status_code == 400
    assert NPM not in response.text


def test_the_openai_user_field_that_is_a_secret_is_refused(hilo: HiloServer) -> None:
    response = hilo.client().post("/v1/chat/completions", json={
        "model": MODEL, "user": NPM, "messages": [{"role": "user", "content": "hi"}]})

    assert response.status_code == 400


def test_the_access_log_has_no_query_strings(hilo: HiloServer, caplog) -> None:
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    hilo.client().get("/memory/search", params={"q": "where did I put the spare key"})
    hilo.client().get(f"/memory/sessions/{STRIPE}/events")

    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert any('"GET /memory/search HTTP/1.1" 200' in line for line in lines), lines
    assert not any("spare" in line or STRIPE in line for line in lines), lines
    assert any("/memory/sessions/[REDACTED:stripe_key]/events" in line for line in lines), lines


def test_the_access_log_filter_keeps_other_records_as_they_are() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "%s", ("x",), None)

    assert PathOnly().filter(record) and record.args == ("x",)


def test_search_and_context_queries_reach_the_embedder_redacted(hilo: HiloServer) -> None:
    hilo.client().get("/memory/search", params={"q": f"token {STRIPE}"})
    hilo.client().post("/memory/context", json={"session_id": "s1", "text": f"use {NPM}"})

    sent = str(hilo.fake.requests)
    assert STRIPE not in sent and NPM not in sent
    assert "[REDACTED:stripe_key]" in str(hilo.fake.bodies("/api/embed"))
