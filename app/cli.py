"""The `hilo` command. Thin: each subcommand parses, calls the library, prints.

Every subcommand takes --data-dir and --config; every one that lists or reports takes
--json and then prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
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


def _progress_bar(args: argparse.Namespace):
    """A rich progress bar on a terminal, silence otherwise; yields a progress callback."""
    import contextlib

    @contextlib.contextmanager
    def bar():
        if getattr(args, "json", False) or not sys.stderr.isatty():
            yield None
            return
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            tasks: dict[str, Any] = {}

            def update(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = progress.add_task(phase, total=total or None)
                progress.update(tasks[phase], completed=done, total=total or None)

            yield update

    return bar()


# -- backup, restore, rebuild, export, import ---------------------------------------------


@command("backup")
def cmd_backup(args: argparse.Namespace, config: Config) -> int:
    from app.backup import backup

    with _progress_bar(args) as progress:
        report = backup(config, args.dest, progress, overwrite=args.overwrite)
    doc = report.to_dict()
    emit(args, doc, lambda: print(
        f"Backed up to {doc['dest']}: {doc['events']} events, schema {doc['schema_version']}, "
        f"integrity {doc['integrity']}"))
    return 0


@command("restore")
def cmd_restore(args: argparse.Namespace, config: Config) -> int:
    from app.backup import restore

    report = restore(config, args.src, force=args.force)
    doc = report.to_dict()
    emit(args, doc, lambda: print(
        f"Restored {args.src} ({doc['events']} events); the previous file is kept as "
        f"{doc['kept_as']}"))
    return 0


@command("rebuild")
def cmd_rebuild(args: argparse.Namespace, config: Config) -> int:
    from app.backup import rebuild

    with _progress_bar(args) as progress:
        report = rebuild(config, all_layers=args.all, progress=progress)
    doc = report.to_dict()
    emit(args, doc, lambda: print(
        "Rebuilt the full-text indexes" + (" and cleared every derived layer; the worker "
                                           "re-derives them from events" if args.all else "")))
    return 0


@command("export")
def cmd_export(args: argparse.Namespace, config: Config) -> int:
    from app.transfer import export_jsonl, export_markdown

    user = args.user or config.memory.user_id
    export = export_markdown if args.format == "md" else export_jsonl
    report = export(config, user, args.out)
    doc = report.to_dict()
    emit(args, doc, lambda: print(f"Exported {user}'s memory to {args.out}: {doc}"))
    return 0


@command("import")
def cmd_import(args: argparse.Namespace, config: Config) -> int:
    from app.transfer import import_kinder_agent, import_path

    user = args.user or config.memory.user_id
    if args.source == "kinder-agent":
        if args.path is None:
            raise CommandError("usage: hilo import kinder-agent <memory.db>")
        report = import_kinder_agent(config, args.path, user)
    else:
        report = import_path(config, Path(args.source), user)
    doc = report.to_dict()
    emit(args, doc, lambda: print(f"Imported into {user}'s memory: {doc}"))
    return 0


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


# -- the queue -----------------------------------------------------------------------------


@command("queue")
def cmd_queue(args: argparse.Namespace, config: Config) -> int:
    import workers.jobs  # noqa: F401 — the task names `retry` and `revoke --task` look up
    from workers.inspect import queue_command

    return queue_command(args, config)


def _reembed(args: argparse.Namespace, config: Config) -> int:
    """Vectors for everything that has none for the configured model; resumable."""
    from workers.embed import reembed

    with _progress_bar(args) as progress:
        callback = (lambda done, total: progress("embedding", done, total)) if progress else None
        try:
            counts = reembed(config, callback)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    doc = counts.to_dict()
    emit(args, doc, lambda: print(
        f"Embedded {doc['embedded']} items with {doc['model']}; {doc['failed']} failed, "
        f"{doc['remaining']} remaining" + (f"; removed {doc['removed']} vectors of other models"
                                          if doc["removed"] else "")
        + ("; run it again to resume" if doc["remaining"] else "")))
    return 0 if not doc["remaining"] else 1


# -- scheduled tasks -------------------------------------------------------------------------


def _task_line(task, tz: str) -> str:
    from app.scheduled_tasks import describe_task

    state = "paused" if task.is_paused else f"next {task.next_run_at or '-'}"
    line = (f"#{task.id}  {task.name}  [{task.original_schedule}] {state}, last "
            f"{task.last_run_at or 'never'}" + ("  (trusted)" if task.is_trusted else "")
            + (f"  ({task.source})" if task.source != "tool" else ""))
    line += f"\n      {describe_task(task, tz)}"
    if task.last_error:
        line += f"\n      last error: {task.last_error}"
    return line


@command("tasks")
def cmd_tasks(args: argparse.Namespace, config: Config) -> int:
    from app import scheduled_tasks as tasks
    from app.db import Durability
    from app.writer import Writer

    user = args.user or config.memory.user_id
    tz = config.schedule.timezone
    what = args.tasks_command
    if what == "list":
        found = tasks.list_tasks(_reader(config), user)
        emit(args, [t.to_json() for t in found], lambda: print(
            "\n".join(_task_line(t, tz) for t in found) or "(no scheduled tasks)"))
        return 0
    if what == "log":
        log = tasks.task_log(_reader(config), user, args.ref)
        emit(args, log.to_json(), lambda: print("\n".join(
            [f"run {r.scheduled_for} {r.status}" + (f": {r.error}" if r.error else "")
             for r in log.runs] + [f"  {e.created_at[:16]} {e.role}: {e.content}"
                                   for e in log.events]) or "(no runs yet)"))
        return 0
    with Writer.from_config(config, Durability.FULL) as writer:
        if what == "add":
            added = tasks.add_task(writer, config, args.schedule, args.prompt, user_id=user,
                                   name=args.name, oneshot=args.oneshot, trusted=args.trusted)
            emit(args, added.to_json(),
                 lambda: print(f"Added #{added.task.id} {added.task.name}: "
                               f"{added.description}"))
        elif what == "run":
            from app.chat import ChatService
            from workers.handoff import queue_handoff
            from workers.scheduler import run_task_now

            with ChatService(config, writer=writer, handoff=queue_handoff(config)) as service:
                result = run_task_now(config, writer, service, user, args.ref)
            emit(args, result.to_json(), lambda: print(json.dumps(
                result.to_json(), indent=2, ensure_ascii=False, default=str)))
        else:
            change = {"pause": tasks.pause_task, "rm": tasks.remove_task}.get(what)
            task = (change(writer, user, args.ref) if change
                    else tasks.resume_task(writer, config, user, args.ref))
            verb = {"pause": "Paused", "resume": "Resumed", "rm": "Removed"}[what]
            emit(args, task.to_json() if task else {"ref": args.ref},
                 lambda: print(f"{verb} {args.ref}"))
    return 0


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

    if args.memory_command == "reembed":
        return _reembed(args, config)
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
        from app.embedders import make_embedder

        hits = search_memory(con, user, " ".join(args.query), limit=args.limit,
                             embedder=make_embedder(config))
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

    backup = sub.add_parser("backup", parents=[common, reporting],
                            help="a consistent copy of the memory database, while it runs")
    backup.add_argument("dest", type=Path, help="a file, or a folder for memory-<time>.sqlite3")
    backup.add_argument("--overwrite", action="store_true")
    restore = sub.add_parser("restore", parents=[common, reporting],
                             help="put a backup in place (refused while a worker runs)")
    restore.add_argument("src", type=Path)
    restore.add_argument("--force", action="store_true",
                         help="skip the running-process check (the pid is not Hilo's)")
    rebuild = sub.add_parser("rebuild", parents=[common, reporting],
                             help="re-derive the full-text indexes (--all: every derived layer)")
    rebuild.add_argument("--all", action="store_true",
                         help="also clear cards, agent facts and profile, diary, vectors so the "
                              "worker re-derives them from events")
    export = sub.add_parser("export", parents=[common, reporting],
                            help="your memory as markdown (a readable folder) or JSON lines")
    export.add_argument("out", type=Path, help="a folder (md) or a file (jsonl)")
    export.add_argument("--format", choices=("md", "jsonl"), default="md")
    export.add_argument("--user", help="whose memory (default: [memory] user_id)")
    imp = sub.add_parser("import", parents=[common, reporting],
                         help="read a Hilo export, or `kinder-agent <memory.db>`")
    imp.add_argument("source", help="an export folder or .jsonl file, or `kinder-agent`")
    imp.add_argument("path", nargs="?", type=Path, help="with kinder-agent: its memory.db")
    imp.add_argument("--user", help="whose memory (default: [memory] user_id)")

    from workers.inspect import add_queue_parser  # light: loads no tasks

    add_queue_parser(sub, [common, reporting])

    tasks = sub.add_parser("tasks", help="scheduled tasks: cron or plain language")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    task_user = argparse.ArgumentParser(add_help=False)
    task_user.add_argument("--user", help="whose tasks (default: [memory] user_id)")
    tparents = [common, reporting, task_user]
    add = tasks_sub.add_parser("add", parents=tparents, help="add a task", description=(
        'Schedules: a cron expression ("0 9 * * 1-5") or plain English or Spanish: "every '
        'weekday at 9", "every 15 minutes", "cada lunes a las 8", "in 10 minutes", '
        '"mañana a las 9", an ISO date-time.'))
    add.add_argument("schedule")
    add.add_argument("prompt")
    add.add_argument("--name")
    add.add_argument("--oneshot", action="store_true", help="run once, then delete")
    add.add_argument("--trusted", action="store_true", help="runs may use tools without approval")
    tasks_sub.add_parser("list", parents=tparents, help="tasks with next and last run")
    for action, text in (("pause", "pause a task"), ("resume", "resume a paused task"),
                         ("rm", "remove a task"), ("run", "run a task now, once"),
                         ("log", "a task's runs and replies")):
        tasks_sub.add_parser(action, parents=tparents, help=text).add_argument(
            "ref", help="the task's id or name")

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
    mem_sub.add_parser("reembed", parents=[common, reporting],
                       help="embed everything for the configured embedder model (resumable)")
    as_of = mem_sub.add_parser("as-of", parents=parents,
                               help="the profile and facts as they were at a time")
    as_of.add_argument("when", help="RFC 3339 time, e.g. 2026-11-30T12:00:00Z")
    return parser


def _user_errors() -> tuple[type[Exception], ...]:
    """Failures whose message already says what to do: shown as one line, exit status 1.
    Anything else is a bug and keeps its traceback."""
    from app.backup import BackupError
    from app.db import DatabaseError
    from app.events import InvalidEvent
    from app.memory import InvalidMemory
    from app.schedule import ScheduleError
    from app.scheduled_tasks import TaskError
    from app.transfer import TransferError

    return (CommandError, BackupError, DatabaseError, InvalidEvent, InvalidMemory,
            ScheduleError, TaskError, TransferError)


def main(argv: list[str] | None = None) -> int:
    # Vector search multiplies small matrices per query: OpenBLAS's thread pool only
    # fights the server's and workers' own threads for the cores (measured: 25 → 10 ms).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    except Exception as exc:
        if not isinstance(exc, _user_errors()):
            raise
        print(f"hilo {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hilo … | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
