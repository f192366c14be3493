"""`hilo memory …`: what Hilo knows, for people and (with --json) for scripts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC
from typing import TYPE_CHECKING, Any

import click

from app.cli.common import (
    FACT_ID,
    CommandError,
    Group,
    emit,
    json_option,
    open_memory,
    progress_bar,
    user_option,
    with_config,
)
from app.cli.format import EDIT_VERBS, as_of_text, edited_text, fact_row, hit_row, profile_line

if TYPE_CHECKING:
    from app.config import Config
    from app.writer import Writer

__all__ = ["memory", "profile", "facts", "search", "reembed", "as_of", "add", "set_profile_key",
           "edit", "forget", "accept_import"]

# Every `hilo` run imports every command module, so each command imports the library
# modules it uses when it runs: for start-up time.


@click.group("memory", cls=Group)
def memory() -> None:
    """inspect what Hilo knows"""


@memory.command("profile")
@user_option()
@with_config
@json_option
def profile(config: Config, user: str | None, as_json: bool) -> int:
    """the profile, key: value"""
    from app.memory import list_profile

    entries = list_profile(open_memory(config), user or config.memory.user_id)
    emit(as_json, [asdict(e) for e in entries],
         lambda: print("\n".join(profile_line(e) for e in entries) or "(empty)"))
    return 0


@memory.command("facts")
@click.option("--category")
@click.option("--history", is_flag=True, help="include superseded and deleted")
@user_option()
@with_config
@json_option
def facts(config: Config, category: str | None, history: bool, user: str | None,
          as_json: bool) -> int:
    """current facts"""
    from app.memory import list_facts

    found = list_facts(open_memory(config), user or config.memory.user_id,
                       category=category, include_history=history)
    emit(as_json, [asdict(f) for f in found],
         lambda: print("\n".join(fact_row(f) for f in found) or "(no facts)"))
    return 0


@memory.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--explain", is_flag=True, help="each hit's rank per stream")
@user_option()
@with_config
@json_option
def search(config: Config, query: tuple[str, ...], limit: int, explain: bool,
           user: str | None, as_json: bool) -> int:
    """search facts, cards and events"""
    from app.recall.fusion import search_memory
    from app.recall.state import Recall

    embedder = None
    if config.embedder.kind != "none":
        # start-up: the embedders load numpy and the model client, for keywords no need
        from app.model.embedders import make_embedder

        embedder = make_embedder(config)
    con = open_memory(config)
    hits = search_memory(con, user or config.memory.user_id, " ".join(query), limit=limit,
                         recall=Recall(), embedder=embedder)
    emit(as_json, [h.to_dict(explain=explain) for h in hits], lambda: print(
        "\n".join(hit_row(h, explain) for h in hits) or "(nothing found)"))
    return 0


@memory.command("reembed")
@with_config
@json_option
def reembed(config: Config, as_json: bool) -> int:
    """embed everything for the configured embedder model (resumable)"""
    from app.learn.embed import reembed as embed_everything  # numpy (ONNX Runtime, when local)

    with progress_bar(as_json) as progress:
        callback = (lambda done, total: progress("embedding", done, total)) if progress else None
        try:
            counts = embed_everything(config, callback)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    doc = counts.to_dict()
    emit(as_json, doc, lambda: print(
        f"Embedded {doc['embedded']} items with {doc['model']}; {doc['failed']} failed, "
        f"{doc['remaining']} remaining" + (f"; removed {doc['removed']} vectors of other models"
                                          if doc["removed"] else "")
        + ("; run it again to resume" if doc["remaining"] else "")))
    return 0 if not doc["remaining"] else 1


@memory.command("as-of")
@click.argument("when")
@user_option()
@with_config
@json_option
def as_of(config: Config, when: str, user: str | None, as_json: bool) -> int:
    """the profile and facts as they were at a time

    WHEN: an RFC 3339 time (2026-11-30T12:00:00Z, 2026-11-30T13:00:00+01:00) or a date
    (2026-11-30: its start, UTC)
    """
    from app.memory import facts_as_of, profile_as_of

    moment = _moment(when)
    con = open_memory(config)
    user = user or config.memory.user_id
    profile_then = profile_as_of(con, user, moment)
    facts_then = facts_as_of(con, user, moment)
    emit(as_json, {"as_of": moment, "profile": profile_then,
                   "facts": [asdict(f) for f in facts_then]},
         lambda: print(as_of_text(moment, profile_then, facts_then)))
    return 0


def _moment(when: str) -> str:
    """`when` as the database writes times (RFC 3339 UTC), or a CommandError."""

    from app.timeutil import parse_rfc3339, to_rfc3339

    try:
        moment = parse_rfc3339(when.strip())
    except ValueError:
        raise CommandError(f'"{when}" is not a time: give one like 2026-11-30T12:00:00Z '
                           "or a date like 2026-11-30", command="memory as-of") from None
    return to_rfc3339(moment.astimezone(UTC))


# -- the user's own edits: the same memory functions as the HTTP API -----------------------


def _writer(config: Config) -> Writer:
    """A writer for the user's own edits: committed with synchronous=FULL, like events."""
    from app.db import Durability
    from app.writer import Writer

    return Writer.from_config(config, Durability.FULL)


