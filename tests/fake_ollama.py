"""A fake Ollama server for the test suite and the benchmarks.

Real HTTP on a loopback port, speaking the wire formats of Ollama's native API
(/, /api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags, /api/show,
/api/version, /api/ps, /api/pull, /api/push, /api/create, /api/copy, /api/delete,
/api/blobs/<digest>) and of its OpenAI-compatible API (/v1/chat/completions,
/v1/completions, /v1/models, /v1/models/<id>, /v1/embeddings), so the official
`ollama` and `openai` packages work against it.

Replies are scripted per test and consumed in order, one per call:

    fake_ollama.script_chat("Hello there", Fault.http_500("boom"), {"name": "Ana"},
                            Reply(tool_calls=[{"name": "get_weather",
                                               "arguments": {"city": "Paris"}}]))

A str is the reply text; a dict or list is sent as its JSON text; a `Reply` adds
thinking and tool calls, in each API's own shape (streamed as Ollama and OpenAI stream
them); a `Fault` changes how that call fails. Chat scripts serve /api/chat and
/v1/chat/completions; generate scripts serve /api/generate and /v1/completions. When a
script is empty, `fake.responder(body)` is asked (if set; returning None means "no
opinion"), then a deterministic default: "ok: <last user text>" (first 60 characters),
followed by " [saw N image(s)]" when the request carried images; or, when the request
asks for JSON, "{}" — or, for a JSON schema (`format`, or `response_format` on /v1), the
smallest JSON value that satisfies it. `messages: []` on /api/chat is Ollama's model
load (`done_reason` "load", or "unload" with `keep_alive: 0`).

Token counts are deterministic so tests can calibrate estimates:
`count_tokens(text)` is ceil(len(text) / 4); `prompt_eval_count` is the sum of
`count_tokens` over every message's content (chat) or over system + prompt
(generate); `eval_count` is `count_tokens(reply)`.

Embeddings default to a hashed bag of words, L2-normalised (`embedding_dim`, 16 by
default), so texts sharing words have a high cosine similarity; set
`fake.embed_fn = lambda text: [...]` to override.

Requests with a model not in `fake.models` get HTTP 404 with Ollama's own message.
`fake.engine = "<name>"` (a key of ENGINES) refuses a JSON format (`format`,
`response_format`) with the status and body that server answers ("llama.cpp" also adds
its `timings` to a /v1 reply's last chunk); `fake.honour_limits =
True` cuts each reply at the request's num_predict / max_tokens / stop, as servers do.
Every request is recorded in `fake.requests` (method, path, parsed JSON body whatever
its Content-Type, headers); `fake.bodies(path)` lists the bodies one path received and
`fake.images()` every image a chat request carried.

By default every reply is instant and requests are served in parallel. With
`cpu=CpuSpeed(prompt, generate)` (benchmarks) the chat and completion endpoints serve
each model as a CPU does with one slot (`OLLAMA_NUM_PARALLEL=1`): one request per
model at a time, the others waiting their turn; a KV cache per model holding the last
request's prompt and what was generated after it, so only what follows the longest
common prefix is evaluated anew, at `prompt` tokens per second; and the reply streamed
at `generate` tokens per second. Prompts are compared as rendered by a simple chat
template (`rendered_prompt`). Each request served is recorded in `fake.evaluations`
(when it arrived, started, gave its first token and ended; prompt, cached and
generated characters), and the done line carries `prompt_eval_cached_count`, as
Ollama's does. A client that hangs up while waiting or being served is dropped at
once, its slot keeping what was evaluated.

Run it standalone (end-to-end tests, benchmarks); it prints its URL on one line:

    python -m tests.fake_ollama --port 11500 [--latency-ms 5] [--script-file F]
                                [--prompt-tps 60 --generate-tps 12]

The script file is JSON: {"chat": [...], "generate": [...], "embed": [...],
"models": [...]}, where a chat/generate item is a string, {"reply": <str or JSON>},
{"text": ..., "thinking": ..., "tool_calls": [{"name": ..., "arguments": {...}}]} (a
Reply) or a fault spec such as {"fault": "delay", "seconds": 0.5}, {"fault": "http_500"},
{"fault": "malformed_json"}, {"fault": "cut_stream", "after_chunks": 2},
{"fault": "endless"} (a reply streamed for ever) or {"fault": "hang"} (no answer at all).
"""

from __future__ import annotations

import argparse
import base64
import collections
import functools
import hashlib
import json
import math
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

DEFAULT_MODELS = ("gemma3:4b", "nomic-embed-text:latest", "qwen2.5:3b")
DEFAULT_EMBEDDING_DIM = 16
# What a model with a half-written JSON object looks like (Fault.malformed_json on a
# request that asked for JSON).
MALFORMED_JSON_CONTENT = '{"profile": ['
# A body no JSON parser accepts (Fault.malformed_json on an ordinary request).
MALFORMED_BODY = b'{"model": "broken", "message": {"role": "assistant", "content": '


# ----------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class Fault:
    """How one scripted call misbehaves. Build with the class methods."""

    kind: str
    seconds: float = 0.0
    status: int = 500
    message: str = ""
    after_chunks: int = 0
    then: Any = None

    @classmethod
    def delay(cls, seconds: float, then: Any = None) -> Fault:
        """Wait, then answer with `then` (a reply or another Fault), else the default."""
        return cls("delay", seconds=seconds, then=then)

    @classmethod
    def http_500(cls, message: str = "an internal error occurred") -> Fault:
        return cls.http_error(500, message)

    @classmethod
    def http_error(cls, status: int, message: str) -> Fault:
        return cls("http_error", status=status, message=message)

    @classmethod
    def malformed_json(cls) -> Fault:
        """Non-JSON body; or, when the request asked for JSON, a broken JSON reply."""
        return cls("malformed_json")

    @classmethod
    def cut_stream(cls, after_chunks: int = 1) -> Fault:
        """Stream N chunks, then drop the connection with no done line.

        On a non-streaming request the connection drops before any response.
        """
        return cls("cut_stream", after_chunks=after_chunks)

    @classmethod
    def endless(cls) -> Fault:
        """Stream the reply's pieces over and over, never ending and ignoring every limit,
        until the client hangs up: a model looping inside its JSON on a server that
        honours no output limit."""
        return cls("endless")

    @classmethod
    def hang(cls) -> Fault:
        """Take the request and never answer (no status, no byte) until the client hangs
        up: a server stuck before its first token."""
        return cls("hang")

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Fault:
        """A fault from a script file entry, e.g. {"fault": "delay", "seconds": 1}."""
        kind = spec["fault"]
        if kind == "delay":
            return cls.delay(spec.get("seconds", 0.0), then=_script_item(spec["then"]) if "then" in spec else None)
        if kind == "http_500":
            return cls.http_500(spec.get("message", "an internal error occurred"))
        if kind == "http_error":
            return cls.http_error(spec["status"], spec.get("message", "error"))
        if kind == "malformed_json":
            return cls.malformed_json()
        if kind == "cut_stream":
            return cls.cut_stream(spec.get("after_chunks", 1))
        if kind in ("endless", "hang"):
            return getattr(cls, kind)()
        raise ValueError(f"unknown fault {kind!r}: use delay, http_500, http_error, "
                         "malformed_json, cut_stream, endless or hang")


