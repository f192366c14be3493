"""The long-running processes: chat (the REPL), serve (HTTP), mcp (stdio),
worker (the queue's consumer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from app.cli.common import CommandError, user_option, with_config

if TYPE_CHECKING:
    from app.config import Config

__all__ = ["chat", "serve", "mcp", "demo_model", "worker"]

# Every `hilo` run imports every command module, so each command imports the library
# modules it uses when it runs: for start-up time.


@click.command("chat")
@click.option("--session", help="resume this session (default: a new one)")
@user_option()
@with_config
def chat(config: Config, session: str | None, user: str | None) -> int:
    """talk to the model, with memory"""
    from app.cli.repl import run_repl  # the turn: numpy, the model client

    return run_repl(config, session=session, user=user)


@click.command("serve")
@click.option("--host", help="bind address (default: [server] host, 127.0.0.1)")
@click.option("--port", type=int, help="port (default: [server] port)")
@with_config
def serve(config: Config, host: str | None, port: int | None) -> int:
    """HTTP: Ollama- and OpenAI-compatible chat with memory, memory API"""
    from app.config import ConfigError, with_option  # start-up: loaded by with_config already

    if port is not None:
        try:
            config = with_option(config, "server", "port", port, "--port")
        except ConfigError as exc:
            raise CommandError(f"configuration error: {exc}", exit_code=2, command="") from None
    from app.serve import run_server  # start-up: FastAPI and the turn

    return run_server(config, host)


@click.command("mcp")
@user_option()
@with_config
def mcp(config: Config, user: str | None) -> int:
    """MCP on stdin/stdout: memory tools for Claude, Cursor, Continue, …"""
    from app.mcp.server import serve_stdio  # the MCP SDK and the turn

    return serve_stdio(config, user)


@click.command("demo-model")
@click.option("--wait", is_flag=True,
              help="serve nothing: wait (30 s at most) until the demo model answers")
@with_config
def demo_model(config: Config, wait: bool) -> int:
    """a scripted model at [llm] url, to try Hilo with no model server (make try)"""
    from app.ops.demo.server import serve_demo_model, wait_for_demo_model  # start-up

    return wait_for_demo_model(config) if wait else serve_demo_model(config)


@click.command("worker")
@click.option("--workers", type=click.IntRange(1, 64),
              help="threads, 1 to 64 (default: [queue] workers)")
@click.option("-k", "--worker-type", default="thread",
              help="only 'thread' is accepted: one write connection per process")
@with_config
def worker(config: Config, workers: int | None, worker_type: str) -> int:
    """run the background workers"""
    from workers.cpu import yield_cpu_to_turns  # start-up: niced before the heavy imports

    yield_cpu_to_turns(config)
    from workers.consumer import run_worker  # start-up: the jobs and everything they use

    return run_worker(config, workers=workers, worker_type=worker_type)

