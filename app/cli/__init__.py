"""The `hilo` command. Thin: each command parses, calls the library, prints.

One click group; the commands live by topic: ops.py (init, doctor, backup, restore,
rebuild, export, import), run.py (chat, serve, mcp, worker), queue.py, tasks.py,
memory.py, access.py (token) and agent.py (macros, terminal); what they share (options,
the Config, output, CommandError) is in common.py, how records read as text in
format.py, and `hilo chat`'s REPL in repl.py. A command's module is imported when the
command runs (`hilo --help` imports them all): defining every command's options is ~5
ms, which a command that runs in tens of milliseconds should not pay for the others. A
domain error becomes its one-line message and exit status in one place,
`HiloGroup.invoke`.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import NoReturn

import click

from app import __version__
from app.cli.common import CommandError, Group
from app.errors import HiloError

__all__ = ["COMMANDS", "HiloGroup", "hilo", "main", "run_and_exit"]

# Every command, in the order `hilo --help` lists them: its name, and where it is defined
# (the module is imported when the command runs, for start-up time).
COMMANDS = {
    "init": "app.cli.ops:init",
    "doctor": "app.cli.ops:doctor",
    "chat": "app.cli.run:chat",
    "serve": "app.cli.run:serve",
    "mcp": "app.cli.run:mcp",
    "worker": "app.cli.run:worker",
    "demo-model": "app.cli.run:demo_model",
    "backup": "app.cli.ops:backup_command",
    "restore": "app.cli.ops:restore_command",
    "rebuild": "app.cli.ops:rebuild_command",
    "export": "app.cli.ops:export",
    "import": "app.cli.ops:import_command",
    "queue": "app.cli.queue:queue",
    "tasks": "app.cli.tasks:tasks",
    "memory": "app.cli.memory:memory",
    "token": "app.cli.access:token",
    "macros": "app.cli.agent:macros",
    "terminal": "app.cli.agent:terminal",
}


class HiloGroup(Group):
    """The top-level group: its commands (COMMANDS) return their exit status, and it
    turns the failures a user can act on into `hilo <command>: <message>` on stderr."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attribute)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 on the command line
                raise click.UsageError(
                    f"the argument {arg!r} is not valid UTF-8 text: pass it in UTF-8", ctx
                ) from None
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> NoReturn:
        try:
            status = super().invoke(ctx)
        except KeyboardInterrupt:
            status = 130
        except BrokenPipeError:  # `hilo … | head`: the reader left; not an error of ours
            sys.stderr.close()
            status = 0
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # the command line itself: click reports it
        except HiloError as exc:  # the whole family, mapped here once; anything else is a bug
            named = exc.command if isinstance(exc, CommandError) else None
            command = ctx.invoked_subcommand if named is None else named
            print(f"hilo {command}: {exc}" if command else f"hilo: {exc}", file=sys.stderr)
            status = exc.exit_code
        ctx.exit(status)


@click.group("hilo", cls=HiloGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="hilo",
                      message="%(prog)s %(version)s")
def hilo() -> None:
    """Persistent, layered memory for chat agents on local models."""


def main(argv: list[str] | None = None) -> int:
    """Run `hilo` with `argv` (default: the process's arguments); the exit status."""
    # Vector search multiplies small matrices per query: OpenBLAS's thread pool only
    # fights the server's and workers' own threads for the cores (measured: 25 → 10 ms).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        return hilo.main(argv, prog_name="hilo", standalone_mode=False)
    except click.ClickException as exc:  # a command line that does not parse: exit status 2
        exc.show()
        return exc.exit_code
    except click.Abort:  # Ctrl-C before a command started
        return 130


def run_and_exit() -> NoReturn:
    """The `hilo` script, and `python -m app.cli`: main(), then the process ends."""
    status = main()
    # Every object left is freed with the process. Python's last garbage collection would
    # first walk them all, most made by the imports: ~10 ms of a command's ~100. What a
    # command opens (files, the memory, the queue) it has closed by now, in `with` blocks.
    gc.freeze()
    sys.exit(status)
