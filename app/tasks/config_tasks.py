"""The `[[scheduled_tasks]]` of config.toml: each entry validated, and the database's
config tasks (source "config") kept in step with the file at every worker start
(workers/runner.py). The file owns them: `hilo tasks` cannot pause or remove one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import apsw

from app.config import Config, ConfigError
from app.memory.provenance import is_outside
from app.tasks.schedule import Schedule, ScheduleError, is_fixed_moment, parse_schedule
from app.tasks.store import (
    TaskError,
    clean_name,
    clean_prompt,
    delete_task,
    insert_task,
    moment_or_now,
    select_tasks,
)
from app.timeutil import to_rfc3339
from app.writer import Writer

__all__ = ["CONFIG_TASK_KEYS", "ConfigTask", "SyncCounts", "config_tasks", "sync_config_tasks"]

# Keys of a [[scheduled_tasks]] entry in config.toml.
CONFIG_TASK_KEYS = ("name", "schedule", "prompt", "oneshot", "trusted", "paused", "user")


@dataclass(frozen=True)
class ConfigTask:
    """A validated `[[scheduled_tasks]]` entry."""

    user_id: str
    name: str
    schedule: Schedule
    prompt: str
    trusted: bool = False
    paused: bool = False


@dataclass
class SyncCounts:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    expired: int = 0  # one-shots in the file whose time passed before they were added

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def config_tasks(config: Config, now: datetime | None = None) -> list[ConfigTask]:
    """The `[[scheduled_tasks]]` entries of config.toml, validated.

    Keys: name, schedule, prompt (required strings); oneshot, trusted, paused (booleans,
    default false); user (default [memory] user_id). Raises ConfigError naming the entry.
    A one-shot in the file needs an ISO date-time: "tomorrow at 9" or a repeating
    schedule would be re-created at every worker start.
    """
    now = moment_or_now(now)
    found: list[ConfigTask] = []
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(config.scheduled_tasks):
        where = f"scheduled_tasks[{index}]"
        if isinstance(entry.get("name"), str) and entry["name"].strip():
            where += f' ("{entry["name"].strip()}")'
        spec = _config_task(entry, where, config, now)
        key = (spec.user_id, spec.name)
        if key in seen:
            raise ConfigError(f"{where} in config.toml: another entry has the same name; "
                              "names identify config tasks, make them unique")
        seen.add(key)
        found.append(spec)
    return found


def _config_task(entry: Mapping[str, Any], where: str, config: Config, now: datetime) -> ConfigTask:
    unknown = sorted(set(entry) - set(CONFIG_TASK_KEYS))
    if unknown:
        raise ConfigError(f"{where} in config.toml: unknown key {', '.join(unknown)}; "
                          f"an entry has {', '.join(CONFIG_TASK_KEYS)}")

    def text(key: str, default: str | None = None) -> str:
        value = entry.get(key, default)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}.{key} in config.toml: expected a non-empty string")
        return value.strip()

    def flag(key: str) -> bool:
        value = entry.get(key, False)
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{key} in config.toml: expected true or false")
        return value

    name, schedule_text = text("name"), text("schedule")
    user_id = text("user", config.memory.user_id)
    oneshot = flag("oneshot")
    try:
        prompt = clean_prompt(text("prompt"))
        name = clean_name(name, prompt)
        # A one-shot whose time passed has run (or was missed): the sync does not re-add it.
        schedule = parse_schedule(schedule_text, config.schedule.timezone, now, allow_past=True)
    except ScheduleError as exc:
        raise ConfigError(f"{where}.schedule in config.toml: {exc}") from None
    except TaskError as exc:
        raise ConfigError(f"{where} in config.toml: {exc}") from None
    if (oneshot or schedule.is_oneshot) and not is_fixed_moment(schedule_text):
        raise ConfigError(
            f'{where}.schedule in config.toml: a one-shot here needs an ISO date-time such as '
            f'"2026-12-01 09:00", not "{schedule_text}": the worker reads the file at every start '
            "and would schedule it again")
    return ConfigTask(user_id, name, schedule, prompt, flag("trusted"), flag("paused"))


def sync_config_tasks(writer: Writer, config: Config,
                      now: datetime | None = None) -> SyncCounts:
    """Make the config tasks in the database match `[[scheduled_tasks]]` (by user and
    name): add new entries, update changed ones, remove the ones no longer in the file.
    Tool tasks are never touched. Run at worker start; raises ConfigError (and changes
    nothing) when an entry is invalid."""
    now = moment_or_now(now)
    specs = config_tasks(config, now)
    stamp = to_rfc3339(now)

    def write(con: apsw.Connection) -> SyncCounts:
        counts = SyncCounts()
        existing = {(r.user_id, r.name): r
                    for r in select_tasks(con, "WHERE t.source = 'config'")}
        for spec in specs:
            current = existing.pop((spec.user_id, spec.name), None)
            next_run = spec.schedule.next_run(now)
            if current is None:
                if spec.schedule.is_oneshot and next_run is None:
                    counts.expired += 1
                    continue
                insert_task(con, user_id=spec.user_id, name=spec.name, schedule=spec.schedule,
                            prompt=spec.prompt, source="config", trusted=spec.trusted,
                            paused=spec.paused, now=now,
                            from_outside=is_outside("owner"))  # the owner's config.toml
                counts.added += 1
                continue
            wanted = (spec.schedule.cron_expr, spec.schedule.original, spec.prompt,
                      spec.schedule.is_oneshot, spec.paused, spec.trusted)
            have = (current.cron_expr, current.original_schedule, current.prompt,
                    current.is_oneshot, current.is_paused, current.is_trusted)
            if wanted == have:
                counts.unchanged += 1
                continue
            # A new schedule, or a resumed task, starts from now; otherwise keep its place.
            rescheduled = (spec.schedule.cron_expr != current.cron_expr
                           or spec.schedule.is_oneshot != current.is_oneshot
                           or (current.is_paused and not spec.paused))
            next_run_at = (to_rfc3339(next_run) if next_run else None) if rescheduled \
                else current.next_run_at
            con.execute(
                "UPDATE scheduled_tasks SET cron_expr = ?, original_schedule = ?, prompt = ?, "
                "is_oneshot = ?, is_paused = ?, is_trusted = ?, next_run_at = ?, updated_at = ? "
                "WHERE id = ?",
                (spec.schedule.cron_expr, spec.schedule.original, spec.prompt,
                 int(spec.schedule.is_oneshot), int(spec.paused), int(spec.trusted),
                 next_run_at, stamp, current.id))
            counts.updated += 1
        for gone in existing.values():
            delete_task(con, gone.id, stamp)
            counts.removed += 1
        return counts

    return writer.submit(write)
