"""`hilo token add|list|revoke`: per-user API tokens (app/access.py).

A per-user token names its user: a request that carries it acts as that user and no
other. Only the token's SHA-256 is stored, so `add` prints the token once.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from app.cli.common import Group, emit, json_option, open_memory, with_config

if TYPE_CHECKING:
    from app.config import Config

__all__ = ["TOKENS_REQUIRED", "token", "add", "list_command", "revoke"]

# Said with every new token: from the first one on, no request goes without.
TOKENS_REQUIRED = ("From now on `hilo serve` answers only requests that carry a token "
                   "(`Authorization: Bearer …`), all but /health: give each client its own.")

# Every `hilo` run imports every command module, so each command imports the library
# modules it uses when it runs: for start-up time.


@click.group("token", cls=Group)
def token() -> None:
    """per-user API tokens for `hilo serve` (the user comes from the token)"""


@token.command("add")
@click.argument("user")
@click.option("--name", default="", help="what the token is for (a device, a client)")
@with_config
@json_option
def add(config: Config, user: str, name: str, as_json: bool) -> int:
    """issue a token for USER; it is shown once"""
    from app.access import issue_token
    from app.db import Durability
    from app.writer import Writer

    with Writer.from_config(config, Durability.FULL) as writer:
        issued = issue_token(writer, user, name)
    emit(as_json, {"token": issued.token, **asdict(issued.record)},
         lambda: print(f"Token #{issued.record.id} for {user} (shown once, keep it):\n"
                       f"{issued.token}\n{TOKENS_REQUIRED}"))
    return 0


@token.command("list")
@click.option("--user", help="only this user's tokens")
@click.option("--all", "include_revoked", is_flag=True, help="revoked ones too")
@with_config
@json_option
def list_command(config: Config, user: str | None, include_revoked: bool, as_json: bool) -> int:
    """the tokens: id, user, name, first characters, created, revoked"""
    from app.access import list_tokens

    tokens = list_tokens(open_memory(config), user, include_revoked=include_revoked)
    emit(as_json, {"tokens": [asdict(t) for t in tokens]}, lambda: print("\n".join(
        f"#{t.id}  {t.user_id}  {t.name or '-'}  {t.prefix}…  {t.created_at}"
        + (f"  revoked {t.revoked_at}" if t.revoked_at else "") for t in tokens)
        or "No tokens."))
    return 0


@token.command("revoke")
@click.argument("ref")
@with_config
@json_option
def revoke(config: Config, ref: str, as_json: bool) -> int:
    """revoke a token by its id or its first characters"""
    from app.access import revoke_token
    from app.db import Durability
    from app.writer import Writer

    with Writer.from_config(config, Durability.FULL) as writer:
        revoked = revoke_token(writer, int(ref) if ref.isdigit() else ref)
    emit(as_json, asdict(revoked), lambda: print(f"Revoked #{revoked.id} ({revoked.user_id})"))
    return 0
