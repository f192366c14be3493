"""The one place Hilo talks to a model server.

`ModelClient` speaks Ollama's native API (provider "ollama") or the OpenAI-compatible
API that llama.cpp, vLLM, LM Studio and Ollama's own /v1 serve (provider "openai").
It also relays what clients of `hilo serve` send: a chat request in the client's own
API (`relay_chat`, the reply passed on as the bytes arrive and read on the side), and
any other request to the model server, unchanged (`relay`).
Every failure surfaces as a `ModelError` subclass: its message says what failed,
where, and what to do; its `retryable` tells workers whether trying again can help.
Retrying itself is the caller's policy, not this module's.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Mapping, Protocol, Sequence

if "httpx" not in sys.modules:
    # httpx loads its command-line client (with rich, pygments and click, when installed),
    # which Hilo never runs: ~35 ms of start-up. Hide it while httpx loads, as app/log.py
    # hides rich from structlog.
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
    try:
        import httpx
    finally:
        del sys.modules["httpx._main"]
import httpx  # noqa: E402

from app.model.formats import (
    OpenAIReplyAsOllama,
    ReplyRecord,
    SentChat,
    ollama_request_as_openai,
    tool_calls_of,
)
from app.errors import HiloError

if TYPE_CHECKING:
    from app.config import Config

Message = Mapping[str, Any]  # {"role": "user" | "assistant" | "system" | "tool", "content": str}
JsonSchema = Mapping[str, Any] | str  # a JSON schema, or "json" for any JSON value
# Tools offered to the model, in the chat APIs' shape (Ollama takes OpenAI's):
# {"type": "function", "function": {"name", "description", "parameters": <JSON schema>}}
ToolSpec = Mapping[str, Any]

PROVIDERS = ("ollama", "openai")
# How often a background call that must give way to a person checks whether it must.
YIELD_CHECK_SECONDS = 0.02
# Longest slice of a server's error body worth putting in a message.
_EXCERPT_CHARS = 300


# ----------------------------------------------------------------------------- errors


class ModelError(HiloError):
    """A model call failed; str() says what failed, where, and what to do next.

    Over HTTP a client gets 502 (the model server failed) unless a subclass says better.
    """

    http_status = 502
    code = "model_error"
    # Whether the same call may succeed later: workers retry these, give up on the rest.
    retryable: bool = False

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class ModelUnreachable(ModelError):
    http_status = 503
    code = "model_unreachable"
    retryable = True

    def __init__(self, url: str, provider: str, detail: str = "") -> None:
        if provider == "ollama":
            message = f"Ollama is not reachable at {url} — start it with `ollama serve`"
        else:
            message = f"the model server is not reachable at {url} — start the server"
        message += ", or point [llm] url (HILO_LLM_URL) at where it runs"
        if detail:
            message += f" ({detail})"
        super().__init__(message, url=url)
        self.provider = provider


class ModelNotFound(ModelError):
    http_status = 404
    code = "model_not_found"
    retryable = False

    def __init__(self, model: str, url: str, provider: str, setting: str = "[llm] chat_model") -> None:
        if provider == "ollama":
            message = f"model {model} is not pulled — run `ollama pull {model}`"
        else:
            message = f"model {model} is not available at {url} — load it in the server, or change {setting}"
        super().__init__(message, url=url)
        self.model = model


class ModelTimeout(ModelError):
    http_status = 504
    code = "model_timeout"
    retryable = True

    def __init__(self, url: str, seconds: float, phase: str = "read") -> None:
        if phase == "connect":
            message = (
                f"could not connect to {url} within {seconds:g} s — check the address, or raise "
                "[llm] connect_timeout_seconds (HILO_LLM_CONNECT_TIMEOUT_SECONDS) if the server is just slow"
            )
        else:
            message = (
                f"{url} did not answer within {seconds:g} s — the model may still be loading or be too slow "
                "for this machine; raise [llm] timeout_seconds (HILO_LLM_TIMEOUT_SECONDS) or use a smaller model"
            )
        super().__init__(message, url=url)
        self.seconds = seconds
        self.phase = phase


class ModelHTTPError(ModelError):
    def __init__(self, status: int, server_message: str, url: str, endpoint: str) -> None:
        message = f"{endpoint} at {url} failed with HTTP {status}: {server_message}"
        hint = _status_hint(status)
        if hint:
            message += f" — {hint}"
        super().__init__(message, url=url)
        self.status = status
        self.server_message = server_message
        # A request the model server refused is the client's to fix; its own failure,
        # or our credentials, are a bad gateway.
        if 400 <= status < 500 and status not in (401, 403):
            self.http_status, self.code = status, "model_rejected"
        # Server-side trouble and throttling pass; a bad request stays bad.
        self.retryable = status >= 500 or status in (408, 429)


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "check [llm] api_key (HILO_LLM_API_KEY)"
    if status == 404:
        return "the server has no such endpoint; check [llm] provider and [llm] url"
    if status >= 500:
        return "the model server failed; check its log, then retry"
    return ""


class StreamInterrupted(ModelError):
    retryable = True

    def __init__(self, url: str, partial_text: str, reason: str) -> None:
        super().__init__(
            f"the reply from {url} stopped after {len(partial_text)} characters, before the model finished "
            f"({reason}) — the server may have crashed or restarted; try again",
            url=url,
        )
        self.partial_text = partial_text
        self.reason = reason


class ModelCallYielded(HiloError):
    """A background call gave way to a person: the connection was cut so the model
    server stops working on it (not a failure; the work is done later)."""


class MalformedResponse(ModelError):
    retryable = True

    def __init__(self, url: str, endpoint: str, detail: str, provider: str) -> None:
        api = "Ollama API" if provider == "ollama" else "OpenAI-compatible API"
        super().__init__(
            f"{endpoint} at {url} answered with something that is not the {api}'s JSON ({detail}) — "
            "check that [llm] url and [llm] provider name the right kind of server",
            url=url,
        )
        self.detail = detail


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ChatReply:
    text: str
    model: str
    prompt_eval_count: int | None  # tokens the server counted in the prompt (None if unreported)
    eval_count: int | None  # tokens generated
    done_reason: str | None = None
    # The tools the model called, in app.model.formats' neutral shape ({"id", "name", "arguments"}).
    tool_calls: tuple[dict[str, Any], ...] = ()


# Yielded first by the stream generators once the server has accepted the request, so
# ChatStream raises refusals (model not pulled, server down) at creation. Real pieces
# are never empty.
_ACCEPTED = ""


class ChatStream:
    """A streaming reply: iterate for text pieces as they arrive — or, for a relayed
    request (`record` set), for the bytes to pass on to the client.

    Refusals (unreachable, model not pulled, HTTP errors) raise when the stream is
    created; StreamInterrupted raises mid-iteration, with the text so far in
    `partial_text`. After the last piece, `reply`, `text`, `prompt_eval_count` and
    `eval_count` hold the totals. Close it (or use `with`) when leaving early.
    """

    def __init__(self, events: Generator[Any, None, ChatReply], model: str,
                 record: ReplyRecord | None = None, sent: dict[str, Any] | None = None) -> None:
        self._events = events
        self._pieces: list[str] = []
        self.model = model
        self.record = record
        self.reply: ChatReply | None = None
        self._sent = sent if sent is not None else {}
        accepted = next(events)
        assert not accepted  # _ACCEPTED, or b"" from a relay

    def exchange(self) -> SentChat | None:
        """The request as sent and the reply, once it is complete (text only: a reply
        with tool calls is not one a later request can continue)."""
        if not self.done or self.tool_calls or "body" not in self._sent:
            return None
        return SentChat(self._sent["path"], self._sent["body"], self.text)

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> Any:
        try:
            piece = next(self._events)
        except StopIteration as end:
            if self.reply is None:
                self.reply = end.value
            raise
        if self.record is None:
            self._pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        """The reply's text so far (of a relayed reply: its content, without thinking)."""
        return self.record.text if self.record is not None else "".join(self._pieces)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of the reply, in the neutral shape of app.model.formats: of a
        relayed one as read so far, of Hilo's own once it is complete."""
        if self.record is not None:
            return self.record.tool_calls
        return list(self.reply.tool_calls) if self.reply is not None else []

    @property
    def done(self) -> bool:
        return self.reply is not None

    @property
    def prompt_eval_count(self) -> int | None:
        return self.reply.prompt_eval_count if self.reply else None

    @property
    def eval_count(self) -> int | None:
        return self.reply.eval_count if self.reply else None

    def close(self) -> None:
        """Stop reading and free the connection."""
        self._events.close()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------- HTTP


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