@dataclass(frozen=True)
class Reply:
    """A scripted reply beyond plain text: the model's thinking and its tool calls,
    each call {"name": str, "arguments": {...}} (an "id" is made up if absent)."""

    text: str = ""
    thinking: str = ""
    tool_calls: Sequence[dict[str, Any]] = ()
    done_reason: str = "stop"


def _script_item(item: Any) -> Any:
    """A script file entry → a reply or a Fault."""
    if isinstance(item, dict) and "fault" in item:
        return Fault.from_spec(item)
    if isinstance(item, dict) and "reply" in item:
        return item["reply"]
    if isinstance(item, dict) and ("tool_calls" in item or "thinking" in item):
        return Reply(text=item.get("text", ""), thinking=item.get("thinking", ""),
                     tool_calls=item.get("tool_calls", ()))
    return item


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    body: Any  # parsed JSON, the raw text if it was not JSON, or None
    headers: dict[str, str]


@dataclass(frozen=True)
class CpuSpeed:
    """How fast a simulated CPU model reads a prompt and writes a reply, in tokens/s."""

    prompt_tokens_per_second: float
    generate_tokens_per_second: float


@dataclass
class Evaluation:
    """One chat or completion request as the simulated model served it (times are
    time.monotonic())."""

    model: str
    path: str
    arrived: float
    prompt_chars: int
    started: float | None = None  # the model took it (after the requests ahead of it)
    cached_chars: int = 0  # the prompt's longest common prefix with the slot
    first_token: float | None = None  # the prompt read, the first piece sent
    ended: float | None = None
    generated_chars: int = 0
    dropped: bool = False  # the client hung up before the reply ended
    wants_json: bool = False  # the request asked for JSON (`format`, `response_format`)
    waited_behind: list[str] = field(default_factory=list)  # paths served while it waited

    @property
    def new_chars(self) -> int:
        """Characters of the prompt the model evaluated anew."""
        return self.prompt_chars - self.cached_chars

    @property
    def new_tokens(self) -> int:
        return tokens_of_chars(self.new_chars)

    @property
    def prompt_tokens(self) -> int:
        return tokens_of_chars(self.prompt_chars)


def tokens_of_chars(chars: int) -> int:
    return (chars + 3) // 4


def rendered_prompt(path: str, body: dict[str, Any]) -> str:
    """A request's prompt as a chat template renders it: what a KV cache compares."""
    if path in ("/api/chat", "/v1/chat/completions"):
        turns = []
        for message in body.get("messages") or []:
            if not isinstance(message, dict):
                continue
            calls = message.get("tool_calls")
            extra = json.dumps(calls, sort_keys=True) if calls else ""
            turns.append(f"<|{message.get('role')}|>\n{message_text(message)}{extra}<|end|>\n")
        return "".join(turns) + "<|assistant|>\n"
    if path == "/v1/completions":
        return str(body.get("prompt") or "")
    system = str(body.get("system") or "")
    opening = f"<|system|>\n{system}<|end|>\n" if system else ""
    return f"{opening}<|user|>\n{body.get('prompt') or ''}<|end|>\n<|assistant|>\n"


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of a and b."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on equal slices: fast for long prompts
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def count_tokens(text: str) -> int:
    """The fake's tokenizer: one token per 4 characters, rounded up."""
    return (len(text) + 3) // 4


def message_text(message: dict[str, Any]) -> str:
    """Text of a chat message; OpenAI-style content may be a list of parts."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def prompt_tokens(messages: Sequence[dict[str, Any]]) -> int:
    return sum(count_tokens(message_text(m)) for m in messages)


def hashed_bag_of_words(text: str, dim: int = DEFAULT_EMBEDDING_DIM) -> list[float]:
    """Deterministic embedding: each word adds ±1 to a hashed slot; L2-normalised."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dim
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0:
        # Real models never return a zero vector; cosine code may divide by the norm.
        return [1.0] + [0.0] * (dim - 1)
    return [v / norm for v in vector]


def unused_loopback_url() -> str:
    """A URL on a loopback port nothing listens on: connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _full_name(model: str) -> str:
    """Ollama's naming: a model without a tag means its :latest tag."""
    return model if ":" in model else f"{model}:latest"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _split_into_pieces(text: str) -> list[str]:
    """Stream chunks, one per word with its trailing space, so a cut lands mid-reply."""
    return re.findall(r"\S+\s*|\s+", text)


def _reply_text(reply: Any) -> str:
    return reply if isinstance(reply, str) else json.dumps(reply)


# ----------------------------------------------------------------------------- the server


