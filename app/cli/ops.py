"""Looking after the data directory: init, doctor, backup, restore, rebuild, export, import."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from app.cli.common import CommandError, emit, json_option, progress_bar, user_option, with_config

if TYPE_CHECKING:
    from app.config import Config

__all__ = ["init", "doctor", "backup_command", "restore_command", "rebuild_command", "export",
           "import_command"]

# Every `hilo` run imports every command module, so each command imports the library
# modules it uses when it runs: for start-up time.


@click.command("init")
@with_config
@json_option
def init(config: Config, as_json: bool) -> int:
    """create the data directory, migrate, write a MEMORY.md template"""
    from app.datadir import DataDir

    report = DataDir.of(config).init()

    def human() -> None:
        verb = "Created" if report.created_dir else "Checked"
        print(f"{verb} {report.data_dir}")
        applied = ", ".join(report.migrations_applied) or "none needed"
        print(f"  memory.sqlite3  schema {report.schema_version} (migrations: {applied})")
        note = "template written: edit it" if report.wrote_bootstrap else "kept as it was"
        print(f"  MEMORY.md       {note}")

    emit(as_json, {
        "data_dir": str(report.data_dir),
        "created": report.created_dir,
        "migrations_applied": report.migrations_applied,
        "schema_version": report.schema_version,
        "wrote_memory_md": report.wrote_bootstrap,
    }, human)
    return 0


@click.command("doctor")
@with_config
@json_option
def doctor(config: Config, as_json: bool) -> int:
    """check the database, indexes, disk and model server"""
    from app.ops.doctor import Status, run_checks

    checks = run_checks(config)
    failed = any(c.status is Status.FAIL for c in checks)

    def human() -> None:
        for c in checks:
            line = f"{c.status.value:<4}  {c.name}: {c.detail}"
            if c.fix:
                line += f"\n      → {c.fix}"
            print(line)

    emit(as_json, {"ok": not failed, "checks": [c.to_dict() for c in checks]}, human)
    return 1 if failed else 0


@click.command("backup")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--overwrite", is_flag=True)
@with_config
@json_option
def backup_command(config: Config, dest: Path, overwrite: bool, as_json: bool) -> int:
    """a consistent copy of the memory database, while it runs

    DEST: a file, or a folder for memory-<time>.sqlite3
    """
    from app.ops.backup import backup

    with progress_bar(as_json) as progress:
        report = backup(config, dest, progress, overwrite=overwrite)
    doc = report.to_dict()
    emit(as_json, doc, lambda: print(
        f"Backed up to {doc['dest']}: {doc['events']} events, schema {doc['schema_version']}, "
        f"integrity {doc['integrity']}"
        + (f"; MEMORY.md to {doc['memory_md']}" if doc["memory_md"] else "")))
    return 0


@click.command("restore")
@click.argument("src", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True,
              help="skip the running-process check (the pid is not Hilo's)")
@with_config
@json_option
def restore_command(config: Config, src: Path, force: bool, as_json: bool) -> int:
    """put a backup in place (refused while a worker runs)"""
    from app.ops.backup import restore

    report = restore(config, src, force=force)
    doc = report.to_dict()
    emit(as_json, doc, lambda: print(
        f"Restored {src} ({doc['events']} events); the previous file is kept as "
        f"{doc['kept_as']}" + ("; MEMORY.md restored" if doc["memory_md"] else "")))
    return 0


@click.command("rebuild")
@click.option("--all", "all_layers", is_flag=True,
              help="also clear cards, agent facts and profile, diary, vectors so the worker "
                   "re-derives them from events")
@with_config
@json_option
def rebuild_command(config: Config, all_layers: bool, as_json: bool) -> int:
    """re-derive the full-text and vector indexes (--all: every derived layer)"""
    from app.ops.backup import rebuild

    with progress_bar(as_json) as progress:
        report = rebuild(config, all_layers=all_layers, progress=progress)
    doc = report.to_dict()
    cleared = (" and cleared every derived layer; the worker re-derives them from events"
               if all_layers else "")
    emit(as_json, doc, lambda: print(
        f"Rebuilt the full-text indexes and {report.vector_indexes} approximate vector "
        f"index(es){cleared}"))
    return 0


@click.command("export")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "jsonl"]), default="md",
              show_default=True)
@click.option("--overwrite", is_flag=True,
              help="replace an existing export (files you changed included)")
@user_option()
@with_config
@json_option
def export(config: Config, out: Path, fmt: str, overwrite: bool, user: str | None,
           as_json: bool) -> int:
    """your memory as markdown (a readable folder) or JSON lines

    OUT: a folder (md) or a file (jsonl)
    """
    from app.ops.transfer import export_jsonl, export_markdown

    user = user or config.memory.user_id
    write = export_markdown if fmt == "md" else export_jsonl
    report = write(config, user, out, overwrite=overwrite)
    emit(as_json, report.to_dict(), lambda: print(report.summary()))
    return 0


@click.command("import")
@click.argument("source")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@user_option()
@with_config
@json_option
def import_command(config: Config, source: str, path: Path | None, user: str | None,
                   as_json: bool) -> int:
    """read a Hilo export, or `kinder-agent <memory.db>`

    SOURCE: an export folder or .jsonl file, or `kinder-agent`; PATH: with kinder-agent,
    its memory.db
    """
    from app.ops.transfer import import_kinder_agent, import_path

    user = user or config.memory.user_id
    if source == "kinder-agent":
        if path is None:
            raise CommandError("usage: hilo import kinder-agent <memory.db>")
        report = import_kinder_agent(config, path, user)
    else:
        report = import_path(config, Path(source), user)
    emit(as_json, report.to_dict(), lambda: print(report.summary()))
    return 0

