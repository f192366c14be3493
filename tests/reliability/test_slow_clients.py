"""Slow clients are timed out: a connection whose headers never finish is closed."""

from __future__ import annotations

import socket
import threading

import uvicorn

from app.api import create_app
from app.api.timeouts import HeaderTimeoutProtocol, timeout_settings

DEADLINE = 0.5


class QuickHeaderTimeout(HeaderTimeoutProtocol):
    header_timeout = DEADLINE


def serve(config):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    settings = {**timeout_settings(), "http": QuickHeaderTimeout}
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_config=None, lifespan="on",
                                           **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return server, thread, sock


def closed_within(conn: socket.socket, seconds: float) -> bool:
    conn.settimeout(seconds)
    try:
        return conn.recv(1024) == b""
    except socket.timeout:
        return False


def test_incomplete_headers_are_timed_out_and_a_full_request_is_served(config, data_dir):
    server, thread, sock = serve(config)
    try:
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as silent:
            assert closed_within(silent, 10 * DEADLINE)
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never ends
            assert closed_within(slow, 10 * DEADLINE)
        with socket.create_connection(("127.0.0.1", port)) as good:
            good.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            good.settimeout(10)
            assert good.recv(1024).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
