"""MCP: the official SDK's client drives `hilo mcp` (a real subprocess, stdio) and /mcp on
a real `hilo serve` (uvicorn on loopback); each tool's effect is checked in the database."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import apsw
import httpx
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app.config import Config
from app.datadir import DataDir
from app.db import connect_readonly
from app.memory.facts import forgotten_key
from tests.api.support import HiloServer, serve
from tests.conftest import REPO_ROOT
from tests.fake_ollama import FakeOllama

TOKEN = "mcp-test-token"
TOOLS = {"remember", "recall", "forget", "correct", "get_profile", "set_profile", "list_facts",
         "context_for", "session_handoff", "tasks", "queue_status"}


def run(scenario: Callable[[Client], Awaitable[Any]], server: Any) -> Any:
    async def main() -> Any:
        async with Client(server, read_timeout_seconds=60) as client:
            return await scenario(client)

    return asyncio.run(main())


def stdio_server(data_dir: Path, fake: FakeOllama, command: list[str] | None = None,
                 user: str | None = "ana") -> StdioServerParameters:
    """`hilo mcp` as a client starts it, running this tree's code."""
    command = command or ["hilo", "mcp"]
    if command[0] == "hilo":
        command = [sys.executable, "-m", "app.cli", *command[1:]]
    if user is not None:
        command = [*command, "--user", user]
    env = {"PYTHONPATH": str(REPO_ROOT), "HILO_DATA_DIR": str(data_dir),
           "HILO_LLM_URL": fake.url, "HOME": os.environ["HOME"]}
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=REPO_ROOT)


def http_server(hilo: HiloServer, token: str | None = TOKEN, user: str | None = None,
                url: str | None = None) -> Any:
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if user is not None:
        headers["X-Hilo-User"] = user
    return streamable_http_client(url or f"{hilo.url}/mcp",
                                  http_client=httpx2.AsyncClient(headers=headers, timeout=60))


def memory(data_dir: Path) -> apsw.Connection:
    return connect_readonly(DataDir(data_dir).memory_db)


