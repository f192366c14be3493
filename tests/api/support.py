"""A real `hilo serve` for the HTTP tests: uvicorn on a free loopback port, in a thread.

The socket is bound and listening before uvicorn starts, so the first request simply
waits in the backlog until the app is ready: nothing has to poll or sleep.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn

from app.config import Config
from app.serve import create_app
from tests.fake_ollama import FakeOllama

T = TypeVar("T")


class HiloServer:
    """`create_app(config)` served by uvicorn; `client(user=...)` speaks to it."""

    def __init__(self, config: Config, fake: FakeOllama | None = None) -> None:
        self.config = config
        self.fake = fake
        self.app = create_app(config)
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are
        # TCP, and without it every keep-alive request waits ~40 ms for a delayed ACK.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_config=None, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        daemon=True, name="hilo-serve")
        self._clients: dict[tuple[str | None, str | None], httpx.Client] = {}
        self._cache: dict[object, Any] = {}

    def start(self) -> HiloServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        for client in self._clients.values():
            client.close()
        self._server.should_exit = True
        self._thread.join()
        self._socket.close()

    def client(self, user: str | None = None, token: str | None = None) -> httpx.Client:
        """An HTTP client for the memory API, as `user` (else the default user).

        Kept per (user, token): making an httpx.Client costs tens of milliseconds.
        """
        client = self._clients.get((user, token))
        if client is None:
            headers = {}
            if user is not None:
                headers["X-Hilo-User"] = user
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
            self._clients[(user, token)] = client
        return client

    def cached(self, key: object, make: Callable[[], T]) -> T:
        """One client per key for the server's life (clients are slow to make)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def events(self, session: str, user: str | None = None) -> list[tuple[str, str]]:
        """(role, content) of a session's stored events, oldest first, as the API shows them."""
        response = self.client(user).get(f"/memory/sessions/{session}/events")
        assert response.status_code == 200, response.text
        return [(e["role"], e["content"]) for e in response.json()["events"]]


def serve(config: Config, fake: FakeOllama | None = None) -> Iterator[HiloServer]:
    if fake is not None:
        config = config.replace(llm={"url": fake.url})
    server = HiloServer(config, fake).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hilo(config: Config, data_dir, fake_ollama: FakeOllama) -> Iterator[HiloServer]:
    """Hilo in front of the fake model server, no token."""
    yield from serve(config, fake_ollama)
