"""HTTP to one model server: every failure becomes the ModelError a user can act on.

`Transport` sends Hilo's requests and a client's relayed ones, and tells a front-end's
`ModelActivity` when one makes the model work; `Relayed` is a server's answer passed on
as it arrives.
"""

from __future__ import annotations

import functools
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

__all__ = ["YIELD_CHECK_SECONDS", "tls_context", "ModelActivity", "makes_model_work", "Watch",
           "Transport", "frame_field", "media_type", "Relayed"]

if "httpcore" not in sys.modules:
    # httpx loads its command-line client (with rich, pygments and click, when installed)
    # and, with its first client, httpcore loads HTTP/2 (h2, when installed): Hilo runs
    # neither, its clients speak HTTP/1.1. ~35 and ~30 ms of a start: hidden while they
    # load, as app/log.py hides rich from structlog.
    _hidden = [name for name in ("httpx._main", "h2") if name not in sys.modules]
    sys.modules.update(dict.fromkeys(_hidden))
    try:
        import httpcore  # noqa: F401
        import httpx
    finally:
        for _name in _hidden:
            del sys.modules[_name]
import httpx

from app.model.errors import (
    EXCERPT_CHARS,
    MalformedResponse,
    ModelCallYielded,
    ModelError,
    ModelHTTPError,
    ModelNotFound,
    ModelTimeout,
    ModelUnreachable,
    OverBudget,
    StreamInterrupted,
)

# How often a background call that must give way to a person checks whether it must.
YIELD_CHECK_SECONDS = 0.02


def tls_context(url: str) -> ssl.SSLContext:
    """The TLS settings of a client of `url`, shared by every client of this process: for
    https, as httpx makes them by default (certifi's CA certificates, or SSL_CERT_FILE /
    SSL_CERT_DIR), read once, since that is ~50 ms on two cores; for http, which never
    starts TLS, a context that trusts no certificate, free to make and failing closed."""
    return _verifying() if url.lower().startswith("https:") else _trusting_nothing()


@functools.cache
def _verifying() -> ssl.SSLContext:
    return httpx.create_ssl_context()


@functools.cache
def _trusting_nothing() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, against no certificates


class ModelActivity(Protocol):
    """Told when a request that makes the model work (chat, completion, embedding) starts
    and when it ends: a front-end's requests, reported so that background jobs keep out
    of their way (workers/chat_activity.py). Must never raise or block for long."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


# Endpoints that make the model work (a relayed /api/tags or /api/show does not).
_WORK_ENDPOINTS = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings",
                   "/chat/completions", "/completions", "/embeddings")


def makes_model_work(path: str) -> bool:
    return path.rstrip("/").endswith(_WORK_ENDPOINTS)


def _nothing() -> None:
    pass


class Watch:
    """Why a watched call's connection was cut: "person", "deadline", or None (it was not)."""

    cut_for: str | None = None


