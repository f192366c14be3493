"""What every `hilo` command shares: its options, its Config, how it prints, how it fails.

Every command takes --data-dir and --config (`with_config`); every one that lists or
reports takes --json (`json_option`) and then prints exactly one JSON document on stdout
(`emit`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.errors import HiloError

if TYPE_CHECKING:
    import apsw

    from app.config import Config
    from app.ops.backup import Progress as ProgressCallback

__all__ = ["CommandError", "Group", "with_config", "FACT_ID", "json_option", "user_option",
           "print_json", "emit", "progress_bar", "open_memory"]


class CommandError(HiloError):
    """A failure the user can act on: one line `hilo <command>: <message>` on stderr, then
    exit status `exit_code`.

    `command` names the command in that line when the top-level one would not do ("queue
    status"; "" for none: `hilo: configuration error: …`).
    """

    def __init__(self, message: str, *, exit_code: int = 1, command: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.command = command


class Group(click.Group):
    """A group whose help lists its commands in the order they were added, each with the
    whole first paragraph of its docstring (click would sort them, and cut long ones)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# -- options -------------------------------------------------------------------------------


def with_config(fn: Callable[..., int]) -> Callable[..., int]:
    """Add --data-dir and --config; call the command with the loaded Config first.

    A caller that puts a Config in the click context object (`hilo.main(..., obj=config)`,
    `CliRunner().invoke(hilo, ..., obj=config)`) has it used as it is.
    """

    @click.option("--data-dir", type=click.Path(path_type=Path),
                  help="data directory (else HILO_DATA_DIR, else [data] dir in config.toml)")
    @click.option("--config", "config_file", type=click.Path(path_type=Path),
                  help="config file (else HILO_CONFIG, else ./config.toml when present)")
    @functools.wraps(fn)
    def command(*args: Any, data_dir: Path | None, config_file: Path | None,
                **kwargs: Any) -> int:
        return fn(_config(data_dir, config_file), *args, **kwargs)

    return command


def _config(data_dir: Path | None, config_file: Path | None) -> Config:
    # start-up: `hilo --help` and `--version` read no configuration
    from app.config import Config, ConfigError, load_config

    ctx = click.get_current_context()
    if isinstance(ctx.obj, Config):
        return ctx.obj
    try:
        config = load_config(path=config_file, data_dir=data_dir)
    except ConfigError as exc:
        raise CommandError(f"configuration error: {exc}", exit_code=2, command="") from None
    if config.data_dir.exists() and not config.data_dir.is_dir():
        raise CommandError(f"the data directory {config.data_dir} is a file, not a directory: "
                           "pass --data-dir with a directory (or set HILO_DATA_DIR)")
    from app.log import configure_logging  # start-up: `hilo --help` and `--version` skip structlog

    configure_logging(config.logging.level, config.logging.format)
    ctx.obj = config
    return config


# A fact's id: SQLite's ids are positive signed 64-bit integers.
FACT_ID = click.IntRange(1, 2**63 - 1)

json_option = click.option("--json", "as_json", is_flag=True, help="print one JSON document")


def user_option(whose: str = "memory") -> Callable[[Callable[..., int]], Callable[..., int]]:
    return click.option("--user", help=f"whose {whose} (default: [memory] user_id)")


# -- output --------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    json.dump(document, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")


def emit(as_json: bool, document: Any, human: Callable[[], None]) -> None:
    """Print one JSON document with --json, else the human rendering."""
    if as_json:
        print_json(document)
    else:
        human()


@contextlib.contextmanager
def progress_bar(as_json: bool) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on a terminal, silence otherwise; yields a progress callback."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress  # only on a terminal: for start-up time

    with Progress(transient=True) as progress:
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=total or None)
            progress.update(tasks[phase], completed=done, total=total or None)

        yield update


# -- the memory database -------------------------------------------------------------------


def open_memory(config: Config) -> apsw.Connection:
    """A read-only connection to the memory database; a missing one says to run init, a
    damaged one to restore a backup."""
    from app.datadir import DataDir  # for start-up time, like the commands'
    from app.db import connect_readonly

    try:
        DataDir.of(config).check_memory()
        return connect_readonly(DataDir.of(config).memory_db)
    except Exception as exc:  # noqa: BLE001 — whatever stops the read is the user's one line
        raise CommandError(str(exc)) from None