class _Transport:
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

    def post_json(self, path: str, body: Mapping[str, Any],
                  yield_to: Callable[[], bool] | None = None) -> Any:
        """POST and decode the JSON answer; with `yield_to`, on a connection of its own
        that is cut the moment yield_to() says so (ModelCallYielded)."""
        if yield_to is not None:
            return self._post_yielding(path, body, yield_to)
        try:
            with self.working(path):
                response = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise self._translate(exc, "") from exc
        self._raise_for_status(response, f"POST {path}", model=str(body.get("model", "")))
        return self._decode(response, f"POST {path}")

    def _post_yielding(self, path: str, body: Mapping[str, Any],
                       yield_to: Callable[[], bool]) -> Any:
        # Shutting the socket down (not closing it) wakes the read blocked on it, and the
        # server sees its client go: Ollama and llama.cpp then stop the request.
        sockets: list[socket.socket] = []

        def trace(event: str, info: dict) -> None:
            if event == "connection.connect_tcp.complete" and info.get("return_value"):
                sock = info["return_value"].get_extra_info("socket")
                if sock is not None:
                    sockets.append(sock)

        answered, yielded = threading.Event(), threading.Event()

        def watch() -> None:
            while not answered.wait(YIELD_CHECK_SECONDS):
                if yield_to():
                    yielded.set()
                    for sock in sockets:
                        try:
                            sock.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    return

        watcher = threading.Thread(target=watch, name="hilo-yield-watch", daemon=True)
        with httpx.Client(base_url=self.url, headers=self._http.headers,
                          timeout=self._http.timeout) as client:
            watcher.start()
            try:
                response = client.post(path, json=body, extensions={"trace": trace})
                response.read()
            except httpx.HTTPError as exc:
                if yielded.is_set():
                    raise ModelCallYielded(f"POST {path} at {self.url} gave way to a chat") from None
                raise self._translate(exc, "") from exc
            finally:
                answered.set()
                watcher.join()
        self._raise_for_status(response, f"POST {path}", model=str(body.get("model", "")))
        return self._decode(response, f"POST {path}")

    @contextmanager
    def open_stream(self, path: str, body: Mapping[str, Any], received: list[str],
                    sent: dict[str, Any] | None = None) -> Iterator[Iterator[str]]:
        """Send the request, check the status, and give the response's lines.

        `received` is the caller's list of text pieces so far, reported if the
        connection breaks mid-stream; `sent`, if given, gets the path and body sent.
        """
        with self.open_response(path, body, received, sent) as response:
            yield response.iter_lines()

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
            raise self.malformed(endpoint, f"a stream line is not JSON: {line[:_EXCERPT_CHARS]!r}") from None
        if not isinstance(frame, dict):
            raise self.malformed(endpoint, f"a stream line is not a JSON object: {line[:_EXCERPT_CHARS]!r}")
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
        server_message = _server_error_text(response)
        if response.status_code == 404 and model and _names_missing_model(server_message):
            setting = self._model_settings.get(model, "[llm] chat_model")
            raise ModelNotFound(model, self.url, self.provider, setting)
        raise ModelHTTPError(response.status_code, server_message, self.url, endpoint)

    def _decode(self, response: httpx.Response, endpoint: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self.malformed(endpoint, f"body {response.text[:_EXCERPT_CHARS]!r}") from None


def _server_error_text(response: httpx.Response) -> str:
    """The server's own explanation: Ollama's {"error": str}, OpenAI's {"error": {"message"}}, or text."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, Mapping):
        error = error.get("message")
    text = error if isinstance(error, str) and error else response.text
    return text.strip()[:_EXCERPT_CHARS] or response.reason_phrase


def _names_missing_model(server_message: str) -> bool:
    # A 404 also means "no such route" ("404 page not found"); only a model 404 is ModelNotFound.
    lowered = server_message.lower()
    return "model" in lowered and ("not found" in lowered or "does not exist" in lowered)


def _field(frame: Any, *keys: str | int) -> Any:
    """frame[k1][k2]..., or None when any step is missing."""
    for key in keys:
        try:
            frame = frame[key]
        except (KeyError, IndexError, TypeError):
            return None
    return frame


# ----------------------------------------------------------------------------- wire formats


class _OllamaAPI:
    """Ollama's native API: /api/chat, /api/generate, /api/embed, /api/tags."""

    def __init__(self, transport: _Transport, num_ctx: int, keep_alive: str) -> None:
        self._transport = transport
        self._num_ctx = num_ctx
        self._keep_alive = _keep_alive_value(keep_alive)

    def _body(self, model: str, options: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        # num_ctx on every call: Ollama otherwise silently truncates to its 2048/4096 default.
        return {
            "model": model,
            **fields,
            "options": {"num_ctx": self._num_ctx, **(options or {})},
            "keep_alive": self._keep_alive,
        }

    def chat_events(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None,
        tools: Sequence[ToolSpec] | None = None,
        sent: dict[str, Any] | None = None,
    ) -> Generator[str, None, ChatReply]:
        body = self._body(model, options, messages=[dict(m) for m in messages], stream=True)
        if tools:
            body["tools"] = [dict(t) for t in tools]
        received: list[str] = []
        calls: list[dict[str, Any]] = []
        with self._transport.open_stream("/api/chat", body, received, sent) as lines:
            yield _ACCEPTED
            for line in lines:
                if not line.strip():
                    continue
                frame = self._transport.decode_line(line, "POST /api/chat")
                if "error" in frame:
                    raise self._transport.interrupted(received, f"server error: {frame['error']}")
                piece = _field(frame, "message", "content") or ""
                if piece:
                    received.append(piece)
                    yield piece
                calls += tool_calls_of(frame.get("message") or {})
                if frame.get("done"):
                    return _ollama_reply(frame, "".join(received), model, calls)
        raise self._transport.interrupted(received, "the stream ended without its final done message")

    def chat(self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None) -> ChatReply:
        body = self._body(model, options, messages=[dict(m) for m in messages], stream=False)
        data = self._transport.post_json("/api/chat", body)
        text = _field(data, "message", "content")
        if not isinstance(text, str):
            raise self._transport.malformed("POST /api/chat", "no message.content in the reply")
        return _ollama_reply(data, text, model)

    def generate_json(
        self, model: str, prompt: str, schema: JsonSchema, system: str | None, temperature: float,
        yield_to: Callable[[], bool] | None = None,
    ) -> str:
        fields: dict[str, Any] = {"prompt": prompt, "format": schema, "stream": False}
        if system is not None:
            fields["system"] = system
        data = self._transport.post_json(
            "/api/generate", self._body(model, {"temperature": temperature}, **fields), yield_to)
        text = _field(data, "response")
        if not isinstance(text, str):
            raise self._transport.malformed("POST /api/generate", "no response text in the reply")
        return text

    embed_endpoint = "POST /api/embed"

    def embed(self, model: str, texts: list[str]) -> Any:
        data = self._transport.post_json("/api/embed", self._body(model, input=texts))
        return _field(data, "embeddings")

    def list_models(self) -> list[str]:
        data = self._transport.get_json("/api/tags")
        models = _field(data, "models")
        if not isinstance(models, list):
            raise self._transport.malformed("GET /api/tags", "no models list in the reply")
        return [str(m.get("name") or m.get("model")) for m in models if isinstance(m, Mapping)]


def _ollama_reply(frame: Mapping[str, Any], text: str, model: str,
                  tool_calls: Sequence[dict[str, Any]] = ()) -> ChatReply:
    return ChatReply(
        text=text,
        model=str(frame.get("model") or model),
        prompt_eval_count=frame.get("prompt_eval_count"),
        eval_count=frame.get("eval_count"),
        done_reason=frame.get("done_reason"),
        tool_calls=tuple(tool_calls),
    )


def _keep_alive_value(keep_alive: str) -> str | int:
    # Ollama parses strings as Go durations ("5m"); a bare number must go as a number.
    return int(keep_alive) if re.fullmatch(r"\s*-?\d+\s*", keep_alive) else keep_alive


# Ollama option names → their OpenAI request fields. Others (num_ctx, …) have no
# OpenAI equivalent: those servers fix them when the model is loaded.
_OPENAI_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "stop": "stop",
    "num_predict": "max_tokens",
    "max_tokens": "max_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


class _OpenAIAPI:
    """The OpenAI-compatible API: /v1/chat/completions, /v1/embeddings, /v1/models."""

    def __init__(self, transport: _Transport, prefix: str) -> None:
        self._transport = transport
        self._chat_path = f"{prefix}/chat/completions"
        self._embeddings_path = f"{prefix}/embeddings"
        self._models_path = f"{prefix}/models"

    def _body(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None, **fields: Any
    ) -> dict[str, Any]:
        mapped = {_OPENAI_FIELDS[k]: v for k, v in (options or {}).items() if k in _OPENAI_FIELDS}
        return {"model": model, "messages": [dict(m) for m in messages], **mapped, **fields}

    def chat_events(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None,
        tools: Sequence[ToolSpec] | None = None,
        sent: dict[str, Any] | None = None,
    ) -> Generator[str, None, ChatReply]:
        body = self._body(model, messages, options, stream=True, stream_options={"include_usage": True})
        if tools:
            body["tools"] = [dict(t) for t in tools]
        received: list[str] = []
        usage: Mapping[str, Any] = {}
        finish_reason = None
        calls = ReplyRecord()  # gathers the tool calls, streamed in pieces
        with self._transport.open_stream(self._chat_path, body, received, sent) as lines:
            yield _ACCEPTED
            for line in lines:
                if not line.startswith("data:"):
                    continue  # blank separators, SSE comments and event names
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    calls.end_of_openai_stream()
                    return _openai_reply(usage, "".join(received), model, finish_reason,
                                         calls.tool_calls)
                frame = self._transport.decode_line(data, f"POST {self._chat_path}")
                if "error" in frame:
                    reason = _field(frame, "error", "message") or frame["error"]
                    raise self._transport.interrupted(received, f"server error: {reason}")
                usage = frame.get("usage") or usage
                calls.read_openai(frame)
                for choice in frame.get("choices") or []:
                    piece = _field(choice, "delta", "content") or ""
                    finish_reason = _field(choice, "finish_reason") or finish_reason
                    if piece:
                        received.append(piece)
                        yield piece
        if finish_reason is not None:
            # Some servers close without [DONE]; a finish_reason already says the reply is whole.
            calls.end_of_openai_stream()
            return _openai_reply(usage, "".join(received), model, finish_reason, calls.tool_calls)
        raise self._transport.interrupted(received, "the stream ended without a finish_reason or [DONE]")

    def chat(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None,
        yield_to: Callable[[], bool] | None = None, **fields: Any
    ) -> ChatReply:
        body = self._body(model, messages, options, stream=False, **fields)
        data = self._transport.post_json(self._chat_path, body, yield_to)
        text = _field(data, "choices", 0, "message", "content")
        if not isinstance(text, str):
            raise self._transport.malformed(f"POST {self._chat_path}", "no choices[0].message.content in the reply")
        return _openai_reply(data.get("usage") or {}, text, model, _field(data, "choices", 0, "finish_reason"))

    def generate_json(
        self, model: str, prompt: str, schema: JsonSchema, system: str | None, temperature: float,
        yield_to: Callable[[], bool] | None = None,
    ) -> str:
        messages = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": prompt}
        ]
        if isinstance(schema, str):
            response_format: dict[str, Any] = {"type": "json_object"}
        else:
            response_format = {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}
        reply = self.chat(model, messages, {"temperature": temperature}, yield_to,
                          response_format=response_format)
        return reply.text

    @property
    def embed_endpoint(self) -> str:
        return f"POST {self._embeddings_path}"

    def embed(self, model: str, texts: list[str]) -> Any:
        body = {"model": model, "input": texts, "encoding_format": "float"}
        data = self._transport.post_json(self._embeddings_path, body)
        items = _field(data, "data")
        if not isinstance(items, list):
            return None
        return [_field(item, "embedding") for item in sorted(items, key=lambda item: _field(item, "index") or 0)]

    def list_models(self) -> list[str]:
        items = _field(self._transport.get_json(self._models_path), "data")
        if not isinstance(items, list):
            raise self._transport.malformed(f"GET {self._models_path}", "no data list in the reply")
        return [str(item.get("id")) for item in items if isinstance(item, Mapping)]


def _openai_reply(usage: Mapping[str, Any], text: str, model: str, finish_reason: str | None,
                  tool_calls: Sequence[dict[str, Any]] = ()) -> ChatReply:
    return ChatReply(
        text=text,
        model=model,
        prompt_eval_count=usage.get("prompt_tokens"),
        eval_count=usage.get("completion_tokens"),
        done_reason=finish_reason,
        tool_calls=tuple(tool_calls),
    )


# ----------------------------------------------------------------------------- relays


class Relayed:
    """A model server's answer to a relayed request: its status, its content type, and
    its body as it arrives (iterate once; the connection closes at the end)."""

    def __init__(self, response: httpx.Response, transport: _Transport,
                 done: Callable[[], None]) -> None:
        self.status_code = response.status_code
        self.media_type = _media_type(response)
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


def _media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "application/json")


