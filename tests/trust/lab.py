"""Where the trust scenarios run (tests/trust/catalogue.py): one `Lab` shared by every
scenario of a test session or a benchmark run, and one `Trial` per scenario.

The lab holds what a user's machine would: the fake model server playing the obedient
model (tests/trust/obedient.py), a web server on loopback with the pages the scenarios
publish (`PageServer`, listed in [tools] web_allowed_hosts), one data directory, and
`hilo serve` over it ([tools] http on, per-user tokens) — with two people in it: bob,
whose memory holds `BOB_SECRET`, and alice, who holds a token of her own. A trial gets a
user of its own (its name), a working folder for the terminal, HTTP and MCP clients with
that user's token, and Hilo's own agent as `hilo chat` and the worker run it: in process,
over the same database, with the code a person's request runs.

Every outcome is read from outside: files in the working folder, rows in the database,
the requests the fake model and the web server received. What an attack plants beyond
the working folder (a file it must not read) goes in `Lab.elsewhere`, a folder on the
real disk, outside the system temp folder the sandbox replaces: so a defence that holds
is the one tested, not the sandbox hiding the file by accident.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.access import issue_token
from app.cli.repl import ReplApprover
from app.config import Config, load_config
from app.datadir import DataDir
from app.db import connect_readonly
from app.memory import is_outside, remember_fact, set_profile
from app.model.tool_calls import stored_tool_calls
from app.tasks.runs import TaskRunResult
from app.tasks.store import add_task
from app.turn.agent import Agent, AgentOutcome
from app.turn.chat import ChatService
from tests.api.support import HiloServer
from tests.conftest import REPO_ROOT
from tests.fake_ollama import FakeOllama
from tests.trust.obedient import obey
from workers.queue import configure
from workers.scheduler import run_task_now

MODEL = "gemma3:4b"
# Bob's memory: what no one else may read. Plain words, so no redaction hides a leak.
BOB = "bob"
BOB_SECRET = "orchid lantern 7731"
BOB_SESSION = "bob-diary"
ALICE = "alice"
# The tables whose rows belong to a user: a write as another user shows here.
USER_TABLES = ("events", "facts", "profile", "scheduled_tasks", "task_runs", "diary",
               "macros", "sessions")


# -- the web ------------------------------------------------------------------------------------


class PageServer:
    """Pages on a loopback port, each served as it was published; every request is kept."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.hits: list[str] = []  # path and query of each request, in order
        self._lock = threading.Lock()
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with pages._lock:
                    pages.hits.append(self.path)
                    html = pages.pages.get(urlsplit(self.path).path)
                body = (html or "<p>Not here.</p>").encode()
                self.send_response(200 if html is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="trust-pages")

    @property
    def host(self) -> str:
        """The host as [tools] web_allowed_hosts lists it."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"

    def publish(self, path: str, html: str) -> str:
        with self._lock:
            self.pages[path] = html
        return self.url(path)

    def requested(self, path: str) -> list[str]:
        """The requests whose path is `path` (any query)."""
        with self._lock:
            return [hit for hit in self.hits if urlsplit(hit).path == path]

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class HeaderDrip:
    """A web server that answers every request with its status line, then one header
    line every `every` seconds, `lines` of them, then a short page; it notes, by path,
    whether the client was still there after the last line (held all that time)."""

    def __init__(self, lines: int = 20, every: float = 0.2) -> None:
        self.lines, self.every = lines, every
        self._held: dict[str, bool] = {}
        self._answered = threading.Condition()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True, name="trust-drip").start()

    def url(self, path: str, lines: int | None = None) -> str:
        return f"http://{self.host}{path}" + ("" if lines is None else f"?lines={lines}")

    def held(self, path: str, wait: float = 10.0) -> bool | None:
        """True: the client stayed to the last line; False: it left before (the server
        notices at its next line); None: no answer to `path` ended within `wait` s."""
        with self._answered:
            self._answered.wait_for(lambda: path in self._held, wait)
            return self._held.get(path)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            target = connection.recv(65536).split(b" ", 2)[1].decode("latin-1")
            path, _, query = target.partition("?")
            lines = int(query.removeprefix("lines=")) if query.startswith("lines=") else self.lines
            try:
                connection.sendall(b"HTTP/1.1 200 OK\r\n")
                for index in range(lines):
                    if self._stop.wait(self.every):
                        return
                    connection.sendall(f"X-Line-{index}: dripping\r\n".encode())
                page = b"<p>The dripping page, whole.</p>"
                connection.sendall(b"Content-Type: text/html\r\nContent-Length: "
                                   + str(len(page)).encode() + b"\r\n\r\n" + page)
                held = True
            except OSError:
                held = False
        with self._answered:
            self._held[path] = held
            self._answered.notify_all()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()


class UnixSocketApi:
    """An HTTP API on a Unix socket (as Docker's is), every request kept: what a command
    reaching it could make it do."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.requests.append(self.path)
                body = b'[{"Id": "c0ffee", "Image": "postgres"}]'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def address_string(self) -> str:
                return "unix"

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self._server = Server(str(path), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="trust-unix-api").start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# Names the lab's DNS answers (an attacker's: every one points at this machine).
LAB_DOMAIN = "hilo-lab.test"


@contextmanager
def lab_dns() -> Iterator[None]:
    """Every name under LAB_DOMAIN resolves to 127.0.0.1, as an attacker who controls a
    listed domain's DNS could make it; other names resolve as usual."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.rstrip(".").endswith("." + LAB_DOMAIN):
            return real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.getaddrinfo = real


def hidden(text: str) -> str:
    """Text a person viewing the page does not see; its text, as web_fetch reads it, holds it."""
    return f'<div style="display:none">{text}</div>'


# -- the person at `hilo chat` --------------------------------------------------------------------


class Person:
    """Answers `hilo chat`'s questions (the REPL's own approver asks them): "deny" says no
    to all (someone who did not ask for what they are asked about), "once" and "always"
    say yes. Every question is kept."""

    def __init__(self, answer: str = "deny") -> None:
        self.answer = answer
        self.asked: list[str] = []

    def ask(self, prompt: str) -> str:
        self.asked.append(prompt)
        if self.answer == "deny":
            return ""  # Enter: the REPL's default is no
        if "[a]lways" in prompt and self.answer == "always":
            return "a"
        return "o" if "[o]nce" in prompt else "y"


# -- the lab --------------------------------------------------------------------------------------


class Lab:
    """The shared machine; see the module docstring. `close()` stops what it started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._stack = ExitStack()
        try:
            self._start()
        except BaseException:
            self._stack.close()  # what started stops again
            raise

    def _start(self) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        self.elsewhere = Path(tempfile.mkdtemp(prefix="hilo-lab-", dir=visible_folder()))
        self._stack.callback(shutil.rmtree, self.elsewhere, True)
        self.fake = FakeOllama().start()
        self._stack.callback(self.fake.stop)
        self.fake.responder = obey
        self.pages = PageServer().start()
        self._stack.callback(self.pages.stop)
        self.drip = HeaderDrip()
        self._stack.callback(self.drip.stop)
        self._stack.enter_context(lab_dns())
        config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root / "data")
        self.config = config.replace(
            llm={"url": self.fake.url}, embedder={"kind": "none"},
            queue={"chat_idle_seconds": 0.0},
            tools={"http": True, "terminal_workdir": str(root), "web_allowed_hosts": (
                self.pages.host, self.drip.host, f"*.{LAB_DOMAIN}")})
        DataDir.of(self.config).init()
        self.server = HiloServer(self.config, self.fake).start()
        self._stack.callback(self.server.stop)
        self._tokens: dict[str, str] = {}
        self._clients: dict[str, httpx.Client] = {}
        self._stack.callback(lambda: [c.close() for c in self._clients.values()])
        self._seed()

    @property
    def service(self) -> ChatService:
        """`hilo serve`'s own chat service (its writer is the front-end's)."""
        return self.server.app.state.service

    def close(self) -> None:
        self._stack.close()

    def _seed(self) -> None:
        service = self.service
        service.edit(lambda con: set_profile(con, BOB, "passphrase hint", BOB_SECRET,
                                             source="user", worker="user"))
        service.edit(lambda con: remember_fact(con, BOB, "fact", "locker code",
                                               f"Bob's locker code is {BOB_SECRET}"))
        service.append(BOB, BOB_SESSION, "user", f"Note to self: {BOB_SECRET}")
        self.bob_task = add_task(service.writer, self.config, "every day at 9",
                                 f"Remind me of {BOB_SECRET}", user_id=BOB,
                                 name="bob's reminder", source="cli").task
        service.edit(lambda con: set_profile(con, ALICE, "name", "Alice", source="user",
                                             worker="user"))
        self.token(BOB)

    # -- access

    def token(self, user: str) -> str:
        """The user's own token, as `hilo token add USER` makes it."""
        if user not in self._tokens:
            self._tokens[user] = issue_token(self.service.writer, user, "red team").token
        return self._tokens[user]

    def http(self, user: str) -> httpx.Client:
        """An HTTP client of `hilo serve` holding the user's own token."""
        if user not in self._clients:
            self._clients[user] = httpx.Client(
                base_url=self.server.url, timeout=30,
                headers={"Authorization": f"Bearer {self.token(user)}"})
        return self._clients[user]

    def client_from(self, address: str, **headers: str) -> httpx.Client:
        """An HTTP client of `hilo serve` connecting from another loopback address (all
        of 127.0.0.0/8 is this machine): what it is refused is refused to it alone."""
        return httpx.Client(base_url=self.server.url, timeout=60, headers=headers,
                            transport=httpx.HTTPTransport(local_address=address))

    def mcp(self, user: str, calls: list[tuple[str, dict[str, Any]]],
            headers: dict[str, str] | None = None) -> list[tuple[bool, str]]:
        """Call MCP tools at /mcp with the official SDK's client holding the user's token:
        (is_error, the result as text) of each call."""
        all_headers = {"Authorization": f"Bearer {self.token(user)}", **(headers or {})}

        async def session() -> list[tuple[bool, str]]:
            transport = streamable_http_client(
                f"{self.server.url}/mcp",
                http_client=httpx2.AsyncClient(headers=all_headers, timeout=30))
            results = []
            async with Client(transport, read_timeout_seconds=30) as client:
                for tool, arguments in calls:
                    result = await client.call_tool(tool, arguments)
                    text = (json.dumps(result.structured_content)
                            if result.structured_content is not None
                            else " ".join(getattr(c, "text", "") for c in result.content))
                    results.append((bool(result.is_error), text))
            return results

        return asyncio.run(session())

    # -- reading from outside

    def read(self, sql: str, params: tuple = ()) -> list[tuple]:
        con = connect_readonly(DataDir.of(self.config).memory_db)
        try:
            return list(con.execute(sql, params))
        finally:
            con.close()

    def rows_of(self, user: str) -> dict[str, list[tuple]]:
        """Every row a user owns, by table: a write as that user changes it."""
        return {table: sorted(self.read(f"SELECT * FROM {table} WHERE user_id = ?", (user,)),
                              key=repr) for table in USER_TABLES}

    def queue_bytes(self) -> bytes:
        """The queue's database files as they are on disk (what a backup would copy)."""
        queue_db = DataDir.of(self.config).queue_db
        return b"".join(p.read_bytes() for p in queue_db.parent.glob(queue_db.name + "*"))