async def call(client: Client, tool: str, **arguments: Any) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def error_of(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text


@pytest.fixture
def hilo(config: Config, data_dir: Path, fake_ollama: FakeOllama) -> Iterator[HiloServer]:
    """`hilo serve` with a token, in front of the fake model server."""
    yield from serve(config.replace(server={"token": TOKEN}), fake_ollama)


# -- stdio ----------------------------------------------------------------------------------


def test_every_tool_is_listed_with_a_schema_a_description_and_an_example(data_dir, fake_ollama):
    async def scenario(client: Client) -> tuple[list, list]:
        return (await client.list_tools()).tools, (await client.list_resources()).resources

    tools, resources = run(scenario, stdio_server(data_dir, fake_ollama))
    assert {tool.name for tool in tools} == TOOLS
    for tool in tools:
        assert tool.input_schema["type"] == "object"
        assert "Example" in tool.description, tool.name
    remember = next(tool for tool in tools if tool.name == "remember")
    assert remember.input_schema["required"] == ["key", "value"]
    assert remember.input_schema["properties"]["key"]["examples"]
    assert remember.annotations.destructive_hint is False
    assert {str(r.uri) for r in resources} == {"hilo://memory.md", "hilo://profile",
                                               "hilo://diary"}


@pytest.mark.slow
def test_stdio_memory_tools_write_and_read_the_users_memory(data_dir, fake_ollama):
    async def scenario(client: Client) -> dict:
        seen: dict[str, Any] = {}
        seen["remember"] = await call(client, "remember", key="editor", value="Uses Helix daily",
                                      category="preference")
        fact_id = seen["remember"]["fact"]["id"]
        seen["correct"] = await call(client, "correct", fact_id=fact_id, value="Uses Zed daily")
        seen["recall"] = await call(client, "recall", query="Zed")
        seen["list_facts"] = await call(client, "list_facts", category="preference")
        seen["set_profile"] = await call(client, "set_profile", key="City", value="Lisbon")
        await call(client, "set_profile", key="pet", value="a cat")
        seen["forget_profile"] = await call(client, "forget", profile_key="pet")
        seen["get_profile"] = await call(client, "get_profile")
        seen["context_for"] = await call(client, "context_for", text="which editor do I use?")
        await call(client, "remember", key="tabs", value="Prefers tabs over spaces")
        seen["forget"] = await call(client, "forget",
                                    fact_id=(await call(client, "list_facts"))["facts"][0]["id"])
        seen["profile_resource"] = (await client.read_resource("hilo://profile")).contents[0]
        seen["memory_md"] = (await client.read_resource("hilo://memory.md")).contents[0]
        return seen

    seen = run(scenario, stdio_server(data_dir, fake_ollama))
    con = memory(data_dir)
    assert seen["remember"]["action"] == "insert"
    assert seen["correct"]["action"] == "supersede"
    versions = con.execute("SELECT user_id, value, source, superseded_at IS NOT NULL FROM facts "
                           "WHERE key = 'editor' ORDER BY id").fetchall()
    assert versions == [("ana", "Uses Helix daily", "user", 1), ("ana", "Uses Zed daily", "user", 0)]
    # What an MCP client's model wrote is content from outside, for every turn that reads it.
    assert con.execute("SELECT DISTINCT from_outside FROM facts").fetchall() == [(1,)]
    assert con.execute("SELECT DISTINCT from_outside FROM profile").fetchall() == [(1,)]
    assert seen["recall"]["hits"][0]["text"].endswith("Uses Zed daily")
    assert "ranks" in seen["recall"]["hits"][0]["explain"]
    assert [f["value"] for f in seen["list_facts"]["facts"]] == ["Uses Zed daily"]
    assert con.execute("SELECT key, value, deleted_at IS NULL FROM profile WHERE user_id = 'ana' "
                       "ORDER BY key").fetchall() == [("city", "Lisbon", 1), ("pet", "a cat", 0)]
    assert [e["key"] for e in seen["get_profile"]["profile"]] == ["city"]
    system = seen["context_for"]["messages"][0]["content"]
    assert "Uses Zed daily" in system and "Lisbon" in system
    assert seen["context_for"]["tokens"] <= seen["context_for"]["budget"]
    assert seen["forget"]["key"] == "tabs" and seen["forget"]["versions"] == 1
    assert con.execute("SELECT value, deleted_at IS NOT NULL FROM facts WHERE key = ?",
                       (forgotten_key("tabs"),)).fetchone() == ("", 1)  # its key forgotten too
    assert json.loads(seen["profile_resource"].text)[0]["value"] == "Lisbon"
    assert seen["memory_md"].mime_type == "text/markdown"
    # Every edit is on record, as the user's.
    assert {w for (w,) in con.execute("SELECT DISTINCT worker FROM memory_log")} == {"user"}


@pytest.mark.slow
def test_stdio_session_handoff_tasks_and_queue_status(data_dir, fake_ollama):
    async def scenario(client: Client) -> dict:
        seen: dict[str, Any] = {}
        seen["write"] = await call(client, "session_handoff", action="write",
                                   session_id="refactor-auth",
                                   entry="Moved token checks to the gate; expiry tests next")
        seen["read"] = await call(client, "session_handoff", action="read")
        seen["diary"] = (await client.read_resource("hilo://diary")).contents[0].text
        seen["add"] = await call(client, "tasks", action="add", schedule="every monday at 8",
                                 prompt="Remind me to plan the week", name="weekly plan")
        seen["pause"] = await call(client, "tasks", action="pause", task="weekly plan")
        seen["list"] = await call(client, "tasks", action="list")
        await call(client, "tasks", action="add", schedule="in 10 minutes", prompt="Stretch",
                   oneshot=True)
        seen["remove"] = await call(client, "tasks", action="remove", task=seen["add"]["id"])
        seen["queue"] = await call(client, "queue_status")
        return seen

    seen = run(scenario, stdio_server(data_dir, fake_ollama))
    con = memory(data_dir)
    assert seen["write"]["action"] == "insert"
    # An MCP client's note is its model's text: from outside, like all it writes (issue 40).
    assert con.execute("SELECT user_id, session_id, entry, is_extractive, from_outside "
                       "FROM diary").fetchall() == [
        ("ana", "refactor-auth", "Moved token checks to the gate; expiry tests next", 0, 1)]
    assert seen["read"]["entries"][0]["session_id"] == "refactor-auth"
    assert json.loads(seen["diary"])[0]["entry"].startswith("Moved token checks")
    assert "Monday" in seen["add"]["description"]
    assert seen["pause"]["is_paused"] is True
    assert [t["name"] for t in seen["list"]["tasks"]] == ["weekly plan"]
    assert seen["remove"]["id"] == seen["add"]["id"]
    assert con.execute("SELECT user_id, prompt, is_oneshot, is_trusted, from_outside "
                       "FROM scheduled_tasks").fetchall() == [("ana", "Stretch", 1, 0, 1)]
    assert {"pending", "failed", "worker"} <= set(seen["queue"])


@pytest.mark.slow
def test_domain_errors_are_tool_errors_carrying_their_one_line_message(data_dir, fake_ollama):
    async def scenario(client: Client) -> list[str]:
        return [await error_of(client, "correct", fact_id=999, value="anything"),
                await error_of(client, "forget", fact_id=999),
                await error_of(client, "forget"),
                await error_of(client, "remember", key=" ", value="x"),
                await error_of(client, "tasks", action="add", schedule="whenever", prompt="x"),
                await error_of(client, "tasks", action="pause", task="nope"),
                await error_of(client, "session_handoff", action="write", session_id="s")]

    messages = run(scenario, stdio_server(data_dir, fake_ollama))
    assert "no current fact 999" in messages[0]
    assert "no current fact 999" in messages[1]
    assert "exactly one of fact_id and profile_key" in messages[2]
    assert "key must be non-empty text" in messages[3]
    assert "whenever" in messages[4]
    assert "nope" in messages[5]
    assert "needs session_id and entry" in messages[6]
    assert all("\n" not in message for message in messages)


def test_arguments_that_do_not_fit_are_refused_in_one_line(data_dir, fake_ollama):
    async def scenario(client: Client) -> list[str]:
        return [await error_of(client, "remember", value="Uses Helix"),
                await error_of(client, "recall", query="editor", limit="many")]

    missing, wrong = run(scenario, stdio_server(data_dir, fake_ollama))
    assert missing == "Error executing tool remember: key is missing"
    assert wrong.startswith("Error executing tool recall: limit: ") and "\n" not in wrong


def test_the_server_reports_hilos_version(data_dir, fake_ollama):
    from importlib.metadata import version

    async def scenario(client: Client) -> Any:
        return client.server_info

    info = run(scenario, stdio_server(data_dir, fake_ollama))
    assert (info.name, info.version) == ("hilo", version("hilo"))


# -- streamable HTTP on hilo serve ------------------------------------------------------------


def test_http_mcp_needs_the_token(hilo: HiloServer):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    refused = httpx.post(f"{hilo.url}/mcp", json=initialize, headers=headers)
    assert refused.status_code == 401
    assert "bearer token" in refused.json()["error"]
    wrong = httpx.post(f"{hilo.url}/mcp", json=initialize,
                       headers={**headers, "Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    answered = httpx.post(f"{hilo.url}/mcp", json=initialize,
                          headers={**headers, "Authorization": f"Bearer {TOKEN}"})
    assert answered.status_code == 200
    assert answered.json()["result"]["serverInfo"]["name"] == "hilo"

    async def listed(client: Client) -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    assert run(listed, http_server(hilo)) == TOOLS
    with pytest.raises(ExceptionGroup) as refused_client:  # the SDK's client fails on the 401
        run(listed, http_server(hilo, token="wrong"))
    assert refused_client.group_contains(MCPError, match="error response")


def test_http_each_user_sees_and_changes_only_their_own_memory(hilo: HiloServer, data_dir):
    async def as_ana(client: Client) -> dict:
        await call(client, "set_profile", key="name", value="Ana")
        await call(client, "session_handoff", action="write", session_id="s1", entry="Ana's note")
        return await call(client, "remember", key="locker", value="Ana keeps her bike in locker 12")

    async def as_bob(client: Client) -> dict:
        return {"recall": await call(client, "recall", query="locker"),
                "facts": await call(client, "list_facts"),
                "profile": await call(client, "get_profile"),
                "diary": await call(client, "session_handoff", action="read"),
                "correct": await error_of(client, "correct", fact_id=fact_id, value="0000"),
                "forget": await error_of(client, "forget", fact_id=fact_id),
                "resource": (await client.read_resource("hilo://profile")).contents[0].text}

    fact_id = run(as_ana, http_server(hilo, user="ana"))["fact"]["id"]
    bob = run(as_bob, http_server(hilo, user="bob"))
    assert bob["recall"]["hits"] == [] and bob["facts"]["facts"] == []
    assert bob["profile"]["profile"] == [] and bob["diary"]["entries"] == []
    assert "no current fact" in bob["correct"] and "no current fact" in bob["forget"]
    assert json.loads(bob["resource"]) == []
    con = memory(data_dir)
    assert con.execute("SELECT user_id, value, superseded_at, deleted_at FROM facts").fetchall() == [
        ("ana", "Ana keeps her bike in locker 12", None, None)]
    assert {u for (u,) in con.execute("SELECT user_id FROM profile UNION SELECT user_id FROM diary")
            } == {"ana"}

    async def as_default(client: Client) -> dict:
        return await call(client, "list_facts")

    # Without X-Hilo-User: [memory] user_id, as on every other route.
    assert run(as_default, http_server(hilo))["facts"] == []
    assert hilo.config.memory.user_id != "ana"


def test_http_tasks_added_over_mcp_are_never_trusted(hilo: HiloServer, data_dir):
    async def scenario(client: Client) -> tuple[Any, dict]:
        asked = await client.call_tool("tasks", {"action": "add", "schedule": "every day at 9",
                                                 "prompt": "Run the cleanup", "trusted": True})
        return asked, await call(client, "tasks", action="list")

    asked, listed = run(scenario, http_server(hilo))
    assert not asked.is_error and asked.structured_content["is_trusted"] is False  # no such say
    assert [task["is_trusted"] for task in listed["tasks"]] == [False]
    assert memory(data_dir).execute(
        "SELECT count(*) FROM scheduled_tasks WHERE is_trusted").fetchone() == (0,)


def test_http_a_bad_user_header_is_refused_with_the_apis_message(hilo: HiloServer):
    async def scenario(client: Client) -> str:
        return await error_of(client, "list_facts")

    assert "user must be 1 to 200 printable characters" in run(
        scenario, http_server(hilo, user="x" * 201))


# -- docs/mcp.md's client snippets -----------------------------------------------------------


def mcp_page() -> str:
    return (REPO_ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")


def page_clients() -> list[tuple[str, Any]]:
    """Each snippet's way in: ("stdio", command) or ("http", (url, headers))."""
    section = mcp_page()

    def blocks(language: str) -> list[str]:
        return re.findall(rf"```{language}\n(.*?)```", section, re.S)

    found: list[tuple[str, Any]] = []
    for block in blocks("json"):  # Claude Desktop, Cursor
        for entry in json.loads(block)["mcpServers"].values():
            if "command" in entry:
                found.append(("stdio", [entry["command"], *entry["args"]]))
            else:
                found.append(("http", (entry["url"], entry["headers"])))
    for block in blocks("yaml"):  # Continue
        for entry in yaml.safe_load(block)["mcpServers"]:
            found.append(("stdio", [entry["command"], *entry["args"]]))
    for line in blocks("sh")[0].splitlines():  # Claude Code
        words = shlex.split(line)
        if "--" in words:
            found.append(("stdio", words[words.index("--") + 1:]))
        else:
            name, _, value = words[words.index("--header") + 1].partition(": ")
            found.append(("http", (next(w for w in words if w.startswith("http://")),
                                   {name: value})))
    open_webui = section.split("**Open WebUI**")[1]
    assert "MCP (Streamable HTTP)" in open_webui and "Auth `Bearer`" in open_webui
    url = re.search(r"`(http://[^`]+)`", open_webui).group(1)
    found.append(("http", (url, {"Authorization": "Bearer <token>"})))
    return found


def test_the_mcp_page_names_each_client():
    section = mcp_page()
    for client in ("Claude Desktop", "Claude Code", "Cursor", "Continue", "Open WebUI"):
        assert f"**{client}**" in section
    kinds = [kind for kind, _ in page_clients()]
    assert kinds.count("stdio") == 3 and kinds.count("http") == 3


@pytest.mark.slow
def test_every_stdio_snippet_starts_an_mcp_server(data_dir, fake_ollama):
    async def tool_names(client: Client) -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    for kind, command in page_clients():
        if kind == "stdio":
            assert command == ["hilo", "mcp"]
            assert run(tool_names, stdio_server(data_dir, fake_ollama, command, user=None)) == TOOLS


def test_every_url_snippet_answers_on_hilo_serve(hilo: HiloServer):
    async def tool_names(client: Client) -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    for kind, target in page_clients():
        if kind != "http":
            continue
        url, headers = target
        parts = urlsplit(url)
        assert (parts.hostname, parts.port) == (hilo.config.server.host, hilo.config.server.port)
        headers = {k: v.replace("<token>", TOKEN) for k, v in headers.items()}
        transport = streamable_http_client(
            f"{hilo.url}{parts.path}", http_client=httpx2.AsyncClient(headers=headers, timeout=60))
        assert run(tool_names, transport) == TOOLS


def test_hilo_serve_loads_the_mcp_sdk_only_when_mcp_is_first_called():
    """Importing the MCP SDK is about a second of `hilo serve`'s start; /mcp builds its
    server on its first request (the tests above call it after a cold start)."""
    import subprocess

    probe = ("import sys, app.serve.server; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'app')"
             " and (m == 'mcp' or m.startswith(('mcp.', 'app.mcp')))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
