"""DNS rebinding and cross-site requests: a web page cannot read or write the memory of a
Hilo listening on this machine, whatever Content-Type it sends."""

from __future__ import annotations

import pytest

from tests.api.support import HiloServer, serve

MODEL = "gemma3:4b"


@pytest.fixture
def with_a_fact(hilo: HiloServer) -> HiloServer:
    assert hilo.client().post("/memory/facts", json={"key": "city", "value": "Madrid"}).status_code == 201
    return hilo


def test_a_rebound_host_name_gets_403_and_no_memory(with_a_fact: HiloServer) -> None:
    response = with_a_fact.client().get("/memory/facts", headers={"Host": "attacker.example"})

    assert response.status_code == 403
    assert "Madrid" not in response.text
    assert "[server] allowed_hosts" in response.json()["error"]


@pytest.mark.parametrize("path", ["/memory/profile", "/api/tags", "/v1/models", "/openapi.json"])
def test_a_rebound_host_name_is_refused_on_every_route(hilo: HiloServer, path: str) -> None:
    response = hilo.client().get(path, headers={"Host": "attacker.example:11435"})

    assert response.status_code == 403


def test_a_rebound_chat_is_refused_before_anything_is_stored(hilo: HiloServer) -> None:
    response = hilo.client().post("/api/chat", headers={"Host": "evil.test", "X-Hilo-Session": "s1"},
                                  json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})

    assert response.status_code == 403
    assert hilo.fake.bodies("/api/chat") == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:11435", "localhost", "localhost:8080",
                                  "LOCALHOST.", "[::1]:11435", "app.localhost", "192.168.1.20:11435"])
def test_loopback_names_and_ip_addresses_are_served(with_a_fact: HiloServer, host: str) -> None:
    response = with_a_fact.client().get("/memory/facts", headers={"Host": host})

    assert response.status_code == 200
    assert "Madrid" in response.text


def test_a_configured_host_name_is_served(config, data_dir, fake_ollama) -> None:
    for server in serve(config.replace(server={"allowed_hosts": "hilo.home.arpa, *.lan"}),
                        fake_ollama):
        client = server.client()
        assert client.get("/memory/facts", headers={"Host": "hilo.home.arpa:11435"}).status_code == 200
        assert client.get("/memory/facts", headers={"Host": "box.lan"}).status_code == 200
        assert client.get("/memory/facts", headers={"Host": "attacker.example"}).status_code == 403


def test_a_cross_site_post_is_refused_whatever_its_content_type(hilo: HiloServer) -> None:
    # A form or fetch with text/plain needs no CORS preflight: the Origin check stops it.
    response = hilo.client().post(
        "/memory/facts", content=b'{"key": "planted", "value": "by a web page"}',
        headers={"Origin": "https://attacker.example", "Content-Type": "text/plain"})

    assert response.status_code == 403
    assert "[server] allowed_origins" in response.json()["error"]
    assert hilo.client().get("/memory/facts").json()["facts"] == []


def test_a_cross_site_chat_gets_403_in_openais_shape(hilo: HiloServer) -> None:
    response = hilo.client().post(
        "/v1/chat/completions", headers={"Origin": "https://attacker.example"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})

    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"


def test_a_cross_site_request_without_origin_is_refused_by_its_fetch_metadata(
        hilo: HiloServer) -> None:
    response = hilo.client().delete("/memory/profile/name", headers={"Sec-Fetch-Site": "cross-site"})

    assert response.status_code == 403


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://127.0.0.1:8080",
                                    "https://localhost", "http://[::1]:5173"])
def test_pages_on_this_machine_may_call_hilo(hilo: HiloServer, origin: str) -> None:
    response = hilo.client().post("/memory/facts", headers={"Origin": origin},
                                  json={"key": "city", "value": "Madrid"})

    assert response.status_code == 201


def test_a_page_hilo_served_itself_may_call_it(hilo: HiloServer) -> None:
    # The /docs page: its origin is the server's own.
    response = hilo.client().post("/memory/facts", headers={"Origin": hilo.url},
                                  json={"key": "city", "value": "Madrid"})

    assert response.status_code == 201


def test_a_configured_origin_may_call_hilo(config, data_dir, fake_ollama) -> None:
    settings = {"allowed_origins": "https://chat.example.com, https://*.example.org"}
    for server in serve(config.replace(server=settings), fake_ollama):
        client = server.client()
        for origin, status in [("https://chat.example.com", 200), ("https://ui.example.org", 200),
                               ("https://example.net", 403), ("null", 403)]:
            assert client.get("/memory/facts", headers={"Origin": origin}).status_code == status


def test_clients_that_are_not_browsers_send_no_origin_and_are_served(hilo: HiloServer) -> None:
    response = hilo.client().post("/memory/facts", json={"key": "city", "value": "Madrid"})

    assert response.status_code == 201
