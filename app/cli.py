"""The `hilo` command. Thin: each subcommand parses, calls the library, prints.

Every subcommand takes --data-dir and --config; every one that lists or reports takes
--json and then prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from app.config import Config, ConfigError, load_config
from app.log import configure_logging

Command = Callable[[argparse.Namespace, Config], int]
COMMANDS: dict[str, Command] = {}


class CommandError(Exception):
    """A failure the user can act on: printed as one line, exit status 1."""


def command(name: str) -> Callable[[Command], Command]:
    def register(fn: Command) -> Command:
        COMMANDS[name] = fn
        return fn

    return register


def emit(args: argparse.Namespace, document: Any, human: Callable[[], None]) -> None:
    """Print one JSON document with --json, else the human rendering."""
    if getattr(args, "json", False):
        json.dump(document, sys.stdout, ensure_ascii=False, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        human()


# -- init and doctor ---------------------------------------------------------------------


@command("init")
def cmd_init(args: argparse.Namespace, config: Config) -> int:
    from app.datadir import init_data_dir

    report = init_data_dir(config)

    def human() -> None:
        verb = "Created" if report.created_dir else "Checked"
        print(f"{verb} {report.data_dir}")
        applied = ", ".join(report.migrations_applied) or "none needed"
        print(f"  memory.sqlite3  schema {report.schema_version} (migrations: {applied})")
        note = "template written: edit it" if report.wrote_bootstrap else "kept as it was"
        print(f"  MEMORY.md       {note}")

    emit(args, {
        "data_dir": str(report.data_dir),
        "created": report.created_dir,
        "migrations_applied": report.migrations_applied,
        "schema_version": report.schema_version,
        "wrote_memory_md": report.wrote_bootstrap,
    }, human)
    return 0


@command("doctor")
def cmd_doctor(args: argparse.Namespace, config: Config) -> int:
    from app.doctor import Status, run_checks

    checks = run_checks(config)
    failed = any(c.status is Status.FAIL for c in checks)

    def human() -> None:
        for c in checks:
            line = f"{c.status.value:<4}  {c.name}: {c.detail}"
            if c.fix:
                line += f"\n      → {c.fix}"
            print(line)

    emit(args, {"ok": not failed, "checks": [c.to_dict() for c in checks]}, human)
    return 1 if failed else 0


# -- parser ------------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help="data directory (else HILO_DATA_DIR, "
                        "else [data] dir in config.toml)")
    common.add_argument("--config", type=Path, help="config file (else HILO_CONFIG, else "
                        "./config.toml when present)")
    return common


def _reporting() -> argparse.ArgumentParser:
    reporting = argparse.ArgumentParser(add_help=False)
    reporting.add_argument("--json", action="store_true", help="print one JSON document")
    return reporting


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hilo", description="Persistent, layered memory for chat agents on local models."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, reporting = _common(), _reporting()

    sub.add_parser("init", parents=[common, reporting],
                   help="create the data directory, migrate, write a MEMORY.md template")
    sub.add_parser("doctor", parents=[common, reporting],
                   help="check the database, indexes, disk and model server")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(path=args.config, data_dir=args.data_dir)
    except ConfigError as exc:
        print(f"hilo: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logging.level, config.logging.format)
    try:
        return COMMANDS[args.command](args, config)
    except CommandError as exc:
        print(f"hilo {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
