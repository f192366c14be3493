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


# -- the processes: chat, serve, worker ----------------------------------------------------


@command("chat")
def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    from app.repl import run_repl

    return run_repl(config, session=args.session, user=args.user)


@command("serve")
def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from app.api import run_server

    return run_server(config, args.host, args.port)


@command("worker")
def cmd_worker(args: argparse.Namespace, config: Config) -> int:
    from workers.consumer import run_worker

    return run_worker(config, workers=args.workers, worker_type=args.worker_type)


# -- memory --------------------------------------------------------------------------------


def _reader(config: Config):
    from app.db import connect_readonly, memory_db_path

    try:
        return connect_readonly(memory_db_path(config.data_dir))
    except Exception as exc:
        raise CommandError(str(exc)) from None


@command("memory")
def cmd_memory(args: argparse.Namespace, config: Config) -> int:
    from dataclasses import asdict

    from app import memory
    from app.retrieval import search_memory

    con = _reader(config)
    user = args.user or config.memory.user_id
    if args.memory_command == "profile":
        entries = memory.list_profile(con, user)
        emit(args, [asdict(e) for e in entries],
             lambda: print("\n".join(f"{e.key}: {e.value}" for e in entries) or "(empty)"))
    elif args.memory_command == "facts":
        facts = memory.list_facts(con, user, category=args.category,
                                  include_history=args.history)
        emit(args, [asdict(f) for f in facts], lambda: print("\n".join(
            f"#{f.id} [{f.date}] ({f.category}) {f.key}: {f.value}"
            + (" (superseded)" if f.superseded_at else "") + (" (deleted)" if f.deleted_at else "")
            for f in facts) or "(no facts)"))
    elif args.memory_command == "search":
        hits = search_memory(con, user, " ".join(args.query), limit=args.limit)
        emit(args, [h.to_dict(explain=args.explain) for h in hits], lambda: print("\n".join(
            f"{h.kind} #{h.id} [{h.created_at[:10]}] {h.text[:200]}"
            + (f"  ranks={h.candidate.ranks} score={h.candidate.score:.4f}" if args.explain else "")
            for h in hits) or "(nothing found)"))
    elif args.memory_command == "as-of":
        doc = {"profile": memory.profile_as_of(con, user, args.when),
               "facts": [asdict(f) for f in memory.facts_as_of(con, user, args.when)]}
        emit(args, doc, lambda: print(json.dumps(doc, indent=2, ensure_ascii=False)))
    return 0


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

    chat = sub.add_parser("chat", parents=[common], help="talk to the model, with memory")
    chat.add_argument("--session", help="resume this session (default: a new one)")
    chat.add_argument("--user", help="whose memory (default: [memory] user_id)")

    serve = sub.add_parser("serve", parents=[common],
                           help="HTTP: Ollama- and OpenAI-compatible chat with memory, memory API")
    serve.add_argument("--host", help="bind address (default: [server] host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: [server] port)")

    worker = sub.add_parser("worker", parents=[common], help="run the background workers")
    worker.add_argument("--workers", type=int, help="threads (default: [queue] workers)")
    worker.add_argument("-k", "--worker-type", default="thread",
                        help="only 'thread' is accepted: one write connection per process")

    mem = sub.add_parser("memory", help="inspect what Hilo knows")
    mem_sub = mem.add_subparsers(dest="memory_command", required=True, metavar="WHAT")
    user_opt = argparse.ArgumentParser(add_help=False)
    user_opt.add_argument("--user", help="whose memory (default: [memory] user_id)")
    parents = [common, reporting, user_opt]
    mem_sub.add_parser("profile", parents=parents, help="the profile, key: value")
    facts = mem_sub.add_parser("facts", parents=parents, help="current facts")
    facts.add_argument("--category")
    facts.add_argument("--history", action="store_true", help="include superseded and deleted")
    search = mem_sub.add_parser("search", parents=parents, help="search facts, cards and events")
    search.add_argument("query", nargs="+")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--explain", action="store_true", help="each hit's rank per stream")
    as_of = mem_sub.add_parser("as-of", parents=parents,
                               help="the profile and facts as they were at a time")
    as_of.add_argument("when", help="RFC 3339 time, e.g. 2026-11-30T12:00:00Z")
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
