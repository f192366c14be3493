"""The demo model's server: Ollama's HTTP API (and the OpenAI-compatible /v1 beside it,
as Ollama has) on loopback, answering with app/ops/demo/mind.py.

It stands where the configuration says the model server is (`[llm] url`), so `hilo
serve`, `hilo worker` and `hilo chat` use it unchanged, and serves every model asked
for: the configured ones are those it lists. Replies stream as Ollama streams them, a
word at a time, with token counts (four characters a token) in the last line.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from app.config import Config
from app.ops.demo.mind import chat_reply, embedding, json_answer

__all__ = ["VERSION", "LOOPBACK", "model_names", "address", "serve_demo_model",
           "wait_for_demo_model", "DemoServer"]

VERSION = "0.0.0-hilo-demo"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def model_names(config: Config) -> list[str]:
    """What the demo lists: the models Hilo is configured to use, as Ollama names them."""
    names = [config.llm.chat_model, config.llm.distill_model]
    if config.embedder.kind == "ollama":
        names.append(config.embedder.model)
    full = [name if ":" in name else f"{name}:latest" for name in names]
    return list(dict.fromkeys(full))


def address(config: Config) -> tuple[str, int]:
    """Where the demo listens: `[llm] url`'s host and port, which must be this machine."""
    url = config.llm.url if "//" in config.llm.url else f"http://{config.llm.url}"
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if host not in LOOPBACK:
        raise ValueError(f"[llm] url is {config.llm.url}: the demo model listens on this "
                         "machine only; point HILO_LLM_URL at 127.0.0.1")
    return host, parts.port or 11434