class Transport:
    """HTTP to one server, turning every failure into the ModelError a user can act on."""

    def __init__(
        self,
        *,
        url: str,
        provider: str,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        api_key: str | None,
        model_settings: Mapping[str, str],
        activity: ModelActivity | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds, connect=connect_timeout_seconds),
            verify=tls_context(url),
        )
        self.url = url
        self.provider = provider
        self._timeout_seconds = timeout_seconds
        self._connect_timeout_seconds = connect_timeout_seconds
        self._model_settings = model_settings
        self._activity = activity

    def close(self) -> None:
        self._http.close()

    def start_work(self, path: str) -> Callable[[], None]:
        """Report that a request to `path` starts, if it makes the model work; returns
        what reports its end (call it once)."""
        activity = self._activity
        if activity is None or not makes_model_work(path):
            return _nothing
        activity.begin()
        return activity.end

    @contextmanager
    def working(self, path: str) -> Iterator[None]:
        end = self.start_work(path)
        try:
            yield
        finally:
            end()

    def get_json(self, path: str) -> Any:
        try:
            response = self._http.get(path)
        except httpx.HTTPError as exc:
            raise self._translate(exc, "") from exc
        self._raise_for_status(response, f"GET {path}", model="")
        return self._decode(response, f"GET {path}")

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST and decode the JSON answer."""
        try:
            with self.working(path):
                response = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise self._translate(exc, "") from exc
        self._raise_for_status(response, f"POST {path}", model=str(body.get("model", "")))
        return self._decode(response, f"POST {path}")

    @contextmanager
    def _watched(self, yield_to: Callable[[], bool] | None, deadline: float | None,
                 ) -> Iterator[tuple[httpx.Client, dict, Watch]]:
        """A client of its own whose connection is cut the moment yield_to() says so or
        the deadline (time.monotonic()) passes; gives the client, the request extensions
        that let it be cut, and the Watch that says why it was.

        Shutting the socket down (not closing it) wakes the read blocked on it, and the
        server sees its client go: Ollama and llama.cpp then stop the request."""
        sockets: list[socket.socket] = []

        def trace(event: str, info: dict) -> None:
            if event == "connection.connect_tcp.complete" and info.get("return_value"):
                sock = info["return_value"].get_extra_info("socket")
                if sock is not None:
                    sockets.append(sock)

        answered, watch = threading.Event(), Watch()

        def watched() -> None:
            while not answered.wait(YIELD_CHECK_SECONDS):
                if yield_to is not None and yield_to():
                    watch.cut_for = "person"
                elif deadline is not None and time.monotonic() >= deadline:
                    watch.cut_for = "deadline"
                else:
                    continue
                for sock in sockets:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return

        timeout = self._http.timeout
        if deadline is not None:  # the deadline decides, not a read timeout before it
            timeout = httpx.Timeout(max(1.0, deadline - time.monotonic()) + 1.0,
                                    connect=self._connect_timeout_seconds)
        watcher = threading.Thread(target=watched, name="hilo-call-watch", daemon=True)
        with httpx.Client(base_url=self.url, headers=self._http.headers,
                          timeout=timeout, verify=tls_context(self.url)) as client:
            watcher.start()
            try:
                yield client, {"trace": trace}, watch
            finally:
                answered.set()
                watcher.join()

    @contextmanager
    def open_stream(self, path: str, body: Mapping[str, Any], received: list[str],
                    sent: dict[str, Any] | None = None,
                    yield_to: Callable[[], bool] | None = None,
                    deadline_seconds: float | None = None) -> Iterator[Iterator[str]]:
        """Send the request, check the status, and give the response's lines.

        `received` is the caller's list of text pieces so far, reported if the
        connection breaks mid-stream; `sent`, if given, gets the path and body sent. With
        `yield_to` or `deadline_seconds`, a background call: on a connection of its own,
        cut the moment yield_to() says a person needs the model (ModelCallYielded) or
        `deadline_seconds` after it was sent, however fast tokens come (OverBudget).
        """
        if yield_to is not None or deadline_seconds is not None:
            with self._streaming_until(yield_to, deadline_seconds, path, body,
                                       received) as response:
                yield response.iter_lines()
            return
        with self.open_response(path, body, received, sent) as response:
            yield response.iter_lines()

    @contextmanager
    def _streaming_until(self, yield_to: Callable[[], bool] | None,
                         deadline_seconds: float | None, path: str, body: Mapping[str, Any],
                         received: list[str]) -> Iterator[httpx.Response]:
        deadline = None if deadline_seconds is None else time.monotonic() + deadline_seconds
        with self._watched(yield_to, deadline) as (client, extensions, watch):
            try:
                with client.stream("POST", path, json=body, extensions=extensions) as response:
                    self._raise_for_status(response, f"POST {path}",
                                           model=str(body.get("model", "")))
                    yield response
            except (httpx.HTTPError, ModelError) as exc:
                # A cut connection reads as a broken or short stream: it was cut.
                if watch.cut_for == "person":
                    raise ModelCallYielded(f"POST {path} at {self.url} gave way to a chat") from None
                if watch.cut_for == "deadline":
                    raise OverBudget(self.url, "deadline", deadline_seconds or 0.0,
                                     "".join(received)) from None
                if isinstance(exc, ModelError):
                    raise
                raise self._translate(exc, "".join(received)) from exc

    @contextmanager
    def open_response(self, path: str, body: Mapping[str, Any], received: list[str],
                      sent: dict[str, Any] | None = None) -> Iterator[httpx.Response]:
        """`open_stream`, giving the response itself (its body unread)."""
        if sent is not None:
            sent.update(path=path, body=body)
        try:
            with self.working(path), self._http.stream("POST", path, json=body) as response:
                self._raise_for_status(response, f"POST {path}", model=str(body.get("model", "")))
                yield response
        except httpx.HTTPError as exc:
            raise self._translate(exc, "".join(received)) from exc

    def send(self, method: str, path: str, *, content: bytes | None, params: Any,
             headers: Mapping[str, str]) -> tuple[httpx.Response, Callable[[], None]]:
        """One request as is, its answer returned unread whatever its status, with what
        to call once it is read or abandoned (the caller closes the answer); only failing
        to get an answer raises."""
        request = self._http.build_request(method, path, content=content, params=params,
                                           headers=headers)
        end = self.start_work(path)
        try:
            return self._http.send(request, stream=True), end
        except httpx.HTTPError as exc:
            end()
            raise self._translate(exc, "") from exc

    def decode_line(self, line: str, endpoint: str) -> dict[str, Any]:
        try:
            frame = json.loads(line)
        except ValueError:
            raise self.malformed(endpoint, f"a stream line is not JSON: {line[:EXCERPT_CHARS]!r}") from None
        if not isinstance(frame, dict):
            raise self.malformed(endpoint, f"a stream line is not a JSON object: {line[:EXCERPT_CHARS]!r}")
        return frame

    def malformed(self, endpoint: str, detail: str) -> MalformedResponse:
        return MalformedResponse(self.url, endpoint, detail, self.provider)

    def interrupted(self, received: list[str], reason: str) -> StreamInterrupted:
        return StreamInterrupted(self.url, "".join(received), reason)

    def _translate(self, exc: httpx.HTTPError, partial_text: str) -> ModelError:
        if isinstance(exc, httpx.ConnectTimeout):
            return ModelTimeout(self.url, self._connect_timeout_seconds, "connect")
        if isinstance(exc, httpx.TimeoutException):
            return ModelTimeout(self.url, self._timeout_seconds, "read")
        if isinstance(exc, httpx.ConnectError):
            return ModelUnreachable(self.url, self.provider, str(exc))
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            return StreamInterrupted(self.url, partial_text, f"connection broken: {exc}")
        if isinstance(exc, httpx.DecodingError):
            return MalformedResponse(self.url, "response", str(exc), self.provider)
        return ModelUnreachable(self.url, self.provider, str(exc))

    def _raise_for_status(self, response: httpx.Response, endpoint: str, model: str) -> None:
        if response.status_code < 400:
            return
        try:
            response.read()
        except httpx.HTTPError as exc:
            raise self._translate(exc, "") from exc
        document = _json_document(response)
        server_message = _server_error_text(response, document)
        error: ModelError
        if response.status_code == 404 and model and _names_missing_model(server_message):
            setting = self._model_settings.get(model, "[llm] chat_model")
            error = ModelNotFound(model, self.url, self.provider, setting, server_message)
        else:
            error = ModelHTTPError(response.status_code, server_message, self.url, endpoint)
        error.server_document = document
        raise error

    def _decode(self, response: httpx.Response, endpoint: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self.malformed(endpoint, f"body {response.text[:EXCERPT_CHARS]!r}") from None


def _json_document(response: httpx.Response) -> Any:
    """The answer's JSON document; None when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return None


