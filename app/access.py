"""Per-user API tokens: who is asking, taken from the token rather than from a header.

`[server] token` is one token for everyone: whoever holds it reads any user's memory by
naming that user in `X-Hilo-User` (fine for one person). A per-user token belongs to one
user: the HTTP gate takes the user from it, and refuses a request that names another.
Made with `issue_token` (shown once; only its SHA-256 is stored), listed with
`list_tokens`, revoked with `revoke_token`; `token_user` is what the gate asks.

Writes go through a Writer (`writer.submit`); reads take any connection.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import apsw

from app.errors import InvalidInput
from app.events import InvalidEvent, refuse_secret_id
from app.timeutil import utc_now
from app.writer import Writer

__all__ = ["TOKEN_PREFIX", "SHOWN_PREFIX_CHARS", "MAX_NAME_CHARS", "MAX_USER_CHARS", "AccessError",
           "AccessToken", "IssuedToken", "issue_token", "list_tokens", "revoke_token",
           "token_user", "tokens_in_use"]

TOKEN_PREFIX = "hilo_"
# Characters of a token kept in clear to tell tokens apart ("hilo_" and 6 more).
SHOWN_PREFIX_CHARS = len(TOKEN_PREFIX) + 6
MAX_NAME_CHARS = 100
MAX_USER_CHARS = 200


class AccessError(InvalidInput, ValueError):
    """A token request that cannot be done as asked; str() says why and what to do."""

    code = "invalid_token_request"


@dataclass(frozen=True)
class AccessToken:
    """A token as listed: never the token itself."""

    id: int
    user_id: str
    name: str
    prefix: str
    created_at: str
    revoked_at: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class IssuedToken:
    """A new token: `token` is shown to the person once and is stored nowhere."""

    token: str
    record: AccessToken


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="replace")).hexdigest()


def _check_user(user_id: str) -> str:
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > MAX_USER_CHARS \
            or not user_id.isprintable():
        raise AccessError(f"the user must be 1 to {MAX_USER_CHARS} printable characters")
    try:
        refuse_secret_id("user", user_id)
    except InvalidEvent as exc:
        raise AccessError(str(exc)) from None
    return user_id


_COLUMNS = "id, user_id, name, prefix, created_at, revoked_at"


def _record(row: tuple) -> AccessToken:
    return AccessToken(*row)


def issue_token(writer: Writer, user_id: str, name: str = "") -> IssuedToken:
    """A new token for `user_id`, stored hashed; the returned token is its only copy."""
    user_id = _check_user(user_id)
    name = " ".join(name.split())
    if len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise AccessError(f"the name must be at most {MAX_NAME_CHARS} printable characters")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)

    def write(con: apsw.Connection) -> AccessToken:
        con.execute(
            "INSERT INTO access_tokens (user_id, name, token_sha256, prefix, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (user_id, name, _digest(token), token[:SHOWN_PREFIX_CHARS], utc_now()))
        row = con.execute(f"SELECT {_COLUMNS} FROM access_tokens WHERE id = ?",
                          (con.last_insert_rowid(),)).fetchone()
        return _record(row)

    return IssuedToken(token, writer.submit(write))


def list_tokens(con: apsw.Connection, user_id: str | None = None, *,
                include_revoked: bool = False) -> list[AccessToken]:
    """Tokens, oldest first: one user's, or everyone's."""
    where, params = ["1 = 1"], []
    if user_id is not None:
        where.append("user_id = ?")
        params.append(user_id)
    if not include_revoked:
        where.append("revoked_at IS NULL")
    sql = f"SELECT {_COLUMNS} FROM access_tokens WHERE {' AND '.join(where)} ORDER BY id"
    return [_record(row) for row in con.execute(sql, params)]


def revoke_token(writer: Writer, ref: int | str) -> AccessToken:
    """Revoke a token by its id or its shown prefix; the next request with it gets 401."""

    def write(con: apsw.Connection) -> AccessToken:
        rows = _find(con, ref)
        if not rows:
            raise AccessError(f"no token {ref!r}: see `hilo token list` for ids and prefixes")
        if len(rows) > 1:
            raise AccessError(f"{ref!r} names {len(rows)} tokens: give the token's id instead")
        token = rows[0]
        if token.revoked_at is None:
            con.execute("UPDATE access_tokens SET revoked_at = ? WHERE id = ?",
                        (utc_now(), token.id))
        return _record(con.execute(f"SELECT {_COLUMNS} FROM access_tokens WHERE id = ?",
                                   (token.id,)).fetchone())

    return writer.submit(write)


def _find(con: apsw.Connection, ref: int | str) -> list[AccessToken]:
    if isinstance(ref, int) or str(ref).isdigit():
        sql, params = f"SELECT {_COLUMNS} FROM access_tokens WHERE id = ?", (int(ref),)
    else:
        sql, params = f"SELECT {_COLUMNS} FROM access_tokens WHERE prefix = ?", (str(ref),)
    return [_record(row) for row in con.execute(sql, params)]


def token_user(con: apsw.Connection, token: str) -> str | None:
    """The user an active token belongs to, or None for an unknown or revoked one."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    # Looked up by digest: timing tells nothing about the token itself.
    row = con.execute("SELECT user_id FROM access_tokens WHERE token_sha256 = ? "
                      "AND revoked_at IS NULL", (_digest(token),)).fetchone()
    return None if row is None else row[0]


def tokens_in_use(con: apsw.Connection) -> bool:
    """Whether any per-user token is active: then every request must carry a token."""
    return con.execute(
        "SELECT EXISTS (SELECT 1 FROM access_tokens WHERE revoked_at IS NULL)").fetchone()[0] == 1
