"""`hilo macros …` and `hilo terminal …`: what Hilo's own agent learned and may run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from app.cli.common import (
    CommandError,
    Group,
    emit,
    json_option,
    open_memory,
    user_option,
    with_config,
)
from app.cli.format import macro_row

if TYPE_CHECKING:
    from app.config import Config
    from app.writer import Writer

__all__ = ["macros", "list_command", "remove", "learn", "terminal", "allowed", "allow", "revoke"]

# Every `hilo` run imports every command module, so each command imports the library
# modules it uses when it runs: for start-up time.


def _writer(config: Config) -> Writer:
    """A writer for the user's own edits: committed with synchronous=FULL, like events."""
    from app.db import Durability
    from app.writer import Writer

    return Writer.from_config(config, Durability.FULL)


@click.group("macros", cls=Group)
def macros() -> None:
    """tool chains the agent learned, offered or run without asking the model"""


@macros.command("list")
@user_option("macros")
@with_config
@json_option
def list_command(config: Config, user: str | None, as_json: bool) -> int:
    """learned macros, most confident first"""
    from app.turn.macros import list_macros

    found = list_macros(open_memory(config), user or config.memory.user_id)
    tools = config.tools
    emit(as_json, [m.to_json() for m in found], lambda: print(
        "\n".join(macro_row(m) for m in found) or "(no macros learned yet)"))
    if found and not as_json:
        print(f"(used at confidence ≥ {tools.macro_confidence:g}, "
              f"seen ≥ {tools.macro_min_support})")
    return 0


@macros.command("rm")
@click.argument("macro_id", type=click.IntRange(1, 2**63 - 1))
@user_option("macros")
@with_config
@json_option
def remove(config: Config, macro_id: int, user: str | None, as_json: bool) -> int:
    """remove a macro for good (it is not learned again)

    MACRO_ID: its id, from `hilo macros list`
    """
    from app.turn.macros import remove_macro

    user_id = user or config.memory.user_id
    with _writer(config) as writer:
        removed = writer.submit(lambda con: remove_macro(con, user_id, macro_id))
    emit(as_json, removed.to_json(), lambda: print(f"Removed macro #{macro_id}"))
    return 0


@macros.command("learn")
@user_option("macros")
@with_config
@json_option
def learn(config: Config, user: str | None, as_json: bool) -> int:
    """learn from the stored tool events now (the worker does every 10 minutes)"""
    from app.learn.tool_chains import learn_all_macros

    with _writer(config) as writer:
        counts = learn_all_macros(writer, config, user)
    emit(as_json, {u: c.to_json() for u, c in counts.items()}, lambda: print(
        "\n".join(f"{u}: {c.learned} learned, {c.updated} updated, {c.dropped} dropped"
                  for u, c in counts.items()) or "(no tool events yet)"))
    return 0


@click.group("terminal", cls=Group)
def terminal() -> None:
    """commands the agent's terminal tool runs without asking"""


@terminal.command("allowed")
@user_option("allowed commands")
@with_config
@json_option
def allowed(config: Config, user: str | None, as_json: bool) -> int:
    """the allow rules: config.toml's, then "allow always" answers"""
    from app.turn.tools.terminal import stored_rules

    user_id = user or config.memory.user_id
    tools = config.tools
    rows = [{"rule": r, "source": "config", "created_at": None}
            for r in tools.terminal_allow_rules]
    rows += [{"rule": f"{p.strip()} *", "source": "config (prefix)", "created_at": None}
             for p in tools.terminal_allowed_prefixes]
    rows += [{"rule": r, "source": "stored", "created_at": at}
             for r, at in stored_rules(open_memory(config), user_id)]
    emit(as_json, rows, lambda: print("\n".join(f"{r['rule']}  ({r['source']})" for r in rows)
                                      or "(none: every command asks first)"))
    return 0


@terminal.command("allow")
@click.argument("rule")
@user_option("allowed commands")
@with_config
def allow(config: Config, rule: str, user: str | None) -> int:
    """let commands RULE covers run without asking: "git status" (exactly), "ls *" (any
    further arguments), "cat <path>" (a path inside the working folder)"""
    from app.turn.tools import ToolFailed
    from app.turn.tools.terminal import allow_rule

    with _writer(config) as writer:
        try:
            stored = allow_rule(writer, user or config.memory.user_id, rule)
        except ToolFailed as exc:
            raise CommandError(str(exc)) from None
    print(f"Allowed: {stored}")
    return 0


@terminal.command("revoke")
@click.argument("rule")
@user_option("allowed commands")
@with_config
def revoke(config: Config, rule: str, user: str | None) -> int:
    """forget an "allow always" answer"""
    from app.turn.tools.terminal import revoke_rule

    with _writer(config) as writer:
        if not revoke_rule(writer, user or config.memory.user_id, rule):
            raise CommandError(f"no allow rule {rule!r} stored (config.toml's are edited "
                               "there): `hilo terminal allowed` lists them")
    print(f"Revoked: {rule}")
    return 0
