"""Slow clients are timed out: a connection whose headers never finish is closed; one whose
body stops or trickles is answered 408 and closed."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from app.http.timeouts import DeadlineProtocol, timeout_settings
from app.serve import create_app

DEADLINE = 0.5


class QuickDeadlines(DeadlineProtocol):
    header_timeout = DEADLINE
    body_timeout = DEADLINE


def serve(config, protocol=QuickDeadlines, backlog=16):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    settings = {**timeout_settings(), "http": protocol}
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_config=None, lifespan="on",
                                           **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return server, thread, sock


def closed_within(conn: socket.socket, seconds: float) -> bool:
    conn.settimeout(seconds)
    try:
        return conn.recv(1024) == b""
    except TimeoutError:
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


def answer_within(conn: socket.socket, seconds: float) -> bytes:
    """Everything the server sends until it closes the connection (or `seconds` pass)."""
    conn.settimeout(seconds)
    received = b""
    try:
        while chunk := conn.recv(4096):
            received += chunk
    except TimeoutError:
        return received + b"<still open>"
    return received


def body_request(length: int, path: str = "/api/chat") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_a_body_that_stops_or_trickles_is_answered_408_and_closed(config, data_dir):
    server, thread, sock = serve(config)
    try:
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as stopped:
            stopped.sendall(body_request(1000) + b'{"model": ')  # and nothing more
            answer = answer_within(stopped, 10 * DEADLINE)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert b"did not arrive within" in answer and answer.endswith(b"}")
        with socket.create_connection(("127.0.0.1", port)) as trickle:
            trickle.sendall(body_request(1000, "/v1/chat/completions"))
            started = time.monotonic()
            try:
                while time.monotonic() - started < 20 * DEADLINE:
                    trickle.sendall(b" ")  # a byte at a time, for ever
                    time.sleep(DEADLINE / 10)
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert time.monotonic() - started < 10 * DEADLINE, "the trickle was never cut off"
        with socket.create_connection(("127.0.0.1", port)) as chunked:
            chunked.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n")
            assert answer_within(chunked, 10 * DEADLINE).startswith(b"HTTP/1.1 408")
        with socket.create_connection(("127.0.0.1", port)) as good:
            good.sendall(body_request(2) + b"{}")
            good.settimeout(10)
            answer = good.recv(1024)  # the body arrived: answered (relayed: no model runs here)
            assert answer.startswith(b"HTTP/1.1 ") and not answer.startswith(b"HTTP/1.1 408")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


IDLE = 1000


def test_a_thousand_idle_connections_do_not_keep_a_request_from_being_answered(config,
                                                                              data_dir):
    # The deadlines `hilo serve` runs with: no idle connection times out during the test.
    server, thread, sock = serve(config, DeadlineProtocol, backlog=IDLE + 16)
    idle: list[socket.socket] = []
    try:
        port = sock.getsockname()[1]
        for _ in range(2):  # and again once they have been reopened
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(IDLE)]
            idle[-1].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # no end
            with socket.create_connection(("127.0.0.1", port)) as good:
                good.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Connection: close\r\n\r\n")
                assert answer_within(good, 10).startswith(b"HTTP/1.1 200")
            for conn in idle:
                conn.close()
    finally:
        for conn in idle:
            conn.close()
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
