"""`hilo memory …`: what Hilo knows, for people and (with --json) for scripts."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from app.cli.common import (
    CommandError,
    Group,
    emit,
    json_option,
    open_memory,
    progress_bar,
    user_option,
    with_config,
)
from app.config import Config
from app.format import fact_row, hit_row, profile_line

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
@click.option("--limit", type=int, default=10, show_default=True)
@click.option("--explain", is_flag=True, help="each hit's rank per stream")
@user_option()
@with_config
@json_option
def search(config: Config, query: tuple[str, ...], limit: int, explain: bool,
           user: str | None, as_json: bool) -> int:
    """search facts, cards and events"""
    from app.embedders import make_embedder  # numpy
    from app.retrieval import search_memory

    con = open_memory(config)
    hits = search_memory(con, user or config.memory.user_id, " ".join(query), limit=limit,
                         embedder=make_embedder(config))
    emit(as_json, [h.to_dict(explain=explain) for h in hits], lambda: print(
        "\n".join(hit_row(h, explain) for h in hits) or "(nothing found)"))
    return 0


@memory.command("reembed")
@with_config
@json_option
def reembed(config: Config, as_json: bool) -> int:
    """embed everything for the configured embedder model (resumable)"""
    from workers.embed import reembed as embed_everything  # numpy (torch, when local)

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

    WHEN: RFC 3339 time, e.g. 2026-11-30T12:00:00Z
    """
    from app.memory import facts_as_of, profile_as_of

    con = open_memory(config)
    user = user or config.memory.user_id
    doc = {"profile": profile_as_of(con, user, when),
           "facts": [asdict(f) for f in facts_as_of(con, user, when)]}
    emit(as_json, doc, lambda: print(json.dumps(doc, indent=2, ensure_ascii=False)))
    return 0
