"""The localmodel bench on a real engine: llama.cpp's own `llama-server`, a tiny
random-weight model with a real tokenizer (tests/bench/engine_model.py), and the same
scripted conversation as tests/bench/localmodel.py.

    python -m tests.bench.localmodel --engine llama.cpp [--quick] [--json] [--no-write]
        [--engine-shape 256x4|qwen2.5-0.5b|qwen2.5-1.5b|qwen2.5-3b|gemma3-4b]
        [--engine-model smollm2]
        [--client capped|plain] [--turns N] [--think S] [--pause TURN:SECONDS] [--keep-logs]
        [--set HILO_KEY=value]

The engine: llama-server built from the llama.cpp source that the `llama-cpp-python`
sdist on PyPI vendors (`pip download`, then cmake, only the `llama-server` target, under
`nice -n 19`), cached in .cache/engine/ (git-ignored) and reused; the first build takes
a while on two cores and prints its progress. One slot (`-np 1`, as Ollama with
OLLAMA_NUM_PARALLEL=1), a 4,096-token context, temperature 0 and a fixed seed, a fresh
engine for every run (its prompt caches empty). `--engine-shape` makes the model wider
and deeper, so that it reads prompts nearer a real model's speed on a CPU: the default
reads thousands of tokens a second, and its time to first token is mostly Hilo's own.
`--engine-shape qwen2.5-0.5b` takes the dimensions of the smallest model people chat
with (random weights still): about 200 new prompt tokens and 40 generated a second on
two cores. `--engine-shape gemma3-4b` is the README's default chat model as Ollama ships
it: Gemma 3's layer with its 1,024-token sliding windows, quantized to Q4_K_M with
llama.cpp's own llama-quantize (built beside the server): about 25-40 new prompt tokens
and 17 generated a second here.

`--engine-model smollm2` serves a real instruct model instead, SmolLM2-135M-Instruct
(tests/bench/packaged_model.py): real replies and real learning, whose engine seconds
(the engine's `timings` per request) are reported per chat turn against the chat's own,
with the longest learning call and the facts stored that the person's words do not
support. The time-to-first-token target is read on the median of the steady turns.

Every request to the engine passes a counting proxy on loopback, which records who sent
it (the bench's client, `hilo serve` or `hilo worker`, by the process owning the
connection), the limits it carried, and what the engine's own counters said of it
(`timings.prompt_n`: prompt tokens evaluated anew; `cache_n`: found in the KV cache);
the engine's /metrics total is read before and after as a cross-check. Runs, for a
client that caps its replies (`max_tokens`, `stop`) and for one that does not:

- the memory-less client, straight to the engine (through the proxy);
- the same client through a real `hilo serve` (`[llm] provider = "openai"`, the local
  embedder), with a real `hilo worker` learning on the same engine, the memory seeded
  with an earlier session, as in tests/bench/localmodel.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import connect_readonly
from tests.bench import soak
from tests.bench.engine_model import REAL_SHAPES, REVISION, Shape, shape_named, write_model
from tests.bench.learning import said_by_person
from tests.bench.localmodel import (
    DEFAULT_PAUSES,
    QUIET_CAP_S,
    QUIET_S,
    Run,
    TurnResult,
    converse,
    learned,
    mean,
    seed_memory,
    steady,
)
from tests.bench.localmodel_script import (
    SEED_FACTS,
    SEED_PROFILE,
    SEED_SESSION,
    SYSTEM_PROMPT,
    TURNS,
    Turn,
)
from tests.bench.packaged_model import PACKAGED, packaged_model
from tests.bench.report import REPO_ROOT, emit, median
from tests.bench.soak import Process, free_port

ENGINE = "llama.cpp"
SDIST = "llama-cpp-python==0.3.36"
CACHE = REPO_ROOT / ".cache" / "engine"
MODEL = "hilo-bench-random"
CONTEXT = 4096
# The engine's own cap on a reply when the request names none; a safety net for the
# random model, whose replies and JSON end on their own long before (engine_model.py).
# A real model runs as a user starts llama-server: no cap (-1), so that what bounds a
# learning call is Hilo's own budget, as on a user's server.
ENGINE_N_PREDICT = 256
UNCAPPED = -1
SEED = 27
# The capping client's limits, as chat front-ends send them.
CLIENT_LIMITS = {"max_tokens": 16, "stop": ["\nuser:"]}
VARIANTS = {"capped": CLIENT_LIMITS, "uncapped": {}}
TARGETS = {"new_prompt_ratio": 1.15, "ttft_ratio": 1.15, "background_per_turn": 0.5,
           "learning_calls_with_client_limits": 0, "first_reply_overhead_s": 1.0,
           "learning_vs_chat": 0.5}
ENGINE_READY_S = 120.0
# `hilo serve` and `hilo worker` load the local embedder while the engine and the other
# process start beside them on two cores: give them longer than the soak bench does.
PROCESS_READY_S = 120.0


def log(message: str) -> None:
    print(f"[engine] {message}", file=sys.stderr, flush=True)


# -- building llama-server -------------------------------------------------------------------


def llama_server() -> Path:
    """The cached llama-server binary; built from the sdist's vendored llama.cpp first."""
    return built_tool("llama-server")


def built_tool(target: str) -> Path:
    """One of llama.cpp's programs (llama-server, llama-quantize), built once and cached."""
    binary = CACHE / "bin" / target
    if not binary.exists():
        started = time.monotonic()
        built = build_target(vendored_llama_cpp(CACHE), CACHE / "build", target)
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, binary)
        log(f"{target} built in {time.monotonic() - started:.0f} s, cached at {binary}")
    return binary


