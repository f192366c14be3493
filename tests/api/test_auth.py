"""`hilo serve` off loopback needs a token; with a token, every route but /health needs it."""

from __future__ import annotations

import httpx
import ollama
import openai
import pytest
from structlog.testing import capture_logs

from app.http.gate import TOKEN_COOKIE, WRONG_TOKEN_BURST, WrongTokens
from app.serve import BindRefused, check_bind, is_loopback, run_server
from tests.api.support import HiloServer, serve

TOKEN = "s3cret-token"
MODEL = "gemma3:4b"


@pytest.fixture
def guarded(config, data_dir, fake_ollama):
    yield from serve(config.replace(server={"token": TOKEN}), fake_ollama)


def test_refuses_to_listen_on_all_interfaces_without_a_token(config, data_dir, capsys) -> None:
    status = run_server(config, "0.0.0.0", 0)

    assert status == 2
    error = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0 without a token" in error
    assert "HILO_SERVER_TOKEN" in error


def test_a_token_allows_listening_anywhere() -> None:
    check_bind("0.0.0.0", TOKEN)
    check_bind("192.168.1.20", TOKEN)
    with pytest.raises(BindRefused):
        check_bind("192.168.1.20", "")


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.2", False),
    ("example.org", False)])
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("method, path", [
    ("GET", "/memory/profile"), ("GET", "/memory/facts"), ("GET", "/memory/sessions"),
    ("POST", "/api/chat"), ("GET", "/api/tags"), ("GET", "/openapi.json")])
def test_with_a_token_requests_without_it_get_401(guarded: HiloServer, method: str, path: str) -> None:
    response = guarded.client().request(method, path, json={})

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "Authorization: Bearer" in response.json()["error"]


def test_with_a_token_a_wrong_token_gets_401_in_openais_shape(guarded: HiloServer) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        openai.OpenAI(base_url=f"{guarded.url}/v1", api_key="wrong", max_retries=0).models.list()

    assert caught.value.body["type"] == "authentication_error"


def test_with_a_token_health_stays_open(guarded: HiloServer) -> None:
    response = guarded.client().get("/health")

    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_with_the_token_both_clients_chat_and_the_memory_api_answers(guarded: HiloServer) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}", "X-Hilo-Session": "s1"}
    reply = ollama.Client(host=guarded.url, headers=auth).chat(
        model=MODEL, messages=[{"role": "user", "content": "hello"}])
    completion = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=TOKEN, max_retries=0,
                               default_headers={"X-Hilo-Session": "s1"}).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}, {"role": "assistant",
                               "content": "ok: hello"}, {"role": "user", "content": "again"}])

    assert reply.message.content == "ok: hello"
    assert completion.choices[0].message.content == "ok: again"
    events = guarded.client(token=TOKEN).get("/memory/sessions/s1/events").json()["events"]
    assert [e["content"] for e in events] == ["hello", "ok: hello", "again", "ok: again"]


# -- guessing tokens ------------------------------------------------------------------------------


def from_address(server: HiloServer, address: str, token: str | None = None,
                 cookie: str | None = None) -> httpx.Client:
    """A client of `server` connecting from another loopback address (127.0.0.0/8)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie is not None:
        headers["Cookie"] = f"{TOKEN_COOKIE}={cookie}"
    return httpx.Client(base_url=server.url, headers=headers, timeout=30,
                        transport=httpx.HTTPTransport(local_address=address))


def test_wrong_tokens_from_one_address_are_held_back_after_a_burst(guarded: HiloServer) -> None:
    with capture_logs() as logged, from_address(guarded, "127.0.0.5", "wrong") as guesser:
        answers = [guesser.get("/memory/profile").status_code for _ in range(WRONG_TOKEN_BURST + 5)]
        limited = guesser.get("/memory/profile")
    assert answers == [401] * WRONG_TOKEN_BURST + [429] * 5
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert "too many wrong tokens from 127.0.0.5" in limited.json()["error"]
    with from_address(guarded, "127.0.0.5", TOKEN) as owner:  # not even checked meanwhile
        assert owner.get("/memory/profile").status_code == 429
    with from_address(guarded, "127.0.0.6", TOKEN) as elsewhere:
        assert elsewhere.get("/memory/profile").status_code == 200
    assert [e["client"] for e in logged if e["event"] == "gate.wrong_tokens_limited"] == [
        "127.0.0.5"]  # once, for the whole run of refusals


def test_wrong_tokens_signed_in_on_the_page_are_held_back_too(guarded: HiloServer) -> None:
    with from_address(guarded, "127.0.0.7", cookie="wrong") as browser:
        answers = [browser.get("/ui", headers={"Accept": "text/html"}).status_code
                   for _ in range(WRONG_TOKEN_BURST + 1)]
    assert answers == [303] * WRONG_TOKEN_BURST + [429]  # to /ui/login?refused=1, then held


def test_the_wrong_token_bucket_refills_with_time() -> None:
    now = [0.0]
    bucket = WrongTokens(burst=2, every=6.0, clock=lambda: now[0])
    bucket.wrong("a")
    bucket.wrong("a")
    assert bucket.wait("a") == 6.0 and bucket.wait("b") == 0.0
    now[0] = 3.0
    assert bucket.wait("a") == 3.0
    now[0] = 6.0
    assert bucket.wait("a") == 0.0