def _edited(config: Config, write: Callable[[Any], Any], as_json: bool) -> int:
    """Run the user's edit (app/memory/edits.py, as the HTTP API and MCP do) and say it."""
    with _writer(config) as writer:
        edited = writer.submit(write)
    fact = edited.fact
    emit(as_json, {"action": edited.action, "fact": asdict(fact) if fact else None},
         lambda: print(edited_text(edited.action, fact)))
    return 0


@memory.command("add")
@click.argument("category", type=click.Choice(
    ("fact", "decision", "solution", "preference", "conversation")))
@click.argument("key")
@click.argument("value")
@user_option()
@with_config
@json_option
def add(config: Config, category: str, key: str, value: str, user: str | None,
        as_json: bool) -> int:
    """add a fact, or a new value for its key

    CATEGORY: fact (about you or the world), decision (what was decided), solution (how
    a problem was solved), preference (what you like or how you work), conversation
    (what was discussed). KEY: a short name, e.g. editor; VALUE: the fact, in a sentence.
    """
    from app.memory import is_outside, remember_fact

    user = user or config.memory.user_id
    return _edited(config, lambda con: remember_fact(
        con, user, category, key, value, similarity=config.memory.dedupe_similarity,
        from_outside=is_outside("owner")), as_json)  # at the machine


@memory.command("set-profile")
@click.argument("key")
@click.argument("value")
@user_option()
@with_config
@json_option
def set_profile_key(config: Config, key: str, value: str, user: str | None,
                    as_json: bool) -> int:
    """set a profile key (name, city, language, …) to a value

    A key you set wins over what the workers learn; `hilo memory profile` lists the keys.
    """
    from app.memory import is_outside, set_profile
    from app.memory.profile import KEY_CHARS, VALUE_CHARS
    from app.memory.validation import check_entry

    user = user or config.memory.user_id
    with _writer(config) as writer:
        action = writer.submit(lambda con: set_profile(con, user, key, value, source="user",
                                                       worker="user",
                                                       from_outside=is_outside("owner")))
    key, value = check_entry(key, value, KEY_CHARS, VALUE_CHARS)  # as stored: redacted
    emit(as_json, {"key": key, "value": value, "action": action},
         lambda: print(f"{EDIT_VERBS.get(action, action)}: {key}: {value}"))
    return 0


@memory.command("edit")
@click.argument("fact_id", type=FACT_ID)
@click.argument("value")
@user_option()
@with_config
@json_option
def edit(config: Config, fact_id: int, value: str, user: str | None, as_json: bool) -> int:
    """correct a fact: a new value under its key (the old one is kept as history)

    FACT_ID: the id shown by `hilo memory facts`
    """
    from app.memory import correct_fact, is_outside

    user = user or config.memory.user_id
    return _edited(config, lambda con: correct_fact(con, user, fact_id, value,
                                                    from_outside=is_outside("owner")), as_json)


@memory.command("forget")
@click.argument("fact_id", type=FACT_ID)
@click.option("--with-sources", is_flag=True,
              help="also delete the messages it was learned from and the replies that repeat them")
@user_option()
@with_config
@json_option
def forget(config: Config, fact_id: int, with_sources: bool, user: str | None,
           as_json: bool) -> int:
    """forget a fact for good: its value, key, earlier versions and vectors, gone from the
    database files too; workers will not learn it again

    FACT_ID: the id shown by `hilo memory facts`
    """
    from app.memory import FactNotFound
    from app.memory.forget import forget as forget_for_good

    user = user or config.memory.user_id
    with _writer(config) as writer:
        gone = forget_for_good(writer, user, fact_id, worker="user", with_sources=with_sources)
    if gone is None:
        raise FactNotFound(fact_id)
    emit(as_json, gone.to_json(), lambda: print(
        f"Forgot #{fact_id} ({gone.category} · {gone.key}): {gone.versions} version(s)"
        + (f", {gone.events} source message(s)" if with_sources else "")))
    return 0


@memory.command("accept-import")
@with_config
@json_option
def accept_import(config: Config, as_json: bool) -> int:
    """make the MEMORY.md an import brought (MEMORY.imported.md) this data directory's own

    Every conversation reads MEMORY.md as your own words, so `hilo import` never installs
    one: read MEMORY.imported.md first. The MEMORY.md it replaces is kept beside it.
    """
    from app.ops.transfer.memory_md import accept_imported_memory_md

    installed, kept = accept_imported_memory_md(config)
    emit(as_json, {"memory_md": str(installed), "replaced_kept_at": str(kept) if kept else None},
         lambda: print(f"{installed} is now the imported one; every conversation reads it"
                       + (f" (yours is kept at {kept})" if kept else "")))
    return 0