def _lines(chunks: Iterator[bytes]) -> Iterator[list[bytes]]:
    """Complete lines (each with its newline), as many as each read brought; a last
    line without a newline comes at the end."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        cut = pending.rfind(b"\n") + 1
        if cut:
            yield pending[:cut].splitlines(keepends=True)
            pending = pending[cut:]
    if pending:
        yield [pending]


def _sse_data(line: bytes) -> bytes | None:
    """The payload of an SSE `data:` line; None for separators, comments and names."""
    return line[len(b"data:"):].strip() if line.startswith(b"data:") else None


def _relay_reply(record: ReplyRecord, model: str) -> ChatReply:
    return ChatReply(text=record.text, model=model, prompt_eval_count=record.prompt_eval_count,
                     eval_count=record.eval_count, done_reason=record.done_reason)


def _relayed_chat(transport: _Transport, path: str, body: dict[str, Any], api: str,
                  record: ReplyRecord, model: str,
                  sent: dict[str, Any]) -> Generator[bytes, None, ChatReply]:
    """The reply to a chat request relayed in the client's own API, passed on as it
    arrives, each frame read into `record` on the way."""
    endpoint = f"POST {path}"
    read = record.read_ollama if api == "ollama" else record.read_openai
    with transport.open_response(path, body, record.text_parts, sent) as response:
        record.media_type = _media_type(response)
        yield b""
        if not record.streaming:
            data = response.read()
            read(transport.decode_line(data.decode("utf-8", "replace"), endpoint))
            record.finished = True
            yield data
            return _relay_reply(record, model)
        for lines in _lines(response.iter_bytes()):
            passed = bytearray()
            for line in lines:
                payload = line.strip() if api == "ollama" else _sse_data(line)
                if payload == b"[DONE]":
                    record.end_of_openai_stream()
                elif payload:
                    frame = transport.decode_line(payload.decode("utf-8", "replace"), endpoint)
                    if "error" in frame:
                        if passed:
                            yield bytes(passed)
                        raise transport.interrupted(record.text_parts,
                                                    f"server error: {_error_text(frame)}")
                    read(frame)
                passed += line
            if passed:
                yield bytes(passed)
    if api == "openai" and not record.finished and record.done_reason:
        record.end_of_openai_stream()  # some servers close without [DONE]
    if not record.finished:
        raise transport.interrupted(record.text_parts, "the stream ended before the model finished")
    return _relay_reply(record, model)


def _translated_chat(transport: _Transport, path: str, body: Mapping[str, Any],
                     record: ReplyRecord, model: str,
                     sent: dict[str, Any]) -> Generator[bytes, None, ChatReply]:
    """An Ollama client's chat request, answered by an OpenAI-compatible server: the
    request and each reply frame translated (app.model.formats)."""
    endpoint = f"POST {path}"
    request = ollama_request_as_openai(body)
    as_ollama = OpenAIReplyAsOllama(model, record)
    with transport.open_response(path, request, record.text_parts, sent) as response:
        streaming = _media_type(response).startswith("text/event-stream")
        record.media_type = "application/x-ndjson" if streaming else "application/json"
        yield b""
        if not streaming:
            completion = transport.decode_line(response.read().decode("utf-8", "replace"), endpoint)
            whole = as_ollama.whole(completion)
            record.finished = True
            yield _ndjson(whole)
            return _relay_reply(record, model)
        for lines in _lines(response.iter_bytes()):
            frames: list[dict[str, Any]] = []
            for line in lines:
                payload = _sse_data(line)
                if payload == b"[DONE]":
                    frames += as_ollama.end()
                elif payload:
                    frame = transport.decode_line(payload.decode("utf-8", "replace"), endpoint)
                    if "error" in frame:
                        if frames:
                            yield b"".join(_ndjson(f) for f in frames)
                        raise transport.interrupted(record.text_parts,
                                                    f"server error: {_error_text(frame)}")
                    frames += as_ollama.chunk(frame)
            if frames:
                yield b"".join(_ndjson(f) for f in frames)
    if not record.finished and record.done_reason:
        yield b"".join(_ndjson(f) for f in as_ollama.end())
    if not record.finished:
        raise transport.interrupted(record.text_parts, "the stream ended before the model finished")
    return _relay_reply(record, model)


def _ndjson(frame: Mapping[str, Any]) -> bytes:
    return json.dumps(frame, ensure_ascii=False).encode() + b"\n"


def _error_text(frame: Mapping[str, Any]) -> str:
    return str(_field(frame, "error", "message") or frame["error"])


# ----------------------------------------------------------------------------- the client

# Fields of a chat request that a JSON question asked after it leaves out: they shape
# only how the answer comes back, not the prompt the server's cache holds.
_NOT_CONTINUED = frozenset({"stream", "stream_options", "think", "tool_choice", "format",
                            "response_format", "n", "logprobs", "top_logprobs", "messages"})


class ModelClient:
    """Chat, JSON extraction and embeddings against one model server.

    Safe to share between threads: one pooled httpx.Client underneath.
    """

    def __init__(
        self,
        provider: str,
        url: str,
        chat_model: str,
        distill_model: str,
        embed_model: str,
        num_ctx: int,
        keep_alive: str,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        api_key: str | None = None,
        activity: ModelActivity | None = None,
    ) -> None:
        """`activity`, when given, is told when each request that makes the model work
        starts and ends (a front-end's client; the worker's has none)."""
        if provider not in PROVIDERS:
            raise ValueError(f"[llm] provider is {provider!r}; use one of: {', '.join(PROVIDERS)}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"[llm] url is {url!r}; it must start with http:// or https://")
        self.provider = provider
        self.url = url.rstrip("/")
        self.chat_model = chat_model
        self.distill_model = distill_model
        self.embed_model = embed_model
        self.num_ctx = num_ctx
        self.keep_alive = keep_alive
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self._transport = _Transport(
            url=self.url,
            provider=provider,
            timeout_seconds=timeout_seconds,
            connect_timeout_seconds=connect_timeout_seconds,
            api_key=api_key or None,
            # Later entries win: a model used for chat is named by its chat setting.
            model_settings={
                embed_model: "[embedder] model",
                distill_model: "[llm] distill_model",
                chat_model: "[llm] chat_model",
            },
            activity=activity,
        )
        self._api: _OllamaAPI | _OpenAIAPI = (
            _OllamaAPI(self._transport, num_ctx, keep_alive)
            if provider == "ollama"
            else _OpenAIAPI(self._transport, _openai_prefix(self.url))
        )

    @classmethod
    def from_config(cls, cfg: Config, *, activity: ModelActivity | None = None,
                    url: str | None = None) -> ModelClient:
        """Build from the program's Config (its `llm` and `embedder` sections); `url`
        replaces [llm] url (the workers' own model server, [llm] distill_url)."""
        llm = cfg.llm
        return cls(
            provider=llm.provider,
            url=url or llm.url,
            chat_model=llm.chat_model,
            distill_model=llm.distill_model,
            embed_model=cfg.embedder.model,
            num_ctx=llm.num_ctx,
            keep_alive=llm.keep_alive,
            timeout_seconds=llm.timeout_seconds,
            connect_timeout_seconds=llm.connect_timeout_seconds,
            api_key=llm.api_key or None,
            activity=activity,
        )

    def chat_stream(
        self, messages: Sequence[Message], *, model: str | None = None,
        options: Mapping[str, Any] | None = None, tools: Sequence[ToolSpec] | None = None,
    ) -> ChatStream:
        """Start a streamed reply; see ChatStream for when errors surface. With `tools`,
        the model may call them: the calls are in `stream.tool_calls` once it ends."""
        model = model or self.chat_model
        sent: dict[str, Any] = {}
        return ChatStream(self._api.chat_events(model, messages, options, tools, sent), model,
                          sent=sent)

    def chat(
        self, messages: Sequence[Message], *, model: str | None = None, options: Mapping[str, Any] | None = None
    ) -> ChatReply:
        return self._api.chat(model or self.chat_model, messages, options)

    def generate_json(
        self,
        prompt: str,
        schema: JsonSchema,
        *,
        system: str | None = None,
        temperature: float = 0.1,
        model: str | None = None,
        yield_to: Callable[[], bool] | None = None,
    ) -> str:
        """The model's raw text, constrained to `schema`; parse it with parse_json_leniently.

        The text is returned unparsed because local models still break JSON now and
        then, and the caller decides whether to retry or fall back. With `yield_to`, the
        call gives way (ModelCallYielded) the moment yield_to() says a person needs the
        model.
        """
        return self._api.generate_json(model or self.distill_model, prompt, schema, system,
                                       temperature, yield_to)

    def continue_json(self, after: SentChat, instruction: str, schema: JsonSchema, *,
                      temperature: float = 0.1,
                      yield_to: Callable[[], bool] | None = None) -> str:
        """The model's raw JSON text for `instruction`, asked as the next message of the
        chat `after`: the same request, its reply, then the instruction, so a server
        whose KV cache still holds that chat reads only the instruction anew. The
        request keeps every field that shapes the prompt or the loaded model (tools,
        options, keep_alive); it does not stream and does not think. `yield_to` as for
        generate_json."""
        body = {k: v for k, v in after.body.items() if k not in _NOT_CONTINUED}
        body["messages"] = [*after.body.get("messages", []),
                            {"role": "assistant", "content": after.reply},
                            {"role": "user", "content": instruction}]
        body["stream"] = False
        if after.path == "/api/chat":
            body["format"] = schema
            body["options"] = {**(after.body.get("options") or {}), "temperature": temperature}
            data = self._transport.post_json(after.path, body, yield_to)
            text = _field(data, "message", "content")
        else:
            body["response_format"] = (
                {"type": "json_object"} if isinstance(schema, str) else
                {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}})
            body["temperature"] = temperature
            data = self._transport.post_json(after.path, body, yield_to)
            text = _field(data, "choices", 0, "message", "content")
        if not isinstance(text, str):
            raise self._transport.malformed(f"POST {after.path}", "no message content in the reply")
        return text

    def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        """One vector per text, in order, from a single batched request."""
        if not texts:
            return []
        vectors = self._api.embed(model or self.embed_model, list(texts))
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            count = len(vectors) if isinstance(vectors, list) else "no"
            raise self._transport.malformed(self._api.embed_endpoint, f"{count} embeddings for {len(texts)} texts")
        if not all(isinstance(v, list) and all(isinstance(x, (int, float)) for x in v) for v in vectors):
            raise self._transport.malformed(self._api.embed_endpoint, "an embedding is not a list of numbers")
        return [[float(x) for x in v] for v in vectors]

    def list_models(self) -> list[str]:
        """Names of the models the server offers (for Ollama: the pulled ones)."""
        return self._api.list_models()

    def relay(self, method: str, path: str, *, content: bytes | None = None, params: Any = None,
              content_type: str | None = None) -> Relayed:
        """Pass one request to the server unchanged and its answer back as it arrives,
        whatever its status; ModelError only when there is none. `path` is the client's
        (/api/..., /v1/...)."""
        headers = {"Content-Type": content_type} if content_type else {}
        response, done = self._transport.send(method, self.upstream_path(path), content=content,
                                              params=params, headers=headers)
        return Relayed(response, self._transport, done)

    def relay_chat(self, api: str, body: Mapping[str, Any]) -> ChatStream:
        """Send a client's chat request, in the client's own API ("ollama": /api/chat,
        "openai": /v1/chat/completions), and relay the reply: iterate the stream for the
        bytes the client expects; `stream.record` gathers what Hilo keeps of it.

        Ollama serves both APIs itself, and an OpenAI-compatible server the OpenAI one;
        an Ollama request to an OpenAI-compatible server is translated both ways.
        Refusals raise ModelError when the stream is created, as for chat_stream.
        """
        model = str(body.get("model") or self.chat_model)
        record = ReplyRecord()
        sent: dict[str, Any] = {}
        if api == "ollama" and self.provider == "openai":
            events = _translated_chat(self._transport, self.upstream_path("/v1/chat/completions"),
                                      body, record, model, sent)
        else:
            path = "/api/chat" if api == "ollama" else self.upstream_path("/v1/chat/completions")
            events = _relayed_chat(self._transport, path, dict(body), api, record, model, sent)
        return ChatStream(events, model, record, sent=sent)

    def upstream_path(self, path: str) -> str:
        """The server's path for a client's: an OpenAI-compatible [llm] url may already
        end in /v1."""
        if self.provider == "openai" and path.startswith("/v1/") and self.url.endswith("/v1"):
            return path[len("/v1"):]
        return path

    def check(self) -> None:
        """Raise the ModelError a user must fix before chatting: server down, model not pulled.

        Only Ollama lists what can be loaded; other servers name models freely, so for
        them reaching the server is the whole check.
        """
        available = self.list_models()
        if self.provider != "ollama":
            return
        pulled = {_full_model_name(name) for name in available}
        for model, setting in ((self.chat_model, "[llm] chat_model"), (self.distill_model, "[llm] distill_model")):
            if _full_model_name(model) not in pulled:
                raise ModelNotFound(model, self.url, self.provider, setting)

    def ping(self) -> bool:
        """Whether the server answers at all."""
        try:
            self.list_models()
        except ModelError:
            return False
        return True

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _openai_prefix(url: str) -> str:
    # Accept both "http://host:8080" and "http://host:8080/v1" in [llm] url.
    return "" if url.endswith("/v1") else "/v1"


def _full_model_name(model: str) -> str:
    # Ollama's naming: "nomic-embed-text" is "nomic-embed-text:latest".
    return model if ":" in model else f"{model}:latest"


# ----------------------------------------------------------------------------- lenient JSON


def parse_json_leniently(text: str) -> dict | list | None:
    """The outermost JSON object or array in model output, or None if none parses.

    Models wrap JSON in prose or ``` fences and sometimes leave trailing commas;
    both are tolerated. Of several JSON values in the text, the longest wins.
    """
    found = _longest_json_value(text)
    if found is None and "," in text:
        found = _longest_json_value(re.sub(r",(\s*[}\]])", r"\1", text))
    return found


_JSON_START = re.compile(r"[{\[]")


def _longest_json_value(text: str) -> dict | list | None:
    decoder = json.JSONDecoder()
    best: dict | list | None = None
    best_length = 0
    position = 0
    while True:
        match = _JSON_START.search(text, position)
        if match is None:
            return best
        start = match.start()
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        if end - start > best_length:
            best, best_length = value, end - start
        position = end  # anything inside this value is nested in it, not outermost