def _server_error_text(response: httpx.Response, document: Any) -> str:
    """The server's own explanation, whole: Ollama's {"error": str}, OpenAI's
    {"error": {"message"}}, or text."""
    error = document.get("error") if isinstance(document, Mapping) else None
    if isinstance(error, Mapping):
        error = error.get("message")
    text = error if isinstance(error, str) and error else response.text
    return text.strip() or response.reason_phrase


def _names_missing_model(server_message: str) -> bool:
    # A 404 also means "no such route" ("404 page not found"); only a model 404 is ModelNotFound.
    lowered = server_message.lower()
    return "model" in lowered and ("not found" in lowered or "does not exist" in lowered)


def frame_field(frame: Any, *keys: str | int) -> Any:
    """frame[k1][k2]..., or None when any step is missing."""
    for key in keys:
        try:
            frame = frame[key]
        except (KeyError, IndexError, TypeError):
            return None
    return frame


def media_type(response: httpx.Response) -> str:
    """The content type of a server's answer (JSON when it names none)."""
    return response.headers.get("content-type", "application/json")


class Relayed:
    """A model server's answer to a relayed request: its status, its content type, and
    its body as it arrives (iterate once; the connection closes at the end)."""

    def __init__(self, response: httpx.Response, transport: Transport,
                 done: Callable[[], None]) -> None:
        self.status_code = response.status_code
        self.media_type = media_type(response)
        self._response = response
        self._transport = transport
        self._done = done

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._response.iter_bytes()
        except httpx.HTTPError as exc:
            raise self._transport._translate(exc, "") from exc
        finally:
            self.close()

    def close(self) -> None:
        self._response.close()
        done, self._done = self._done, _nothing
        done()