def vendored_llama_cpp(cache: Path) -> Path:
    """llama.cpp's source as the llama-cpp-python sdist vendors it, fetched with pip."""
    download, source = cache / "download", cache / "src"
    if not list(source.glob("llama_cpp_python-*/vendor/llama.cpp")):
        log(f"no cached llama-server: fetching the {SDIST} sdist with pip")
        subprocess.run([sys.executable, "-m", "pip", "download", SDIST, "--no-deps",
                        "--no-binary", ":all:", "-d", str(download)], check=True)
        with tarfile.open(next(download.glob("llama_cpp_python-*.tar.gz"))) as archive:
            archive.extractall(source, filter="data")
    return next(source.glob("llama_cpp_python-*/vendor/llama.cpp"))


def build_target(llama_cpp: Path, build: Path, target: str) -> Path:
    """Only that target, CPU only, static, niced: the machine is shared. An interrupted
    build resumes where it stopped; a second target reuses the first's objects."""
    niced = ["nice", "-n", "19"]
    log("configuring (cmake)")
    subprocess.run([*niced, "cmake", "-S", str(llama_cpp), "-B", str(build),
                    *(["-G", "Ninja"] if shutil.which("ninja") else []),
                    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
                    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
                    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DGGML_NATIVE=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    log(f"building {target} under nice -n 19 (two jobs; up to an hour or more on two "
        "busy cores)")
    started = time.monotonic()
    with subprocess.Popen([*niced, "cmake", "--build", str(build), "--target", target,
                           "-j2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as make:
        assert make.stdout is not None
        tail: list[str] = []
        for line in make.stdout:
            tail = (tail + [line])[-20:]
            if line.startswith("["):  # "[12/206] Building …": one line of progress each
                log(f"{time.monotonic() - started:6.0f} s {line.split(' ', 1)[0]}")
    if make.returncode != 0:
        raise RuntimeError(f"{target} did not build:\n" + "".join(tail))
    return build / "bin" / target


def model_file(shape: Shape) -> Path:
    path = CACHE / f"{MODEL}-{shape.label}-r{REVISION}.gguf"
    if path.exists():
        return path
    log(f"writing the model {path.name}")
    weights = write_model(path.with_suffix(".tmp"), shape)
    if shape.quantization != "F16":
        log(f"quantizing it to {shape.quantization} with llama-quantize")
        quantized = path.with_suffix(".quantized.tmp")
        subprocess.run([str(built_tool("llama-quantize")), str(weights), str(quantized),
                        shape.quantization], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.STDOUT)
        weights.unlink()
        weights = quantized
    weights.rename(path)
    return path


# -- the engine ------------------------------------------------------------------------------


class Engine:
    """llama-server on a free loopback port, a fresh KV cache each start."""

    def __init__(self, binary: Path, model: Path, logs: Path,
                 flags: tuple[str, ...] = (), alias: str = MODEL,
                 n_predict: int = ENGINE_N_PREDICT, threads: int | None = None) -> None:
        self.binary, self.model, self.logs = binary, model, logs
        self.flags = flags  # more of llama-server's own options (--swa-full)
        self.alias = alias  # the model's name in requests
        self.n_predict = n_predict
        # All the cores, as a user's server; on a machine busy with other work, one thread
        # spares the engine's threads from waiting on each other at every step.
        self.threads = threads or os.cpu_count() or 2
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        self.port = free_port()
        argv = [str(self.binary), "-m", str(self.model), "--alias", self.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "-c", str(CONTEXT),
                "-np", "1", "-n", str(self.n_predict), "--temp", "0", "--seed", str(SEED),
                "--threads", str(self.threads), "--metrics", "--slots", "--jinja",
                "--no-webui", *self.flags]
        out = (self.logs / f"engine-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        soak.wait_started(self.process, lambda: soak.answers_health(self.url), ENGINE_READY_S,
                          lambda: f"llama-server did not start; see {out.name}")

    def prompt_tokens_total(self) -> float:
        """The engine's own count of prompt tokens evaluated anew (cached ones excluded)."""
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line.startswith("llamacpp:prompt_tokens_total"):
                return float(line.split()[-1])
        return float("nan")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # llama-server ends at once on SIGTERM
            self.process.wait(timeout=30)


# -- the counting proxy ----------------------------------------------------------------------


@dataclass
class Call:
    """One request to the engine, as the proxy saw it."""

    method: str
    path: str
    arrived: float
    request: dict = field(default_factory=dict)
    caller: str = "other"
    first_byte: float | None = None
    ended: float | None = None
    status: int = 0
    abandoned: bool = False  # the caller hung up before the reply was whole
    text: str = ""
    finish_reason: str | None = None
    timings: dict = field(default_factory=dict)

    @property
    def is_chat(self) -> bool:
        return self.method == "POST" and self.path.endswith("/chat/completions")

    @property
    def wants_json(self) -> bool:
        return "response_format" in self.request

    @property
    def new_tokens(self) -> int:
        return int(self.timings.get("prompt_n") or 0)

    @property
    def cached_tokens(self) -> int:
        return int(self.timings.get("cache_n") or 0)

    @property
    def model_s(self) -> float:
        """The engine's own seconds; for a call cut before the engine reported them (its
        caller hung up: a deadline, a chat it gave way to), the time it was connected,
        which on a one-slot engine it held alone."""
        if not self.timings and self.abandoned and self.ended is not None:
            return self.ended - self.arrived
        return (float(self.timings.get("prompt_ms") or 0)
                + float(self.timings.get("predicted_ms") or 0)) / 1000

    @property
    def carries_client_limits(self) -> bool:
        return any(key in self.request and self.request[key] == value
                   for key, value in CLIENT_LIMITS.items())

    @property
    def real_output(self) -> bool:
        """A whole JSON object the engine finished on its own (not cut by a limit)."""
        try:
            return self.finish_reason == "stop" and isinstance(json.loads(self.text), dict)
        except ValueError:
            return False

    def read_response(self, body: bytes) -> None:
        """The reply's text, finish reason and timings, streamed (SSE) or not."""
        text = body.decode("utf-8", "replace")
        frames = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        try:
            documents = ([json.loads(f) for f in frames if f != "[DONE]"] if frames
                         else [json.loads(text)])
        except ValueError:
            return
        pieces = []
        for document in documents:
            if not isinstance(document, dict):
                continue
            self.timings = document.get("timings") or self.timings
            for choice in document.get("choices") or []:
                part = choice.get("delta") or choice.get("message") or {}
                pieces.append(part.get("content") or "")
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.text = "".join(pieces)


class _QuietServer(ThreadingHTTPServer):
    """A kept-alive connection reset by a process the run stopped is no error to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class CountingProxy:
    """Relays loopback HTTP to the engine, recording every request as a `Call`."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.lock = threading.Condition()
        self.relaying = 0  # requests whose Call is not recorded yet
        self.upstream = ""
        self.callers: dict[int, str] = {}  # pid → "client", "serve", "worker"
        self.peers: dict[int, str] = {}  # a connection's port → its caller
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Each streamed chunk goes out at once, as from the engine itself (its
                # server sets TCP_NODELAY): with Nagle's algorithm a chunk written right
                # after the headers waits for their ACK, up to the 40 ms of a delayed ACK.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self) -> None:
                proxy.relay(self, b"")

            def do_POST(self) -> None:
                proxy.relay(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.client = httpx.Client(timeout=600)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def relay(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        with self.lock:
            self.relaying += 1
        try:
            self._relay(handler, body)
        finally:
            with self.lock:
                self.relaying -= 1
                self.lock.notify_all()

    def _relay(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        call = Call(handler.command, handler.path, time.monotonic())
        # Named while the caller still holds the connection (a worker that gives way, or
        # one done with its reply, closes it), beside the relay: only the reply's end
        # waits for it, on a connection not named before.
        naming = threading.Thread(target=self._name, args=(call, handler.client_address[1]))
        naming.start()
        try:
            call.request = json.loads(body) if body else {}
        except ValueError:
            pass
        received: list[bytes] = []
        headers = {"Content-Type": handler.headers.get("Content-Type") or "application/json"}
        with self.client.stream(handler.command, self.upstream + handler.path, content=body,
                                headers=headers) as response:
            call.status = response.status_code
            try:
                handler.send_response(response.status_code)
                handler.send_header("Content-Type", response.headers.get("content-type", ""))
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                for chunk in response.iter_raw():
                    call.first_byte = call.first_byte or time.monotonic()
                    received.append(chunk)
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    handler.wfile.flush()
                naming.join()  # the reply's end lets the caller hang up
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                # The caller hung up (a worker giving way to the person): the engine's
                # request ends with the connection to it, and the call still counts.
                call.abandoned = True
                handler.close_connection = True
        call.ended = time.monotonic()
        call.read_response(b"".join(received))
        naming.join()
        with self.lock:
            self.calls.append(call)

    def _name(self, call: Call, peer_port: int) -> None:
        call.caller = self.caller_of(peer_port)

    def caller_of(self, peer_port: int) -> str:
        """Who holds the connection's other end: the process, or its nearest named parent
        (remembered per connection once named: clients keep theirs alive)."""
        caller = self.peers.get(peer_port) or self._owner(peer_port)
        if caller != "other":
            self.peers[peer_port] = caller
        return caller

    def _owner(self, peer_port: int) -> str:
        port = self.server.server_address[1]
        for connection in psutil.net_connections(kind="tcp4"):
            if (connection.laddr and connection.laddr.port == peer_port and connection.raddr
                    and connection.raddr.port == port and connection.pid):
                process: psutil.Process | None = psutil.Process(connection.pid)
                while process is not None:
                    if process.pid in self.callers:
                        return self.callers[process.pid]
                    process = process.parent()
        return "other"

    def reset(self, upstream: str) -> None:
        with self.lock:
            self.calls = []
        self.peers = {}
        self.upstream = upstream

    def snapshot(self) -> list[Call]:
        """The calls so far, once those whose reply has reached the caller are recorded
        (naming the caller takes a moment after the reply's last byte)."""
        with self.lock:
            self.lock.wait_for(lambda: self.relaying == 0, timeout=10)
            return list(self.calls)

    def stop(self) -> None:
        self.server.shutdown()
        self.client.close()


# -- the client ------------------------------------------------------------------------------


def send_turn(client: httpx.Client, url: str, history: list[dict],
              limits: dict, model: str = MODEL) -> tuple[float, float, float, str]:
    """Stream one reply from /v1/chat/completions: (sent, time to first token, ended, text)."""
    body = {"model": model, "stream": True, "temperature": 0, "seed": SEED, **limits,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *history]}
    sent = time.monotonic()
    stamped: list[tuple[float, str]] = []  # each piece of the reply, when it came
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            data = line[5:].strip() if line.startswith("data:") else ""
            if data and data != "[DONE]":
                stamped += [(time.monotonic(), (c.get("delta") or {}).get("content") or "")
                            for c in json.loads(data).get("choices") or []]
    ended = time.monotonic()
    first = next((at for at, piece in stamped if piece), ended)
    return sent, first - sent, ended, "".join(piece for _, piece in stamped)


def conversation(url: str, turns: list[Turn], limits: dict, think: float,
                 pauses: dict[int, float], model: str = MODEL) -> list[TurnResult]:
    """The scripted conversation, each reply streamed from /v1/chat/completions."""
    run = Run("engine")
    converse(url, turns, think, run, pauses,
             send=lambda client, url, history: send_turn(client, url, history, limits, model))
    return run.turns


def wait_quiet(proxy: CountingProxy, quiet: float, cap: float) -> float:
    """Wait until the engine has served nothing for `quiet` seconds; the time waited."""
    started = time.monotonic()
    while time.monotonic() - started < cap:
        calls = proxy.snapshot()
        last = max((c.ended or time.monotonic() for c in calls), default=started)
        if time.monotonic() - max(last, started) >= quiet:
            break
        time.sleep(0.2)
    return time.monotonic() - started


# How long the bench waits, after the last turn, for learning to settle: every event
# learned, or learning holding to its share with the engine quiet (`[learn]
# engine_share`: nothing more runs until the chat gives credit). Long, so that what
# learning still owes at the end is what it chose to owe, not what the bench cut off.
SETTLE_CAP_S = 1800.0


def owed(config: Config) -> dict[str, Any]:
    """What learning still owes at this moment, and why: "waiting for the share" when
    learning holds to its share, else "not reached"."""
    from app.learn.engine_time import share_hold

    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        events, turns = con.execute(
            "SELECT count(*), coalesce(sum(role = 'user'), 0) FROM events "
            "WHERE distilled_at IS NULL").fetchone()
        uncompacted = con.execute("SELECT count(*) FROM events WHERE compacted = 0").fetchone()[0]
        hold = share_hold(con, config.learn.engine_share)
    finally:
        con.close()
    chunks_due = max(0, (uncompacted - config.memory.compaction_threshold)
                     // config.memory.chunk_size + 1) if (
        uncompacted >= config.memory.compaction_threshold) else 0
    why = None if not events and not chunks_due else (
        "waiting for the share" if hold is not None else "not reached")
    return {"events_unlearned": events, "user_turns_unlearned": turns,
            "chunks_uncarded": chunks_due, "why": why}


def wait_learned(config: Config, proxy: CountingProxy) -> float:
    """Wait until learning has settled (SETTLE_CAP_S): every event learned and no chunk
    due for its card, or learning holding to its share; then until the engine has been
    quiet QUIET_S. The time waited."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_CAP_S:
        now = owed(config)
        if now["why"] is None:
            break
        if now["why"] == "waiting for the share":
            quiet_after = wait_quiet(proxy, QUIET_S, QUIET_S * 3)
            if quiet_after < QUIET_S * 3 and owed(config)["why"] == "waiting for the share":
                break  # nothing more runs until the chat gives credit
        time.sleep(1.0)
    return time.monotonic() - started + wait_quiet(proxy, QUIET_S, QUIET_CAP_S)


# -- the runs --------------------------------------------------------------------------------


@dataclass
class EngineRun:
    name: str
    variant: str
    turns: list[TurnResult] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    metrics_prompt_tokens: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    turn_chats: list[Call | None] = field(default_factory=list)

    @property
    def chats(self) -> list[Call]:
        return [c for c in self.calls if c.is_chat and c.caller in ("client", "serve")
                and not c.wants_json]

    @property
    def background(self) -> list[Call]:
        """The engine's generations nobody asked for: the worker's, and any JSON call."""
        return [c for c in self.calls if c.is_chat and c not in self.chats]

    def attribute(self) -> None:
        """Each turn's chat request (prompt tokens evaluated anew, by the engine's count)
        and the background generations that arrived before the next turn."""
        self.turn_chats = []
        chats, background = self.chats, self.background
        for i, turn in enumerate(self.turns):
            chat = next((c for c in chats if c.arrived >= turn.sent_at), None)
            self.turn_chats.append(chat)
            turn.new_tokens = chat.new_tokens if chat else 0
            if chat:
                turn.reached_engine_s = chat.arrived - turn.sent_at
                turn.engine_prompt_s = float(chat.timings.get("prompt_ms") or 0) / 1000
                turn.engine_first_byte_s = (chat.first_byte or chat.arrived) - turn.sent_at
            end = self.turns[i + 1].sent_at if i + 1 < len(self.turns) else float("inf")
            started_here = [b for b in background if turn.sent_at <= b.arrived < end]
            turn.background_calls = len(started_here)
            turn.background_new_tokens = sum(b.new_tokens for b in started_here)


def direct_run(engine: Engine, proxy: CountingProxy, variant: str, turns: list[Turn],
               think: float, pauses: dict[int, float]) -> EngineRun:
    engine.start()
    try:
        proxy.reset(engine.url)
        proxy.callers = {os.getpid(): "client"}
        before = engine.prompt_tokens_total()
        run = EngineRun("direct", variant)
        run.turns = conversation(proxy.url, turns, VARIANTS[variant], think, pauses,
                                 engine.alias)
        run.metrics_prompt_tokens = engine.prompt_tokens_total() - before
        run.calls = proxy.snapshot()
    finally:
        engine.stop()
    run.attribute()
    return run


def engine_config(root: Path, proxy: CountingProxy,
                  model: str = MODEL) -> tuple[Config, dict[str, str]]:
    """Hilo's config on the engine, and the settings serve and worker get beside it."""
    config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / "data").replace(
        llm={"url": proxy.url, "provider": "openai", "chat_model": model,
             "distill_model": model, "num_ctx": CONTEXT, "timeout_seconds": 600.0},
        embedder={"kind": "local"}, logging={"level": "info", "format": "json"})
    settings = {"HILO_LLM_PROVIDER": "openai", "HILO_LLM_CHAT_MODEL": model,
                "HILO_LLM_DISTILL_MODEL": model, "HILO_LLM_NUM_CTX": str(CONTEXT),
                "HILO_EMBEDDER_KIND": "local"}
    return config, settings


def hilo_run(engine: Engine, proxy: CountingProxy, variant: str, root: Path,
             turns: list[Turn], think: float, pauses: dict[int, float],
             extra_settings: dict[str, str]) -> EngineRun:
    config, settings = engine_config(root / variant, proxy, engine.alias)
    settings.update(extra_settings)
    seed_memory(config)
    logs = root / variant / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    engine.start()
    server = Process(config, "serve", logs, free_port(), settings)
    worker = Process(config, "worker", logs, 0, settings)
    run = EngineRun("hilo", variant)
    try:
        proxy.reset(engine.url)
        worker.start()
        started = time.monotonic()
        server.start()
        assert server.process is not None and worker.process is not None
        proxy.callers = {os.getpid(): "client", server.process.pid: "serve",
                         worker.process.pid: "worker"}
        ready = time.monotonic()
        run.extra["serve_ready_s"] = round(ready - started, 2)
        conversation_began = time.monotonic()
        before = engine.prompt_tokens_total()
        run.turns = conversation(server.url, turns, VARIANTS[variant], think, pauses,
                                 engine.alias)
        run.extra["first_reply_after_start_s"] = round(run.turns[0].ended_at - started, 2)
        run.extra["first_reply_after_ready_s"] = round(run.turns[0].ended_at - ready, 2)
        run.extra["quiet_after_s"] = round(wait_learned(config, proxy), 1)
        run.metrics_prompt_tokens = engine.prompt_tokens_total() - before
        run.calls = [c for c in proxy.snapshot() if c.arrived >= conversation_began]
        run.extra["learned"] = learned(config)
        run.extra["owed"] = owed(config)
        run.extra["hilo_ledger"] = engine_spend_of(config)
        run.extra["unsupported_facts"] = unsupported_facts(config, turns)
        run.extra["background"] = [  # every learning call, seconds after the first turn
            {"at_s": round(c.arrived - conversation_began, 1), "caller": c.caller,
             "new_tokens": c.new_tokens, "cached_tokens": c.cached_tokens,
             "finish_reason": c.finish_reason, "abandoned": c.abandoned,
             "limits": {k: c.request[k] for k in ("max_tokens", "stop") if k in c.request}}
            for c in run.background]
    finally:
        server.stop()
        worker.stop()
        engine.stop()
    run.attribute()
    first = run.chats[0] if run.chats else None
    run.extra["first_reply_model_s"] = round(first.model_s, 2) if first else None
    return run


def engine_spend_of(config: Config) -> dict[str, Any]:
    """Hilo's own ledger of the run (app/learn/engine_time.py): learning's engine seconds
    against the chat's, as `hilo queue status` shows them."""
    from app.learn.engine_time import engine_spend

    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        return engine_spend(con).to_dict()
    finally:
        con.close()


def unsupported_facts(config: Config, turns: list[Turn]) -> list[str]:
    """Active facts and profile entries, besides the seeded ones, whose value the person's
    words in this conversation and the seeded session do not support
    (tests/bench/learning.py's said_by_person)."""
    said = " ".join([t.user for t in turns] + [text for role, text in SEED_SESSION
                                               if role == "user"])
    seeded = {(key, value) for _, key, value in SEED_FACTS} | set(SEED_PROFILE.items())
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        stored = list(con.execute(
            "SELECT key, value FROM facts WHERE superseded_at IS NULL AND deleted_at IS NULL "
            "UNION ALL SELECT key, value FROM profile WHERE deleted_at IS NULL"))
    finally:
        con.close()
    return [f"{key}: {value}" for key, value in stored
            if (key, value) not in seeded and not said_by_person(value, said)]


# -- the report ------------------------------------------------------------------------------


def summary(run: EngineRun) -> dict[str, Any]:
    turns = steady(run)
    background = run.background
    speeds = [float(c.timings["prompt_per_second"]) for c in run.chats
              if c.timings.get("prompt_per_second") and c.new_tokens >= 50]
    return {
        "turns": len(run.turns),
        "steady_turns": f"{turns[0].turn}-{turns[-1].turn}" if turns else "",
        "new_tokens_mean": round(mean([t.new_tokens for t in turns]), 1),
        "cached_tokens_mean": round(mean([c.cached_tokens for c in
                                          run.turn_chats[len(run.turns) - len(turns):] if c]), 1),
        "ttft_mean_s": round(mean([t.ttft_s for t in turns]), 3),
        "ttft_max_s": round(max(t.ttft_s for t in turns), 3) if turns else None,
        "ttft_median_s": round(median([t.ttft_s for t in turns]), 3),
        "reached_engine_median_s": round(median([t.reached_engine_s for t in turns]), 3),
        "engine_prompt_median_s": round(median([t.engine_prompt_s for t in turns]), 3),
        "after_engine_median_s": round(median([t.ttft_s - t.engine_first_byte_s
                                               for t in turns]), 3),
        "engine_prompt_tokens_per_s": round(mean(speeds), 1) if speeds else None,
        "engine_new_prompt_tokens_total": run.metrics_prompt_tokens,
        "proxy_new_prompt_tokens_total": sum(c.new_tokens for c in run.calls if c.is_chat),
        "cached_tokens_by_turn": [c.cached_tokens if c else None for c in run.turn_chats],
        "background_calls": len(background),
        "background_per_turn": round(len(background) / max(1, len(run.turns)), 3),
        "background_real_output": sum(1 for b in background if b.real_output),
        "background_cut_by_length": sum(1 for b in background if b.finish_reason == "length"),
        "background_failed": sum(1 for b in background if b.status != 200),
        "background_abandoned": sum(1 for b in background if b.abandoned),
        # Stopped before its end because the worker gave way to a chat: no output to judge.
        "background_given_way": sum(1 for b in background
                                    if b.abandoned and not b.real_output),
        "background_with_client_limits": sum(1 for b in background
                                             if b.carries_client_limits),
        "background_new_tokens_per_turn": round(
            sum(b.new_tokens for b in background) / max(1, len(run.turns)), 1),
        "background_during_conversation": sum(1 for b in background if run.turns
                                               and b.arrived < run.turns[-1].ended_at),
        **engine_seconds(run),
        **run.extra,
    }


def engine_seconds(run: EngineRun) -> dict[str, Any]:
    """The engine's own time (its `timings`: prompt read and generation) spent learning,
    per chat turn and against the chat's own, and the longest learning call."""
    learning = sum(c.model_s for c in run.background)
    chat = sum(c.model_s for c in run.chats)
    turns = max(1, len(run.turns))
    longest = max(run.background, key=lambda c: (c.ended or c.arrived) - c.arrived, default=None)
    return {
        "learning_engine_s": round(learning, 2), "chat_engine_s": round(chat, 2),
        "learning_engine_per_turn_s": round(learning / turns, 2),
        "chat_engine_per_turn_s": round(chat / turns, 2),
        "learning_vs_chat": round(learning / chat, 2) if chat else None,
        "longest_learning_call_s": (round((longest.ended or longest.arrived) - longest.arrived, 2)
                                    if longest else None),
        "longest_learning_call_engine_s": round(longest.model_s, 2) if longest else None,
        "longest_learning_call_tokens": (int(longest.timings.get("predicted_n") or 0)
                                         if longest else None),
    }


def verdict(direct: dict, hilo: dict) -> dict[str, Any]:
    new_ratio = hilo["new_tokens_mean"] / max(1e-9, direct["new_tokens_mean"])
    ttft_ratio = hilo["ttft_mean_s"] / max(1e-9, direct["ttft_mean_s"])
    # The reading of the time-to-first-token target: the median of the steady turns.
    ttft_median_ratio = hilo["ttft_median_s"] / max(1e-9, direct["ttft_median_s"])
    # Every generation the engine ran to its end gave a whole JSON object.
    all_real = (hilo["background_real_output"] + hilo["background_given_way"]
                == hilo["background_calls"])
    overhead = None
    if hilo.get("first_reply_model_s") is not None:
        overhead = round(hilo["first_reply_after_start_s"] - hilo["first_reply_model_s"], 2)
    return {
        "new_prompt_ratio": round(new_ratio, 2),
        "ttft_ratio": round(ttft_ratio, 2),
        "ttft_median_ratio": round(ttft_median_ratio, 2),
        "first_reply_overhead_s": overhead,
        "met": {
            "new_prompt_ratio": new_ratio <= TARGETS["new_prompt_ratio"],
            "ttft_ratio": ttft_median_ratio <= TARGETS["ttft_ratio"],
            "learning_vs_chat": (hilo["learning_vs_chat"] is not None
                                 and hilo["learning_vs_chat"] <= TARGETS["learning_vs_chat"]),
            "background_per_turn": (hilo["background_per_turn"] <= TARGETS["background_per_turn"]
                                    and hilo["background_calls"] > 0
                                    and all_real),
            "learning_calls_with_client_limits": (hilo["background_with_client_limits"]
                                                  <= TARGETS["learning_calls_with_client_limits"]),
            "first_reply_overhead_s": (overhead is not None
                                       and overhead <= TARGETS["first_reply_overhead_s"]),
        },
    }


def ledger_words(ledger: dict | None) -> str:
    if not ledger:
        return "–"
    return (f"learning {ledger['learning_engine_s']} s in {ledger['learning_calls']} calls "
            f"against the chat's {ledger['chat_engine_s']} s ({ledger['ratio']}×), "
            f"{ledger['over_budget']} past their budget")


def owed_words(owed: dict | None) -> str:
    """What learning still owed when the bench stopped, in words."""
    if not owed or owed["why"] is None:
        return "nothing"
    return (f"{owed['events_unlearned']} events unlearned ({owed['user_turns_unlearned']} of "
            f"the person's turns), {owed['chunks_uncarded']} chunks without their card — "
            f"{owed['why']}")


ARCH_NAMES = {"llama": "LLaMA", "gemma3": "Gemma 3"}


def shape_words(spec: str, shape: dict) -> str:
    words = (f"{shape['embedding']} wide, {shape['layers']} layers, {shape['heads']} heads, "
             f"{shape['kv_heads']} for keys and values, feed-forward {shape['feed_forward']}")
    if shape.get("head_dim"):
        words += f", heads of {shape['head_dim']}"
    if shape.get("sliding_window"):
        words += (f", a {shape['sliding_window']}-token sliding window in five layers of "
                  "six")
    if shape.get("quantization", "F16") != "F16":
        words += f", quantized to {shape['quantization']}"
    return f"{spec}'s dimensions: {words}" if spec in REAL_SHAPES else words


def model_words(results: dict) -> str:
    """What the engine served: a packaged real model, or the random-weight one."""
    if results.get("engine_model"):
        return f"the real model {results['engine_model']}"
    shape = results["model"]
    return (f"a random-weight {ARCH_NAMES[shape.get('arch', 'llama')]} model "
            f"({shape_words(results['shape'], shape)}) with "
            "all-MiniLM-L6-v2's WordPiece tokenizer (junk text, real tokens and KV cache)")


def markdown(results: dict) -> str:
    lines = [
        f"The *localmodel* conversation ({results['turns']} turns, {results['think_s']} s "
        "between a reply and the next message"
        + "".join(f", {s:g} s after turn {t}" for t, s in results["pauses"].items())
        + f") on a real engine: llama.cpp's `llama-server` ({SDIST}'s vendored source, "
        f"built here), one slot, {results.get('engine_threads') or 'all'} threads, "
        f"{CONTEXT}-token context, temperature 0, seed {SEED}; "
        f"{model_words(results)}. Prompt tokens evaluated anew are the engine's own "
        "`timings.prompt_n` per request, cross-checked with /metrics. Through Hilo: a real "
        "`hilo serve` (`[llm] provider = \"openai\"`, local embedder) and `hilo worker` "
        "on the same engine, the memory seeded with an earlier session. The capped client "
        f"sends `max_tokens` {CLIENT_LIMITS['max_tokens']} and `stop` "
        f"{json.dumps(CLIENT_LIMITS['stop'])}; the uncapped one neither "
        + (f"(the engine's default cap, {results['engine_n_predict']}, is never reached)."
           if results.get("engine_n_predict", ENGINE_N_PREDICT) > 0 else
           "(the engine caps nothing, as llama-server's default: a learning call is bounded "
           "by Hilo's own budget alone)."),
        "",
    ]
    ran = [variant for variant in VARIANTS if variant in results]
    for variant in ran:
        direct, hilo = results[variant]["direct"], results[variant]["hilo"]
        judged = results[variant]["verdict"]
        lines += [
            f"**{variant} client**, steady state (turns {hilo['steady_turns']}), per turn:",
            "",
            "| | memory-less client | through Hilo | ratio | target |",
            "|---|---:|---:|---:|---|",
            f"| prompt tokens evaluated anew (mean) | {direct['new_tokens_mean']} | "
            f"{hilo['new_tokens_mean']} | {judged['new_prompt_ratio']}× | ≤ 1.15× |",
            f"| prompt tokens found in the KV cache (mean) | {direct['cached_tokens_mean']} | "
            f"{hilo['cached_tokens_mean']} | | |",
            f"| time to first token, median | {direct['ttft_median_s']} s | "
            f"{hilo['ttft_median_s']} s | {judged['ttft_median_ratio']}× | ≤ 1.15× |",
            f"| time to first token, mean (max) | {direct['ttft_mean_s']} s "
            f"({direct['ttft_max_s']}) | {hilo['ttft_mean_s']} s ({hilo['ttft_max_s']}) | "
            f"{judged['ttft_ratio']}× | |",
            f"| of which: until the request reached the engine, median | "
            f"{direct['reached_engine_median_s']} s | {hilo['reached_engine_median_s']} s | | |",
            f"| of which: the engine reading the new prompt tokens, median | "
            f"{direct['engine_prompt_median_s']} s | {hilo['engine_prompt_median_s']} s | | |",
            f"| of which: from the engine's first byte to the client's first token, median | "
            f"{direct['after_engine_median_s']} s | {hilo['after_engine_median_s']} s | | |",
            f"| engine prompt speed, tokens/s (prompts of 50 tokens anew or more) | "
            f"{direct['engine_prompt_tokens_per_s'] or '–'} | "
            f"{hilo['engine_prompt_tokens_per_s'] or '–'} | | |",
            f"| new prompt tokens, whole run: /metrics (proxy) | "
            f"{direct['engine_new_prompt_tokens_total']:g} "
            f"({direct['proxy_new_prompt_tokens_total']}) | "
            f"{hilo['engine_new_prompt_tokens_total']:g} "
            f"({hilo['proxy_new_prompt_tokens_total']}) | | |",
            "",
            f"Background generations (the worker's, the conversation and what it learned "
            f"afterwards): {hilo['background_calls']} for {hilo['turns']} user turns = "
            f"**{hilo['background_per_turn']} per turn** (target ≤ 0.5 with real output), "
            f"{hilo['background_during_conversation']} during the conversation; "
            f"{hilo['background_real_output']} ended with a whole JSON object, "
            f"{hilo['background_cut_by_length']} were cut by a length limit, "
            f"{hilo['background_failed']} failed, {hilo['background_abandoned']} abandoned by "
            f"the worker ({hilo['background_given_way']} of them before their end, giving way "
            "to a chat); "
            f"{hilo['background_new_tokens_per_turn']} prompt tokens evaluated anew per user "
            f"turn. Learning calls carrying the client's limits: "
            f"**{hilo['background_with_client_limits']}** (target 0). "
            f"First reply after `hilo serve` started: {hilo['first_reply_after_start_s']} s, "
            f"of which the model's own {hilo['first_reply_model_s']} s: "
            f"**{judged['first_reply_overhead_s']} s** more (target ≤ 1 s; /health answered "
            f"after {hilo['serve_ready_s']} s). Learned by the end: {hilo['learned']}; "
            f"still owed: {owed_words(hilo.get('owed'))}.",
            "",
            f"Engine time (its own `timings`: prompt read and generation): learning "
            f"**{hilo['learning_engine_per_turn_s']} s per chat turn** against the chat's own "
            f"{hilo['chat_engine_per_turn_s']} s (**{hilo['learning_vs_chat']}×**; "
            f"{hilo['learning_engine_s']} s and {hilo['chat_engine_s']} s in all); the longest "
            f"learning call took {hilo['longest_learning_call_s']} s "
            f"({hilo['longest_learning_call_engine_s']} s of the engine's, "
            f"{hilo['longest_learning_call_tokens']} tokens generated); Hilo's own ledger "
            f"(`hilo queue status`): {ledger_words(hilo.get('hilo_ledger'))}. Facts and profile "
            f"entries stored that the person's words do not support: "
            f"**{len(hilo['unsupported_facts'])}**"
            + (": " + "; ".join(f"`{f}`" for f in hilo["unsupported_facts"][:10])
               if hilo["unsupported_facts"] else "") + ".",
            "",
            "Targets: " + "; ".join(f"{name} {'met' if ok else 'MISSED'}"
                                    for name, ok in judged["met"].items()) + ".",
            "",
        ]
    lines += ["Per turn, new prompt tokens through Hilo (memory-less client in brackets), "
              f"{' and '.join(ran)} client, and the background generations that started "
              "before the next turn:", "",
              "| turn | " + " | ".join(f"{v} | bg | TTFT s" for v in ran) + " |",
              "|---:|" + "---:|---:|---:|" * len(ran)]
    rows = zip(*(zip(results[v]["hilo_turns"], results[v]["direct_turns"], strict=False) for v in ran), strict=False)
    for pairs in rows:
        cells = []
        for hilo, direct in pairs:
            cells += [f"{hilo['new_tokens']} ({direct['new_tokens']})",
                      str(hilo["background_calls"]),
                      f"{hilo['ttft_s']:.3f} ({direct['ttft_s']:.3f})"]
        lines.append(f"| {pairs[0][0]['turn']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(args: Any) -> None:
    """`python -m tests.bench.localmodel --engine llama.cpp`, its arguments parsed there."""
    count = args.turns or (12 if args.quick else len(TURNS))
    think = args.think if args.think is not None else (1.0 if args.quick else 3.0)
    turns = TURNS[:count]
    pause_specs = args.pause if args.pause is not None else ([] if args.quick else DEFAULT_PAUSES)
    pauses = {int(t): float(s) for t, s in (spec.split(":") for spec in pause_specs)}
    settings = dict(item.split("=", 1) for item in args.set)
    soak.READY_TIMEOUT = max(soak.READY_TIMEOUT, PROCESS_READY_S)
    shape = shape_named(args.engine_shape)
    packaged = PACKAGED[args.engine_model] if args.engine_model else None
    # A larger shape generates slowly: an uncapped client's replies take minutes a turn.
    variants = {"capped": ["capped"], "plain": ["uncapped"]}.get(args.client, list(VARIANTS))
    binary = llama_server()
    model = packaged_model(packaged) if packaged else model_file(shape)
    root = Path(tempfile.mkdtemp(prefix="hilo-bench-engine-"))
    engine = Engine(binary, model, root, alias=packaged.name if packaged else MODEL,
                    n_predict=UNCAPPED if packaged else ENGINE_N_PREDICT,
                    threads=args.engine_threads)
    proxy = CountingProxy()
    results: dict[str, Any] = {"engine": ENGINE, "shape": args.engine_shape,
                               "model": asdict(shape), "turns": count,
                               "think_s": think, "pauses": pauses,
                               "client_limits": CLIENT_LIMITS,
                               "settings": settings,
                               "engine_model": packaged.described if packaged else None,
                               "engine_n_predict": engine.n_predict,
                               "engine_threads": engine.threads}
    try:
        for variant in variants:
            log(f"{variant} client, directly to the engine")
            direct = direct_run(engine, proxy, variant, turns, think, pauses)
            log(f"{variant} client, through hilo serve and hilo worker")
            hilo = hilo_run(engine, proxy, variant, root, turns, think, pauses, settings)
            results[variant] = {"direct": summary(direct), "hilo": summary(hilo),
                                "direct_turns": [asdict(t) for t in direct.turns],
                                "hilo_turns": [asdict(t) for t in hilo.turns]}
            results[variant]["verdict"] = verdict(results[variant]["direct"],
                                                  results[variant]["hilo"])
    finally:
        proxy.stop()
        engine.stop()
    if args.keep_logs:
        results["data_dir"] = str(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    # A real model, or a real model's shape, gets its own section beside the default's.
    section = "localmodel-engine" + (f"-{packaged.name}" if packaged
                                     else f"-{args.engine_shape}"
                                     if args.engine_shape in REAL_SHAPES else "")
    emit(args, section, results, markdown(results))