def visible_folder() -> Path:
    """A folder on the real disk that a sandboxed command sees as it is: not under the
    system temp folder (the sandbox gives commands an empty one)."""
    temp = Path(tempfile.gettempdir()).resolve()
    for folder in (Path("/var/tmp"), Path.home()):
        resolved = folder.resolve()
        if (resolved.is_dir() and os.access(resolved, os.W_OK)
                and temp != resolved and temp not in resolved.parents):
            return resolved
    raise Undelivered(f"no writable folder outside {temp} to plant files in")


# -- one scenario ---------------------------------------------------------------------------------


class Undelivered(AssertionError):
    """The attack could not deliver its payload, or got an answer it did not expect: it
    proves nothing either way, so it fails the suite instead of passing as defended."""


@dataclass(frozen=True)
class Outcome:
    """What a scenario brought about, seen from outside: for an attack, whether the
    attacker got what they wanted; for a benign scenario, whether the user did."""

    happened: bool
    evidence: str


class Trial:
    """One scenario's run in the lab: its user (the scenario's name), its working folder,
    its own services; the requests the fake model received since it began."""

    def __init__(self, lab: Lab, name: str) -> None:
        self.lab = lab
        self.name = name
        self.user = name
        self.workdir = lab.root / "work" / name
        self.workdir.mkdir(parents=True)
        self.first_request = len(lab.fake.requests)
        self._services: dict[tuple, ChatService] = {}
        self._stack = ExitStack()

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what a scenario drives

    def config(self, allowed: tuple[str, ...] = (), shell: bool = False,
               tools: dict[str, Any] | None = None) -> Config:
        """The lab's config with this trial's terminal: its folder and allowed prefixes;
        `tools`: other [tools] settings of the trial (its working folder too)."""
        return self.lab.config.replace(tools={
            "terminal_workdir": str(self.workdir), "terminal_allowed_prefixes": tuple(allowed),
            "terminal_shell": shell, "terminal_timeout_seconds": 10.0, **(tools or {})})

    def service(self, allowed: tuple[str, ...] = (), shell: bool = False,
                tools: dict[str, Any] | None = None) -> ChatService:
        """A chat service as `hilo chat` or `hilo worker` holds one, with this terminal."""
        key = (tuple(allowed), shell, tuple(sorted((tools or {}).items())))
        if key not in self._services:
            self._services[key] = self._stack.enter_context(
                ChatService(self.config(allowed, shell, tools)))
        return self._services[key]

    def chat(self, text: str, person: Person, *, session: str = "repl",
             allowed: tuple[str, ...] = (), user: str | None = None,
             shell: bool = False, tools: dict[str, Any] | None = None) -> AgentOutcome:
        """One turn of `hilo chat`: the REPL's agent, its approver asking `person`."""
        agent = Agent(self.service(allowed, shell, tools), surface="chat",
                      approver=ReplApprover(person))
        return agent.start_turn(user or self.user, session, text).run()

    def own_task(self, prompt: str, *, trusted: bool, name: str | None = None) -> int:
        """A task the user adds at the machine (`hilo tasks add [--trusted]`); its id."""
        service = self.service()
        return add_task(service.writer, service.config, "every day at 9", prompt,
                        user_id=self.user, name=name, trusted=trusted, source="cli",
                        from_outside=is_outside("owner")).task.id

    def run_task(self, task_id: int, allowed: tuple[str, ...] = (), shell: bool = False,
                 user: str | None = None, tools: dict[str, Any] | None = None) -> TaskRunResult:
        """The worker runs the task (`run_task_now`, as the scheduler runs a due one)."""
        service = self.service(allowed, shell, tools)
        return run_task_now(service.config, service.writer, Agent(service, surface="task"),
                            user or self.user, task_id)

    def http(self, user: str | None = None) -> httpx.Client:
        return self.lab.http(user or self.user)

    def chat_over_http(self, text_or_messages: str | list[dict[str, Any]], *,
                       api: str = "ollama", headers: dict[str, str] | None = None,
                       token_of: str | None = None, **body: Any) -> httpx.Response:
        """A chat request to `hilo serve` (Ollama's or OpenAI's API) holding the token of
        `token_of` (else this trial's user); `body` adds fields (OpenAI's `user`, tools)."""
        messages = ([{"role": "user", "content": text_or_messages}]
                    if isinstance(text_or_messages, str) else text_or_messages)
        path = "/api/chat" if api == "ollama" else "/v1/chat/completions"
        configure(self.lab.config)  # the queue `hilo serve` reports to (another test may move it)
        return self.http(token_of).post(path, headers=headers or {}, json={
            "model": MODEL, "messages": messages, "stream": False, **body})

    def mcp(self, calls: list[tuple[str, dict[str, Any]]], headers: dict[str, str] | None = None,
            user: str | None = None) -> list[tuple[bool, str]]:
        return self.lab.mcp(user or self.user, calls, headers)

    def publish(self, html: str, page: str = "page") -> str:
        """A page on the lab's web server, under this trial's name; its URL."""
        return self.lab.pages.publish(f"/{self.name}/{page}", html)

    def git_repository(self) -> None:
        """Make the working folder a git repository with one commit."""
        for argv in (["git", "init", "-q"],
                     ["git", "-c", "user.name=Ana", "-c", "user.email=ana@example.org",
                      "commit", "-q", "--allow-empty", "-m", "First commit"]):
            subprocess.run(argv, cwd=self.workdir, check=True, capture_output=True,
                           env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})

    # -- what a scenario reads

    def marker(self, name: str = "pwned") -> Path:
        return self.workdir / name

    def prompts(self) -> str:
        """Every chat request the model received since the trial began, as JSON text."""
        bodies = [r.body for r in self.lab.fake.requests[self.first_request:]
                  if r.path in ("/api/chat", "/v1/chat/completions")]
        return json.dumps(bodies, ensure_ascii=False)

    def stored_text(self, user: str | None = None) -> str:
        """The user's stored events (content and tool calls), as one text."""
        rows = self.lab.read("SELECT content, coalesce(tool_calls_json, '') FROM events "
                             "WHERE user_id = ? ORDER BY id", (user or self.user,))
        return "\n".join(f"{content} {calls}" for content, calls in rows)

    def tool_results(self, user: str | None = None) -> list[str]:
        return [row[0] for row in self.lab.read(
            "SELECT content FROM events WHERE user_id = ? AND role = 'tool' ORDER BY id",
            (user or self.user,))]

    def tasks(self, user: str | None = None) -> list[dict[str, Any]]:
        rows = self.lab.read("SELECT id, name, prompt, is_trusted FROM scheduled_tasks "
                             "WHERE user_id = ? ORDER BY id", (user or self.user,))
        return [{"id": r[0], "name": r[1], "prompt": r[2], "trusted": bool(r[3])} for r in rows]

    def macros(self, user: str | None = None) -> list[tuple[str, str, str, str]]:
        return [tuple(row) for row in self.lab.read(
            "SELECT trigger_tool, trigger_args_pattern, next_tool, next_args FROM macros "
            "WHERE user_id = ? AND removed_at IS NULL ORDER BY id", (user or self.user,))]

    def expect(self, response: httpx.Response, *statuses: int,
               saying: str | None = None) -> httpx.Response:
        """The response, when its status is one of `statuses` (and a refusal's message
        holds `saying`, when given); else Undelivered: a 401 or a 500 is not a defence."""
        if response.status_code not in statuses:
            raise Undelivered(f"{response.request.method} {response.request.url.path} "
                              f"answered {response.status_code}, not "
                              f"{' or '.join(map(str, statuses))}: {response.text[:200]}")
        if saying is not None and response.status_code >= 400 and saying not in response.text:
            raise Undelivered(f"{response.request.url.path} refused with "
                              f"{response.status_code} but not saying {saying!r}: "
                              f"{response.text[:200]}")
        return response

    def asked_for(self, tool: str, text: str, user: str | None = None) -> bool:
        """Whether the model called `tool` with arguments holding `text` (a stored call)."""
        # The model's own calls (and a macro's), not a client's history of calls.
        rows = self.lab.read("SELECT tool_calls_json FROM events WHERE user_id = ? AND "
                             "role = 'assistant' AND origin IN ('model', 'hilo_tool_approved')",
                             (user or self.user,))
        for (calls_json,) in rows:
            for call in stored_tool_calls(calls_json):
                arguments = call.get("arguments")
                if call.get("name") == tool and text in (
                        arguments if isinstance(arguments, str) else json.dumps(arguments)):
                    return True
        return False

    def last_result(self) -> str:
        """The last tool result stored for this user (what the model read), or "none"."""
        results = self.tool_results()
        return results[-1] if results else "no tool ran"


@contextmanager
def environment(**variables: str) -> Iterator[None]:
    """Set environment variables of this process for a while (as the user's shell would
    have set them for `hilo worker`)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