class FakeOllama:
    """A scripted Ollama server on 127.0.0.1; `start()` it, point clients at `url`."""

    def __init__(
        self,
        *,
        models: Sequence[str] = DEFAULT_MODELS,
        embedding_dim: int = DEFAULT_EMBEDDING_DIM,
        latency: float = 0.0,
        embed_latency: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        cpu: CpuSpeed | None = None,
    ) -> None:
        self._initial_models = list(models)
        self.cpu = cpu  # None: instant replies, requests served in parallel
        self.slots: dict[str, str] = {}  # model -> what its KV cache holds (with cpu)
        self.evaluations: list[Evaluation] = []  # requests the simulated CPU served
        self._model_locks: dict[str, threading.Lock] = {}
        self.models: list[str] = list(models)
        self.embedding_dim = embedding_dim
        self._initial_latency = latency
        self.latency = latency  # seconds added to every call, for benchmarks
        self.embed_latency = embed_latency  # seconds an embedding request takes, for benchmarks
        self.responder: Callable[[dict[str, Any]], Any] | None = None
        # Which server's refusals of a JSON format to imitate (ENGINES); None accepts all.
        self.engine: str | None = None
        # Whether replies stop where a request's limits say (num_predict, max_tokens, stop),
        # as every real server's do; off by default, so scripted replies come back whole.
        self.honour_limits = False
        self.embed_fn: Callable[[str], list[float]] = self.default_embedding
        self.requests: list[RecordedRequest] = []
        self.blobs: set[str] = set()
        self._scripts: dict[str, collections.deque[Any]] = {
            kind: collections.deque() for kind in ("chat", "generate", "embed")
        }
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server = _Server((host, port), _Handler, self)
        self._thread: threading.Thread | None = None

    # -- lifecycle

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeOllama:
        # The socket is already bound and listening, so clients can connect right away.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True, name="fake-ollama"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes delayed replies
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for connection in open_connections:
            # Keep-alive connections would otherwise outlive the server.
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting

    def script_chat(self, *replies: Any) -> None:
        """Queue replies for /api/chat and /v1/chat/completions, one per call."""
        self._queue("chat", replies)

    def script_generate(self, *replies: Any) -> None:
        """Queue replies for /api/generate, one per call."""
        self._queue("generate", replies)

    def script_embed(self, *items: Any) -> None:
        """Queue Faults, or explicit embeddings (a list of vectors), for embed calls."""
        self._queue("embed", items)

    def load_script(self, path: str) -> None:
        with open(path, encoding="utf-8") as file:
            script = json.load(file)
        if "models" in script:
            self.models = list(script["models"])
        for kind in ("chat", "generate", "embed"):
            self._queue(kind, [_script_item(item) for item in script.get(kind, [])])

    def reset(self) -> None:
        """Back to as constructed: no scripts, requests, responder or changed settings."""
        with self._lock:
            for script in self._scripts.values():
                script.clear()
            self.requests.clear()
            self.evaluations.clear()
            self.slots.clear()
        self.responder = None
        self.engine = None
        self.honour_limits = False
        self.latency = self._initial_latency
        self.models = list(self._initial_models)
        self.embed_fn = self.default_embedding

    def default_embedding(self, text: str) -> list[float]:
        return hashed_bag_of_words(text, self.embedding_dim)

    def bodies(self, path: str) -> list[Any]:
        """JSON bodies of the recorded requests to `path`, oldest first."""
        with self._lock:
            return [r.body for r in self.requests if r.path == path]

    def images(self) -> list[str]:
        """Every image the chat requests carried, oldest first: Ollama's base64 strings,
        OpenAI's image_url URLs."""
        with self._lock:
            bodies = [r.body for r in self.requests
                      if r.path in ("/api/chat", "/v1/chat/completions") and isinstance(r.body, dict)]
        return [image for body in bodies for message in body.get("messages") or []
                for image in _images_of(message)]

    # -- used by the endpoint functions

    def knows(self, model: str) -> bool:
        return _full_name(model) in {_full_name(m) for m in self.models}

    def next_reply(self, kind: str, body: dict[str, Any]) -> Any:
        with self._lock:
            script = self._scripts[kind]
            if script:
                return script.popleft()
        return self.unscripted_reply(kind, body)

    def unscripted_reply(self, kind: str, body: dict[str, Any]) -> Any:
        if kind == "embed":
            return None  # computed with embed_fn
        if self.responder is not None:
            reply = self.responder(body)
            if reply is not None:
                return reply
        return _default_reply(kind, body)

    def pause(self, seconds: float) -> None:
        """Sleep that ends early when the server stops, so teardown never waits."""
        if seconds > 0:
            self._stopping.wait(seconds)

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def track(self, connection: socket.socket, is_open: bool) -> None:
        with self._lock:
            if is_open:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _queue(self, kind: str, items: Sequence[Any]) -> None:
        with self._lock:
            self._scripts[kind].extend(items)

    @contextmanager
    def model_run(self, http: _Handler, model: str, path: str, body: dict[str, Any]) -> Iterator[ModelRun]:
        """The model serving one request: with `cpu`, one request per model at a time
        and the time its slot's cache does not save; without, nothing to wait for."""
        if self.cpu is None:
            yield ModelRun(self, http, None, "")
            return
        name = _full_name(model)
        prompt = rendered_prompt(path, body)
        evaluation = Evaluation(name, path, time.monotonic(), len(prompt), wants_json=_wants_json(body))
        with self._lock:
            lock = self._model_locks.setdefault(name, threading.Lock())
            self.evaluations.append(evaluation)
        run = ModelRun(self, http, evaluation, prompt)
        while not lock.acquire(timeout=0.01):
            run.check_client()
        try:
            with self._lock:
                evaluation.started = time.monotonic()
                evaluation.cached_chars = common_prefix(self.slots.get(name, ""), prompt)
                evaluation.waited_behind = [e.path for e in self.evaluations
                                            if e.model == name and e.started is not None
                                            and e is not evaluation
                                            and e.started <= evaluation.started
                                            and (e.ended is None or e.ended > evaluation.arrived)]
            yield run
        finally:
            with self._lock:
                self.slots[name] = prompt[:evaluation.cached_chars + run.evaluated_chars] + run.generated
                evaluation.generated_chars = len(run.generated)
                evaluation.ended = time.monotonic()
                evaluation.dropped = run.dropped or evaluation.first_token is None
            lock.release()


class ModelRun:
    """One request on the simulated CPU: read the prompt, then generate piece by piece.
    Without a CPU (`evaluation` None) every step is instant."""

    def __init__(self, fake: FakeOllama, http: _Handler, evaluation: Evaluation | None,
                 prompt: str) -> None:
        self.fake, self.http, self.evaluation, self.prompt = fake, http, evaluation, prompt
        self.evaluated_chars = 0
        self.generated = ""
        self.dropped = False

    @property
    def cached_tokens(self) -> int | None:
        if self.evaluation is None:
            return None
        return self.evaluation.cached_chars // 4

    def check_client(self) -> None:
        """Stop serving a client that hung up (a worker abandoning its call)."""
        if self.evaluation is not None and _peer_closed(self.http.connection):
            self.dropped = True
            raise ConnectionAbortedError("the client hung up")

    def _spend(self, seconds: float, on_step: Callable[[float], None] | None = None) -> None:
        deadline = time.monotonic() + seconds
        while not self.fake._stopping.is_set():
            self.check_client()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            step = min(left, 0.01)
            time.sleep(step)
            if on_step is not None:
                on_step(step)

    def read_prompt(self) -> None:
        """Evaluate what follows the cached prefix."""
        evaluation, cpu = self.evaluation, self.fake.cpu
        if evaluation is None or evaluation.first_token is not None or cpu is None:
            return
        rate = cpu.prompt_tokens_per_second * 4  # characters per second
        total = evaluation.new_chars

        def advance(step: float) -> None:
            self.evaluated_chars = min(total, self.evaluated_chars + int(step * rate))

        self._spend(tokens_of_chars(total) / cpu.prompt_tokens_per_second, advance)
        self.evaluated_chars = total
        evaluation.first_token = time.monotonic()

    def generate(self, text: str) -> None:
        """Write `text` at the model's speed (reading the prompt first if not yet done)."""
        self.read_prompt()
        if self.evaluation is None or self.fake.cpu is None or not text:
            return
        self._spend(count_tokens(text) / self.fake.cpu.generate_tokens_per_second)
        self.generated += text