def serve_demo_model(config: Config) -> int:
    """`hilo demo-model`: serve until SIGTERM or Ctrl-C; the exit status."""
    try:
        host, port = address(config)
        server = DemoServer((host, port), config)
    except (ValueError, OSError) as exc:
        reason = exc if isinstance(exc, ValueError) else (
            f"cannot listen on {config.llm.url} ({exc.strerror}): a model server may run "
            "there already (then `make run` uses it), or set HILO_LLM_URL to a free port")
        print(f"hilo demo-model: {reason}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="hilo-demo-model", daemon=True)
    thread.start()
    print(f"hilo demo-model: a scripted model at http://{host}:{port}, Ollama's API, serving "
          f"{', '.join(model_names(config))}: it answers plainly and learns what you tell it",
          file=sys.stderr, flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


def wait_for_demo_model(config: Config, seconds: float = 30.0) -> int:
    """`hilo demo-model --wait`: 0 once the demo model answers at [llm] url, 1 when it has
    not within `seconds` — so what starts beside it (Procfile.try) finds it there."""
    import httpx  # start-up: only the waiting command asks

    host, port = address(config)
    deadline = time.monotonic() + seconds
    pause = threading.Event()
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://{host}:{port}/api/version", timeout=1.0)
            return 0
        except httpx.TransportError:
            pause.wait(0.05)  # it is starting: ask again shortly
    print(f"hilo demo-model: nothing answered at {config.llm.url} within {seconds:g} s",
          file=sys.stderr)
    return 1


class DemoServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, where: tuple[str, int], config: Config) -> None:
        self.config = config
        self.models = model_names(config)
        super().__init__(where, _Handler)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _pieces(text: str) -> Iterator[str]:
    words = text.split(" ")
    for index, word in enumerate(words):
        yield word if index == len(words) - 1 else word + " "


def _schema_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a request asks its answer to follow (Ollama's `format`, OpenAI's
    `response_format`); {} for plain JSON; None for text."""
    fmt = body.get("format")
    if isinstance(fmt, Mapping):
        return fmt
    if fmt == "json":
        return {}
    wanted = body.get("response_format")
    if isinstance(wanted, Mapping):
        if wanted.get("type") == "json_schema":
            return (wanted.get("json_schema") or {}).get("schema") or {}
        if wanted.get("type") == "json_object":
            return {}
    return None


def _answer(body: Mapping[str, Any], messages: list[Mapping[str, Any]], system: str) -> str:
    schema = _schema_of(body)
    if schema is None:
        return chat_reply(messages, system)
    asked = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    return json.dumps(json_answer(schema, str(asked or "")), ensure_ascii=False)


class _Handler(BaseHTTPRequestHandler):
    server: DemoServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # hilo serve's log says what was asked

    # -- plumbing ------------------------------------------------------------------------

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw or b"{}")
        except ValueError:
            parsed = {}
        return parsed if isinstance(parsed, dict) else {}

    def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
        data = (payload if isinstance(payload, bytes)
                else json.dumps(payload, ensure_ascii=False).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, content_type: str, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    # -- routes --------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/") or "/"
        if path == "/":
            self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
        elif path == "/api/version":
            self._send(200, {"version": VERSION})
        elif path == "/api/tags":
            self._send(200, {"models": [self._model_entry(name) for name in self.server.models]})
        elif path == "/api/ps":
            self._send(200, {"models": []})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "hilo-demo"}
                for name in self.server.models]})
        else:
            self._send(404, {"error": f"no route GET {path} in Hilo's demo model"})

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        body = self._body()
        routes = {"/api/chat": self._chat, "/api/generate": self._generate,
                  "/api/embed": self._embed, "/api/embeddings": self._embed_one,
                  "/api/show": self._show, "/v1/chat/completions": self._completion,
                  "/v1/embeddings": self._v1_embeddings}
        route = routes.get(path)
        if route is None:
            self._send(404, {"error": f"no route POST {path} in Hilo's demo model"})
            return
        route(body)

    def _model_entry(self, name: str) -> dict[str, Any]:
        return {"name": name, "model": name, "modified_at": _now(), "size": 0,
                "digest": "0" * 64, "details": {"format": "demo", "family": "hilo-demo",
                                                 "parameter_size": "0B"}}

    def _show(self, body: dict[str, Any]) -> None:
        name = str(body.get("model") or body.get("name") or "")
        embeds = "embed" in name
        self._send(200, {"modelfile": "", "parameters": "", "template": "",
                         "details": self._model_entry(name)["details"],
                         "model_info": {"general.architecture": "hilo-demo"},
                         "capabilities": ["embedding"] if embeds else ["completion"]})

    # -- Ollama ---------------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
        model = str(body.get("model") or self.server.models[0])
        if not messages:  # Ollama's model load
            self._send(200, {"model": model, "created_at": _now(), "message": {
                "role": "assistant", "content": ""}, "done": True, "done_reason": "load"})
            return
        system = "\n".join(str(m.get("content") or "") for m in messages
                           if m.get("role") == "system")
        text = _answer(body, messages, system)
        prompt = sum(_tokens(str(m.get("content") or "")) for m in messages)
        self._ollama_reply(body, model, text, prompt, lambda piece: {
            "message": {"role": "assistant", "content": piece}})

    def _generate(self, body: dict[str, Any]) -> None:
        model = str(body.get("model") or self.server.models[0])
        prompt = str(body.get("prompt") or "")
        system = str(body.get("system") or "")
        text = _answer(body, [{"role": "user", "content": prompt}], system)
        self._ollama_reply(body, model, text, _tokens(system + prompt),
                           lambda piece: {"response": piece})

    def _ollama_reply(self, body: dict[str, Any], model: str, text: str, prompt: int,
                      part: Any) -> None:
        started = time.monotonic_ns()
        done = {"done": True, "done_reason": "stop", "total_duration": 0, "load_duration": 0,
                "prompt_eval_count": prompt, "prompt_eval_duration": 0,
                "eval_count": _tokens(text), "eval_duration": 0}
        if body.get("stream", True) is False:
            self._send(200, {"model": model, "created_at": _now(), **part(text), **done,
                             "total_duration": time.monotonic_ns() - started})
            return

        def frames() -> Iterator[bytes]:
            for piece in _pieces(text):
                yield json.dumps({"model": model, "created_at": _now(), **part(piece),
                                  "done": False}, ensure_ascii=False).encode() + b"\n"
            yield json.dumps({"model": model, "created_at": _now(), **part(""), **done}).encode() + b"\n"

        self._stream("application/x-ndjson", frames())

    def _embed(self, body: dict[str, Any]) -> None:
        given = body.get("input")
        texts = [given] if isinstance(given, str) else [str(t) for t in given or []]
        self._send(200, {"model": body.get("model"),
                         "embeddings": [embedding(text) for text in texts]})

    def _embed_one(self, body: dict[str, Any]) -> None:
        self._send(200, {"embedding": embedding(str(body.get("prompt") or ""))})

    # -- OpenAI-compatible ----------------------------------------------------------------

    def _completion(self, body: dict[str, Any]) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
        model = str(body.get("model") or self.server.models[0])
        system = "\n".join(str(m.get("content") or "") for m in messages
                           if m.get("role") in ("system", "developer"))
        text = _answer(body, messages, system)
        prompt = sum(_tokens(json.dumps(m.get("content"))) for m in messages)
        usage = {"prompt_tokens": prompt, "completion_tokens": _tokens(text),
                 "total_tokens": prompt + _tokens(text)}
        head = {"id": f"chatcmpl-demo-{time.monotonic_ns()}", "created": int(time.time()),
                "model": model}
        if not body.get("stream"):
            self._send(200, {**head, "object": "chat.completion", "choices": [{
                "index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}], "usage": usage})
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        with_usage = (body.get("stream_options") or {}).get("include_usage")

        def events() -> Iterator[bytes]:
            for index, piece in enumerate(_pieces(text)):
                delta = {"content": piece, **({"role": "assistant"} if index == 0 else {})}
                yield _sse({**chunk, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": None}]})
            yield _sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if with_usage:
                yield _sse({**chunk, "choices": [], "usage": usage})
            yield b"data: [DONE]\n\n"

        self._stream("text/event-stream", events())

    def _v1_embeddings(self, body: dict[str, Any]) -> None:
        given = body.get("input")
        texts = [given] if isinstance(given, str) else [str(t) for t in given or []]
        self._send(200, {"object": "list", "model": body.get("model"), "data": [
            {"object": "embedding", "index": i, "embedding": embedding(t)}
            for i, t in enumerate(texts)]})


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"