def _peer_closed(connection: socket.socket) -> bool:
    """Whether the client closed its end (readable, with nothing to read)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _wants_json(body: dict[str, Any]) -> bool:
    if body.get("format") not in (None, ""):
        return True
    response_format = body.get("response_format") or {}
    return response_format.get("type") in ("json_object", "json_schema")


def _json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(body.get("format"), dict):
        return body["format"]
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return (response_format.get("json_schema") or {}).get("schema") or {}
    return None


def smallest_instance(schema: dict[str, Any], definitions: dict[str, Any] | None = None) -> Any:
    """The smallest JSON value a (simple) JSON schema accepts: what a model constrained
    to it would at least say. Follows $ref, anyOf, enum, const and required properties."""
    definitions = definitions if definitions is not None else schema.get("$defs") or {}
    if "$ref" in schema:
        return smallest_instance(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for combined in ("anyOf", "oneOf", "allOf"):
        if schema.get(combined):
            return smallest_instance(schema[combined][0], definitions)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: smallest_instance(properties.get(name) or {}, definitions)
                for name in schema.get("required") or list(properties)}
    empty = {"array": [], "string": "x", "integer": 0, "number": 0, "boolean": False, "null": None}
    return empty.get(kind, None)


_SOURCE_LINE = re.compile(r"^(?:USER|TOOL)[^:\n]*:\s?(.*)$", re.MULTILINE)
_LAST_HELD = re.compile(r"the last (\d+) messages above")
_HELD_BEFORE = re.compile(r"(\d+) messages above, ending (\d+) messages before the last one")
_LEARNED_BEFORE = re.compile(r"(\d+) of the user's messages among them were learned from before")
# The memory note Hilo puts before a message it recalled for (app/turn/context.py).
_MEMORY_NOTE = re.compile(r"\A<memory>\n.*?\n</memory>\n\n", re.DOTALL)


def _quoted_sources(question: str) -> list[str]:
    """The USER and TOOL lines a question quotes, and the text under a label that quotes
    outside content ('QUOTED FROM OUTSIDE …:' or 'TOOL …, from outside…:', then '> ' lines;
    app/learn/quoting.py): an obedient model reads both."""
    said: list[str] = []
    quoting = False
    for line in question.splitlines():
        if line.startswith("> "):
            if quoting:
                said[-1] = f"{said[-1]}\n{line[2:]}".strip()
            continue
        quoting = line.startswith(("TOOL", "QUOTED")) and line.endswith(":")
        if quoting:
            said.append("")
        elif (match := _SOURCE_LINE.match(line)):
            said.append(match.group(1).strip())
    return [text for text in said if text]


def learning_sources(body: dict[str, Any]) -> list[str]:
    """What a learning call asks facts of, as a model would find it: the USER and TOOL
    lines it quotes, or the user's messages and tool results of the chat above that it
    points at ("the last 4 messages above", "4 messages above, ending 2 messages before
    the last one"; app/learn/distill.py referring_prompt), less the user's messages it
    says were learned before."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    question = str(body.get("prompt") or (messages[-1].get("content") if messages else "") or "")
    quoted = _quoted_sources(question)
    if quoted:
        return quoted
    last, before = _LAST_HELD.search(question), _HELD_BEFORE.search(question)
    if not (last or before) or len(messages) < 2:
        return []
    count, after = (int(last.group(1)), 0) if last else (int(before.group(1)), int(before.group(2)))
    chat = messages[:-1]
    block = chat[max(0, len(chat) - after - count):len(chat) - after]
    learned = _LEARNED_BEFORE.search(question)
    skip = int(learned.group(1)) if learned else 0
    said = []
    for message in block:
        if message.get("role") == "user" and skip:
            skip -= 1
        elif message.get("role") in ("user", "tool"):
            said.append(_MEMORY_NOTE.sub("", str(message.get("content") or "")))
    return said


def _images_of(message: dict[str, Any]) -> list[str]:
    images = [str(image) for image in message.get("images") or []]
    content = message.get("content")
    if isinstance(content, list):
        images += [str((part.get("image_url") or {}).get("url")) for part in content
                   if isinstance(part, dict) and part.get("type") == "image_url"]
    return images


def _default_reply(kind: str, body: dict[str, Any]) -> str:
    schema = _json_schema(body)
    if schema is not None:
        return json.dumps(smallest_instance(schema))
    if _wants_json(body):
        return "{}"
    if kind == "generate":
        said = str(body.get("prompt", ""))
        return f"ok: {said[:60]}"
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    user_turns = [m for m in messages if m.get("role") == "user"]
    said = message_text(user_turns[-1]) if user_turns else ""
    images = sum(len(_images_of(m)) for m in messages)
    seen = f" [saw {images} image{'s' if images > 1 else ''}]" if images else ""
    return f"ok: {said[:60]}{seen}"


# ----------------------------------------------------------------------------- HTTP plumbing


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck handler must never keep the test process alive
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops simultaneous connects from concurrent
    # clients, which then stall a full second on SYN retransmission.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type, fake: FakeOllama) -> None:
        self.fake = fake
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or hang up leave broken pipes behind: expected here.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: benchmarks measure the server, not TCP setup
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Small writes (stream chunks) must leave at once, not wait for Nagle.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake.track(self.connection, is_open=True)

    def finish(self) -> None:
        self.server.fake.track(self.connection, is_open=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test and benchmark output clean

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path.rstrip("/") or "/"
        body = self._read_body()
        fake.record(RecordedRequest(method, path, body, {k.lower(): v for k, v in self.headers.items()}))
        fake.pause(fake.latency)
        route = _route(method, path)
        if route is None:
            self.send_bytes(404, b"404 page not found", "text/plain")
        elif route is _WRONG_METHOD:
            self.send_bytes(405, b"405 method not allowed", "text/plain")
        elif (method in ("POST", "DELETE") and not isinstance(body, dict)
              and not path.startswith("/api/blobs/")):  # a blob's body is its bytes
            self.send_json(400, {"error": "invalid JSON in request body"})
        else:
            route(fake, self, body)

    def _read_body(self) -> Any:
        """The body as JSON whatever its Content-Type (as Ollama reads it), else its text."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _read_chunked(self) -> bytes:
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    # -- responses

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, obj: Any) -> None:
        self.send_bytes(status, json.dumps(obj).encode(), "application/json; charset=utf-8")

    def start_stream(self, content_type: str, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def hang_up(self) -> None:
        """Drop the connection abruptly, as a crashed server would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# ----------------------------------------------------------------------------- endpoints


def _ollama_error(message: str) -> dict[str, Any]:
    return {"error": message}


def _openai_error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# How each model server refuses a JSON format it does not take: (status, body) for a
# request's `format` (Ollama's API) or `response_format` type (the OpenAI one), and where
# that behaviour was learned. Set `fake.engine` to one of these names.
ENGINES: dict[str, dict[str, tuple[int, Any]]] = {
    # Ollama 0.5 and later: a schema as `format`, json_object and json_schema on /v1
    # (github.com/ollama/ollama/blob/main/docs/api.md "structured outputs"; github.com/ollama/ollama/issues/7991).
    "ollama": {},
    # Ollama before 0.5: `format` is a Go string, so an object fails to unmarshal: 400
    # (ollama/ollama#7991, ollama/ollama-python#428, with 0.3.13 and 0.4.0).
    "ollama-0.4": {"format-object": (400, {
        "error": "json: cannot unmarshal object into Go struct field ChatRequest.format "
                 "of type string"})},
    # llama.cpp's llama-server since PR ggml-org/llama.cpp#9527 takes json_schema and
    # json_object; it never refuses either.
    "llama.cpp": {},
    # llama-server builds before that PR (and ik_llama.cpp until 2025-09,
    # ikawrakow/ik_llama.cpp#778): json_object only, refused by an exception answered as 500.
    "llama.cpp-old": {"json_schema": (500, {"error": {
        "code": 500, "type": "server_error",
        "message": 'response_format type must be one of "text" or "json_object", but got: '
                   "json_schema"}})},
    # llama-cpp-python's server: ChatCompletionRequestResponseFormat's type is
    # Literal["text", "json_object"] (llama_cpp/llama_types.py); the validation error is
    # caught by its RouteErrorHandler (llama_cpp/server/errors.py) and answered as a 500
    # (ggml-org/llama.cpp#23463, with 0.3.23). A FastAPI app without that handler: 422.
    "llama-cpp-python": {"json_schema": (500, {"error": {
        "message": "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
                   "  Input should be 'text' or 'json_object' [type=literal_error, "
                   "input_value='json_schema', input_type=str]",
        "type": "internal_server_error", "param": None, "code": None}})},
    "fastapi-422": {"json_schema": (422, {"detail": [{
        "type": "literal_error", "loc": ["body", "response_format", "type"],
        "msg": "Input should be 'text' or 'json_object'", "input": "json_schema"}]})},
    # vLLM: response_format type text, json_object, json_schema, structural_tag
    # (vllm/entrypoints/openai/protocol.py); it takes both of Hilo's.
    "vllm": {},
    # LM Studio: json_schema and text, never json_object: 400 with a string error
    # (lmstudio-ai/lmstudio-bug-tracker#189, #307; 0.3 to 0.4.19).
    "lmstudio": {"json_object": (400, {
        "error": "'response_format.type' must be 'json_schema' or 'text'"})},
    # A server that refuses every format (the plain-instruction rung's case).
    "text-only": {"format-object": (400, {"error": "format is not supported"}),
                  "format-json": (400, {"error": "format is not supported"}),
                  "json_schema": (400, {"error": {"message": "response_format is not supported"}}),
                  "json_object": (400, {"error": {"message": "response_format is not supported"}})},
}


def format_refusal(engine: str | None, body: Any) -> tuple[int, Any] | None:
    """How `engine` answers a request's JSON format, when it refuses it."""
    if engine is None or not isinstance(body, dict):
        return None
    refusals = ENGINES[engine]
    fmt = body.get("format")
    if isinstance(fmt, dict):
        return refusals.get("format-object")
    if fmt == "json":
        return refusals.get("format-json")
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        return refusals.get(str(response_format.get("type")))
    return None


def _not_found_message(model: str) -> str:
    return f'model "{model}" not found, try pulling it first'


@dataclass
class _Answer:
    """The reply to send, and a fault still to apply while sending it."""

    text: str
    fault: Fault | None = None
    thinking: str = ""
    tool_calls: Sequence[dict[str, Any]] = ()
    done_reason: str = "stop"

    def calls(self) -> list[dict[str, Any]]:
        return [{"id": call.get("id") or f"call_{index}", "name": call["name"],
                 "arguments": call.get("arguments") or {}}
                for index, call in enumerate(self.tool_calls)]


def _answer(
    fake: FakeOllama, kind: str, body: dict[str, Any], http: _Handler, error_body: Callable[[int, str], Any]
) -> _Answer | None:
    """Resolve the next scripted item; None when a fault has already answered."""
    refusal = format_refusal(fake.engine, body)
    if refusal is not None:  # refused before the model runs: no script item is used
        http.send_json(*refusal)
        return None
    item = fake.next_reply(kind, body)
    while isinstance(item, Fault) and item.kind == "delay":
        fake.pause(item.seconds)
        item = item.then if item.then is not None else fake.unscripted_reply(kind, body)
    if isinstance(item, Fault) and item.kind == "http_error":
        http.send_json(item.status, error_body(item.status, item.message))
        return None
    if isinstance(item, Fault) and item.kind == "hang":
        while not fake._stopping.is_set() and not _peer_closed(http.connection):
            fake.pause(0.01)
        http.close_connection = True
        return None
    if isinstance(item, Fault):
        text = _reply_text(fake.unscripted_reply(kind, body))
        if item.kind == "malformed_json" and _wants_json(body):
            return _Answer(MALFORMED_JSON_CONTENT)  # a well-formed response carrying broken JSON
        return _Answer(text, item)
    if isinstance(item, Reply):
        return _Answer(item.text, None, item.thinking, item.tool_calls, item.done_reason)
    text = _reply_text(item)
    if fake.honour_limits:
        return _Answer(*within_limits(text, body))
    return _Answer(text)


def within_limits(text: str, body: dict[str, Any]) -> tuple[str, None, str, tuple, str]:
    """What a server writes of `text` under the request's limits — up to its first stop
    sequence, and at most num_predict (Ollama) or max_tokens (OpenAI) tokens — as
    _Answer's fields: text, no fault, no thinking, no calls, done reason."""
    options = body.get("options") if isinstance(body.get("options"), dict) else {}
    stops = options.get("stop", body.get("stop")) or []
    for stop in [stops] if isinstance(stops, str) else stops:
        if isinstance(stop, str) and stop and stop in text:
            text = text[:text.index(stop)]
    limit = options.get("num_predict", body.get("max_completion_tokens", body.get("max_tokens")))
    if isinstance(limit, int) and 0 <= limit * 4 < len(text):
        return text[:limit * 4], None, "", (), "length"  # count_tokens: 4 characters a token
    return text, None, "", (), "stop"


def _send_stream(
    http: _Handler, content_type: str, frames: list[bytes], ending: list[bytes], fault: Fault | None,
    run: ModelRun | None = None, generated: str = "",
) -> None:
    """Send content frames then the ending; a fault cuts or garbles the stream. With a
    `run`, the prompt is read before the first frame and `generated` is written across
    the frames at the model's speed."""
    paced: Iterator[bytes] = iter(frames)
    if run is not None:
        run.read_prompt()
        paced = _paced(frames, _shares(generated, len(frames)), run)
    http.start_stream(content_type)
    if fault is not None and fault.kind == "malformed_json":
        garbage = b"<html>this is not json</html>"
        http.write_chunk(b"data: " + garbage + b"\n\n" if content_type == "text/event-stream" else garbage + b"\n")
        http.end_stream()
        return
    if fault is not None and fault.kind == "cut_stream":
        for _, frame in zip(range(fault.after_chunks), paced, strict=False):
            http.write_chunk(frame)
        http.hang_up()
        return
    if fault is not None and fault.kind == "endless":
        _send_endlessly(http, frames or ending[:1])
        return
    for frame in paced:
        http.write_chunk(frame)
    for frame in ending:
        http.write_chunk(frame)
    http.end_stream()


def _send_endlessly(http: _Handler, frames: list[bytes]) -> None:
    """The frames over and over, a millisecond apart, until the client or the server goes."""
    fake = http.server.fake
    sent = 0
    while not fake._stopping.is_set():
        try:
            http.write_chunk(frames[sent % len(frames)])
        except OSError:  # the client hung up
            break
        sent += 1
        if _peer_closed(http.connection):
            break
        fake.pause(0.001)
    http.close_connection = True


def _paced_by(run: ModelRun, generated: str) -> tuple:
    """The pacing arguments of _send_stream / _send_whole: none without a simulated CPU,
    so the default call is the plain one (tests replace _send_stream with their own)."""
    return () if run.evaluation is None else (run, generated)


def _shares(text: str, count: int) -> list[str]:
    """`text` cut into `count` consecutive pieces (the last takes the rest)."""
    if count <= 0:
        return []
    size = len(text) // count
    return [text[i * size:(i + 1) * size] if i < count - 1 else text[i * size:] for i in range(count)]


def _paced(frames: list[bytes], shares: list[str], run: ModelRun) -> Iterator[bytes]:
    for frame, share in zip(frames, shares, strict=False):
        run.generate(share)
        yield frame


def _send_whole(http: _Handler, obj: Any, fault: Fault | None, run: ModelRun | None = None,
                generated: str = "") -> None:
    if run is not None:
        run.generate(generated)
        run.read_prompt()
    if fault is not None and fault.kind == "cut_stream":
        http.hang_up()
    elif fault is not None and fault.kind == "malformed_json":
        http.send_bytes(200, MALFORMED_BODY, "application/json; charset=utf-8")
    else:
        http.send_json(200, obj)


def _ndjson(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _done_stats(started: float, prompt_count: int, reply: str, done_reason: str = "stop",
                run: ModelRun | None = None) -> dict[str, Any]:
    """Ollama's done line; with a simulated CPU, its durations are that CPU's time for the
    prompt read anew and the reply (nanoseconds, as Ollama's)."""
    total = int((time.perf_counter() - started) * 1e9)
    prompt_ns, reply_ns = total // 2, total // 2
    cpu = run.fake.cpu if run is not None and run.evaluation is not None else None
    if cpu is not None and run is not None and run.evaluation is not None:
        prompt_ns = int(run.evaluation.new_tokens / cpu.prompt_tokens_per_second * 1e9)
        reply_ns = int(count_tokens(reply) / cpu.generate_tokens_per_second * 1e9)
        total = prompt_ns + reply_ns
    cached = {} if run is None or run.cached_tokens is None else {
        "prompt_eval_cached_count": min(run.cached_tokens, prompt_count)}
    return {
        **cached,
        "done_reason": done_reason,
        "total_duration": total,
        "load_duration": 0,
        "prompt_eval_count": prompt_count,
        "prompt_eval_duration": prompt_ns,
        "eval_count": count_tokens(reply),
        "eval_duration": reply_ns,
    }


def _model_or_404(fake: FakeOllama, http: _Handler, body: dict[str, Any], openai: bool = False) -> str | None:
    model = str(body.get("model") or "")
    if fake.knows(model):
        return model
    message = _not_found_message(model)
    http.send_json(404, _openai_error(404, message) if openai else _ollama_error(message))
    return None


def _ollama_calls(answer: _Answer) -> list[dict[str, Any]]:
    return [{"id": call["id"], "function": {"index": index, "name": call["name"], "arguments": call["arguments"]}}
            for index, call in enumerate(answer.calls())]


def api_chat(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    started = time.perf_counter()
    model = _model_or_404(fake, http, body)
    if model is None:
        return
    head = {"model": model, "created_at": _now_iso()}
    if body.get("messages") == [] or "messages" not in body:
        # Ollama's model load (and unload, with keep_alive 0): one object, streamed or not.
        reason = "unload" if body.get("keep_alive") in (0, "0", "0s", "0m") else "load"
        http.send_json(200, {**head, "message": {"role": "assistant", "content": ""},
                             "done_reason": reason, "done": True})
        return
    answer = _answer(fake, "chat", body, http, lambda status, message: _ollama_error(message))
    if answer is None:
        return
    with fake.model_run(http, model, "/api/chat", body) as run:
        _chat_reply(http, body, head, answer, run, started)


def _generated(answer: _Answer) -> str:
    """What the model writes for an answer: thinking, text and tool calls."""
    return answer.thinking + answer.text + (json.dumps(answer.calls()) if answer.tool_calls else "")


def _chat_reply(http: _Handler, body: dict[str, Any], head: dict[str, Any], answer: _Answer,
                run: ModelRun, started: float) -> None:
    stats = _done_stats(started, prompt_tokens(body.get("messages") or []), answer.text, answer.done_reason,
                        run)
    if body.get("stream", True):
        frames = [
            _ndjson({**head, "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False})
            for piece in _split_into_pieces(answer.thinking)
        ] + [
            _ndjson({**head, "message": {"role": "assistant", "content": piece}, "done": False})
            for piece in _split_into_pieces(answer.text)
        ]
        if answer.tool_calls:
            frames.append(_ndjson({**head, "message": {"role": "assistant", "content": "",
                                                       "tool_calls": _ollama_calls(answer)}, "done": False}))
        done = {**head, "message": {"role": "assistant", "content": ""}, "done": True, **stats}
        _send_stream(http, "application/x-ndjson", frames, [_ndjson(done)], answer.fault,
                     *_paced_by(run, _generated(answer)))
    else:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.thinking:
            message["thinking"] = answer.thinking
        if answer.tool_calls:
            message["tool_calls"] = _ollama_calls(answer)
        _send_whole(http, {**head, "message": message, "done": True, **stats}, answer.fault,
                    *_paced_by(run, _generated(answer)))


def api_generate(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    started = time.perf_counter()
    model = _model_or_404(fake, http, body)
    if model is None:
        return
    answer = _answer(fake, "generate", body, http, lambda status, message: _ollama_error(message))
    if answer is None:
        return
    head = {"model": model, "created_at": _now_iso()}
    prompt_count = count_tokens(str(body.get("system") or "")) + count_tokens(str(body.get("prompt") or ""))
    with fake.model_run(http, model, "/api/generate", body) as run:
        stats = _done_stats(started, prompt_count, answer.text, run=run)
        if body.get("stream", True):
            frames = [_ndjson({**head, "response": piece, "done": False})
                      for piece in _split_into_pieces(answer.text)]
            done = {**head, "response": "", "done": True, **stats}
            _send_stream(http, "application/x-ndjson", frames, [_ndjson(done)], answer.fault,
                         *_paced_by(run, answer.text))
        else:
            _send_whole(http, {**head, "response": answer.text, "done": True, **stats}, answer.fault,
                        *_paced_by(run, answer.text))


def _embeddings(
    fake: FakeOllama, http: _Handler, body: dict[str, Any], texts: list[str], openai: bool
) -> list[list[float]] | None:
    """Vectors for `texts`, or None when a scripted fault has already answered."""
    fake.pause(fake.embed_latency)
    item = fake.next_reply("embed", body)
    while isinstance(item, Fault) and item.kind == "delay":
        fake.pause(item.seconds)
        item = item.then
    if isinstance(item, Fault):
        if item.kind == "http_error":
            error = _openai_error(item.status, item.message) if openai else _ollama_error(item.message)
            http.send_json(item.status, error)
        else:
            _send_whole(http, None, item)
        return None
    if item is not None:
        return item
    return [fake.embed_fn(text) for text in texts]


def _as_text_list(value: Any) -> list[str] | None:
    """An embedding request's `input` (a text, a list of them, or none); None for anything
    else, which Ollama refuses with 400 "invalid input type"."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def api_embed(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    model = _model_or_404(fake, http, body)
    if model is None:
        return
    texts = _as_text_list(body.get("input"))
    if texts is None:
        http.send_json(400, _ollama_error("invalid input type"))
        return
    vectors = _embeddings(fake, http, body, texts, openai=False)
    if vectors is None:
        return
    http.send_json(
        200,
        {
            "model": model,
            "embeddings": vectors,
            "total_duration": 0,
            "load_duration": 0,
            "prompt_eval_count": sum(count_tokens(t) for t in texts),
        },
    )


def api_embeddings_legacy(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    """The older one-text endpoint, still used by some clients."""
    if _model_or_404(fake, http, body) is None:
        return
    vectors = _embeddings(fake, http, body, [str(body.get("prompt") or "")], openai=False)
    if vectors is not None:
        http.send_json(200, {"embedding": vectors[0]})


def _model_entry(name: str) -> dict[str, Any]:
    full = _full_name(name)
    family = re.split(r"[:\-.]", full)[0]
    return {
        "name": full,
        "model": full,
        "modified_at": "2025-01-01T00:00:00Z",
        "size": 1_000_000 * (len(full) + 100),
        "digest": hashlib.sha256(full.encode()).hexdigest(),
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": family,
            "families": [family],
            "parameter_size": full.split(":")[1].upper() if full.split(":")[1][:1].isdigit() else "137M",
            "quantization_level": "Q4_K_M",
        },
    }


def api_tags(fake: FakeOllama, http: _Handler, body: Any) -> None:
    http.send_json(200, {"models": [_model_entry(name) for name in fake.models]})


def api_show(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    name = str(body.get("model") or body.get("name") or "")
    if not fake.knows(name):
        http.send_json(404, _ollama_error(f"model '{name}' not found"))
        return
    entry = _model_entry(name)
    family = entry["details"]["family"]
    embeds = "embed" in name
    http.send_json(
        200,
        {
            "modelfile": f"FROM {entry['name']}\n",
            "parameters": "stop \"<end_of_turn>\"",
            "template": "{{ .Prompt }}",
            "details": entry["details"],
            "model_info": {
                "general.architecture": family,
                f"{family}.context_length": 8192,
                f"{family}.embedding_length": fake.embedding_dim,
            },
            "capabilities": ["embedding"] if embeds else ["completion"],
            "modified_at": entry["modified_at"],
        },
    )


def api_version(fake: FakeOllama, http: _Handler, body: Any) -> None:
    http.send_json(200, {"version": "0.0.0-fake"})


def root(fake: FakeOllama, http: _Handler, body: Any) -> None:
    http.send_bytes(200, b"Ollama is running", "text/plain; charset=utf-8")


def root_head(fake: FakeOllama, http: _Handler, body: Any) -> None:
    http.send_response(200)
    http.send_header("Content-Type", "text/plain; charset=utf-8")
    http.send_header("Content-Length", "17")
    http.end_headers()


def _delta(piece: str, finish_reason: str | None, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "delta": {"role": "assistant", "content": piece, **extra}, "finish_reason": finish_reason}


def _openai_calls(answer: _Answer) -> list[dict[str, Any]]:
    return [{"id": call["id"], "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
            for call in answer.calls()]


def _call_deltas(answer: _Answer) -> list[dict[str, Any]]:
    """Tool calls streamed as OpenAI streams them: the name first, then the arguments in pieces."""
    deltas = []
    for index, call in enumerate(_openai_calls(answer)):
        arguments = call["function"]["arguments"]
        middle = len(arguments) // 2
        deltas.append({"index": index, "id": call["id"], "type": "function",
                       "function": {"name": call["function"]["name"], "arguments": ""}})
        deltas += [{"index": index, "function": {"arguments": part}}
                   for part in (arguments[:middle], arguments[middle:]) if part]
    return deltas


def _timings(fake: FakeOllama, prompt_count: int, reply: str) -> dict[str, Any]:
    """llama.cpp's server's `timings` on a reply's last chunk (fake.engine "llama.cpp"):
    the engine's own milliseconds, here from the simulated CPU's speeds (1 ms a token
    without one)."""
    if fake.engine not in ("llama.cpp", "llama.cpp-old"):
        return {}
    prompt_tps, reply_tps = ((fake.cpu.prompt_tokens_per_second, fake.cpu.generate_tokens_per_second)
                             if fake.cpu else (1000.0, 1000.0))
    predicted = count_tokens(reply)
    return {"timings": {"prompt_n": prompt_count, "prompt_ms": prompt_count / prompt_tps * 1000,
                        "predicted_n": predicted, "predicted_ms": predicted / reply_tps * 1000}}


def v1_chat_completions(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    model = _model_or_404(fake, http, body, openai=True)
    if model is None:
        return
    answer = _answer(fake, "chat", body, http, _openai_error)
    if answer is None:
        return
    head = {
        "id": f"chatcmpl-{len(fake.requests)}",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_ollama",
    }
    prompt_count = prompt_tokens(body.get("messages") or [])
    usage = {
        "prompt_tokens": prompt_count,
        "completion_tokens": count_tokens(answer.text),
        "total_tokens": prompt_count + count_tokens(answer.text),
    }
    finish = "tool_calls" if answer.tool_calls else answer.done_reason
    if body.get("stream"):
        chunk = {**head, "object": "chat.completion.chunk"}
        frames = [
            _sse({**chunk, "choices": [_delta("", None, reasoning=piece)]})
            for piece in _split_into_pieces(answer.thinking)
        ] + [
            _sse({**chunk, "choices": [_delta(piece, finish_reason=None)]})
            for piece in _split_into_pieces(answer.text)
        ] + [
            _sse({**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [delta]}, "finish_reason": None}]})
            for delta in _call_deltas(answer)
        ]
        ending = [_sse({**chunk, "choices": [_delta("", finish_reason=finish)],
                        **_timings(fake, prompt_count, answer.text)})]
        if (body.get("stream_options") or {}).get("include_usage"):
            ending.append(_sse({**chunk, "choices": [], "usage": usage}))
        ending.append(b"data: [DONE]\n\n")
        with fake.model_run(http, model, "/v1/chat/completions", body) as run:
            _send_stream(http, "text/event-stream", frames, ending, answer.fault,
                         *_paced_by(run, _generated(answer)))
    else:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": answer.text if answer.text or not answer.tool_calls else None}
        if answer.thinking:
            message["reasoning"] = answer.thinking
        if answer.tool_calls:
            message["tool_calls"] = _openai_calls(answer)
        whole = {
            **head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
            **_timings(fake, prompt_count, answer.text),
        }
        with fake.model_run(http, model, "/v1/chat/completions", body) as run:
            _send_whole(http, whole, answer.fault, *_paced_by(run, _generated(answer)))


def v1_completions(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    model = _model_or_404(fake, http, body, openai=True)
    if model is None:
        return
    answer = _answer(fake, "generate", body, http, _openai_error)
    if answer is None:
        return
    head = {"id": f"cmpl-{len(fake.requests)}", "object": "text_completion",
            "created": int(time.time()), "model": model}
    prompt_count = count_tokens(str(body.get("prompt") or ""))
    usage = {"prompt_tokens": prompt_count, "completion_tokens": count_tokens(answer.text),
             "total_tokens": prompt_count + count_tokens(answer.text)}
    if body.get("stream"):
        frames = [_sse({**head, "choices": [{"index": 0, "text": piece, "finish_reason": None}]})
                  for piece in _split_into_pieces(answer.text)]
        ending = [_sse({**head, "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}),
                  b"data: [DONE]\n\n"]
        with fake.model_run(http, model, "/v1/completions", body) as run:
            _send_stream(http, "text/event-stream", frames, ending, answer.fault,
                         *_paced_by(run, answer.text))
    else:
        whole = {**head, "choices": [{"index": 0, "text": answer.text, "finish_reason": "stop"}],
                 "usage": usage}
        with fake.model_run(http, model, "/v1/completions", body) as run:
            _send_whole(http, whole, answer.fault, *_paced_by(run, answer.text))


def v1_model(fake: FakeOllama, http: _Handler, body: Any, name: str) -> None:
    if not fake.knows(name):
        http.send_json(404, _openai_error(404, f"model '{name}' not found"))
        return
    http.send_json(200, {"id": _full_name(name), "object": "model", "created": 1735689600,
                         "owned_by": "library"})


def api_ps(fake: FakeOllama, http: _Handler, body: Any) -> None:
    loaded = [{**_model_entry(name), "expires_at": "2030-01-01T00:00:00Z", "size_vram": 0}
              for name in fake.models[:1]]
    http.send_json(200, {"models": loaded})


def _progress(http: _Handler, body: dict[str, Any], statuses: list[dict[str, Any]]) -> None:
    """Ollama's model management answers: NDJSON progress, or the last status alone."""
    if body.get("stream", True) is False:
        http.send_json(200, statuses[-1])
        return
    http.start_stream("application/x-ndjson")
    for status in statuses:
        http.write_chunk(_ndjson(status))
    http.end_stream()


def api_pull(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    name = str(body.get("model") or body.get("name") or "")
    if not name or name.startswith("missing"):
        http.send_json(500, _ollama_error("pull model manifest: file does not exist"))
        return
    if not fake.knows(name):
        fake.models.append(name)
    digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    _progress(http, body, [{"status": "pulling manifest"},
                           {"status": f"pulling {digest[7:19]}", "digest": digest, "total": 100, "completed": 100},
                           {"status": "verifying sha256 digest"}, {"status": "writing manifest"},
                           {"status": "success"}])


def api_push(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    _progress(http, body, [{"status": "retrieving manifest"}, {"status": "pushing manifest"},
                           {"status": "success"}])


def api_create(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    name = str(body.get("model") or body.get("name") or "")
    source = body.get("from")
    if source and not fake.knows(str(source)):
        http.send_json(404, _ollama_error(_not_found_message(str(source))))
        return
    fake.models.append(name)
    _progress(http, body, [{"status": "reading model metadata"}, {"status": "writing manifest"},
                           {"status": "success"}])


def api_copy(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    if not fake.knows(str(body.get("source") or "")):
        http.send_json(404, _ollama_error(f"model '{body.get('source')}' not found"))
        return
    fake.models.append(str(body.get("destination")))
    http.send_bytes(200, b"", "text/plain; charset=utf-8")


def api_delete(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    name = str(body.get("model") or body.get("name") or "")
    if not fake.knows(name):
        http.send_json(404, _ollama_error(f"model '{name}' not found"))
        return
    fake.models = [m for m in fake.models if _full_name(m) != _full_name(name)]
    http.send_bytes(200, b"", "text/plain; charset=utf-8")


def api_blob(fake: FakeOllama, http: _Handler, body: Any, name: str) -> None:
    """HEAD: whether the blob exists (only after a POST); POST: store it."""
    if http.command == "POST":
        fake.blobs.add(name)
        http.send_bytes(201, b"", "text/plain; charset=utf-8")
    else:
        http.send_response(200 if name in fake.blobs else 404)
        http.send_header("Content-Length", "0")
        http.end_headers()


def v1_models(fake: FakeOllama, http: _Handler, body: Any) -> None:
    data = [
        {"id": _full_name(name), "object": "model", "created": 1735689600, "owned_by": "library"}
        for name in fake.models
    ]
    http.send_json(200, {"object": "list", "data": data})


def _float32_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def v1_embeddings(fake: FakeOllama, http: _Handler, body: dict[str, Any]) -> None:
    model = _model_or_404(fake, http, body, openai=True)
    if model is None:
        return
    texts = _as_text_list(body.get("input"))
    if texts is None:
        http.send_json(400, _openai_error(400, "invalid input type"))
        return
    vectors = _embeddings(fake, http, body, texts, openai=True)
    if vectors is None:
        return
    encode = _float32_base64 if body.get("encoding_format") == "base64" else (lambda v: v)
    count = sum(count_tokens(t) for t in texts)
    http.send_json(
        200,
        {
            "object": "list",
            "data": [{"object": "embedding", "embedding": encode(v), "index": i} for i, v in enumerate(vectors)],
            "model": model,
            "usage": {"prompt_tokens": count, "total_tokens": count},
        },
    )


Endpoint = Callable[[FakeOllama, _Handler, Any], None]
ROUTES: dict[str, dict[str, Endpoint]] = {
    "/": {"GET": root, "HEAD": root_head},
    "/api/version": {"GET": api_version},
    "/api/tags": {"GET": api_tags},
    "/api/show": {"POST": api_show},
    "/api/ps": {"GET": api_ps},
    "/api/chat": {"POST": api_chat},
    "/api/generate": {"POST": api_generate},
    "/api/embed": {"POST": api_embed},
    "/api/embeddings": {"POST": api_embeddings_legacy},
    "/api/pull": {"POST": api_pull},
    "/api/push": {"POST": api_push},
    "/api/create": {"POST": api_create},
    "/api/copy": {"POST": api_copy},
    "/api/delete": {"DELETE": api_delete},
    "/v1/chat/completions": {"POST": v1_chat_completions},
    "/v1/completions": {"POST": v1_completions},
    "/v1/models": {"GET": v1_models},
    "/v1/embeddings": {"POST": v1_embeddings},
}
# Routes with a name in the path: prefix -> {method: endpoint(fake, http, body, name)}.
NAMED_ROUTES: dict[str, dict[str, Callable[..., None]]] = {
    "/api/blobs/": {"HEAD": api_blob, "POST": api_blob},
    "/v1/models/": {"GET": v1_model},
}
_WRONG_METHOD = object()


def _route(method: str, path: str) -> Any:
    """The endpoint for (method, path), _WRONG_METHOD, or None for no such route."""
    if path in ROUTES:
        return ROUTES[path].get(method, _WRONG_METHOD)
    for prefix, methods in NAMED_ROUTES.items():
        if path.startswith(prefix) and len(path) > len(prefix):
            endpoint = methods.get(method)
            return _WRONG_METHOD if endpoint is None else functools.partial(endpoint, name=path[len(prefix):])
    return None


# ----------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fake_ollama", description="Run the fake Ollama server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every call")
    parser.add_argument("--embed-ms", type=float, default=0.0,
                        help="what an embedding request takes (an embedding model's time)")
    parser.add_argument("--script-file", help="JSON script of replies and faults (see module docstring)")
    parser.add_argument(
        "--models", default=",".join(DEFAULT_MODELS), help="comma-separated model names (default: %(default)s)"
    )
    parser.add_argument("--embedding-dim", type=int, default=DEFAULT_EMBEDDING_DIM)
    parser.add_argument("--prompt-tps", type=float, default=0.0,
                        help="simulate a CPU model: prompt tokens read per second (with --generate-tps)")
    parser.add_argument("--generate-tps", type=float, default=0.0,
                        help="simulate a CPU model: reply tokens written per second")
    args = parser.parse_args(argv)
    cpu = (CpuSpeed(args.prompt_tps, args.generate_tps)
           if args.prompt_tps > 0 and args.generate_tps > 0 else None)

    fake = FakeOllama(
        models=[m.strip() for m in args.models.split(",") if m.strip()],
        embedding_dim=args.embedding_dim,
        latency=args.latency_ms / 1000,
        embed_latency=args.embed_ms / 1000,
        host=args.host,
        port=args.port,
        cpu=cpu,
    )
    if args.script_file:
        fake.load_script(args.script_file)
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
    fake.start()
    print(fake.url, flush=True)
    stop_requested.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
