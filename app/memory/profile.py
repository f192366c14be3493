"""Layer 3, the profile: permanent attributes of the user, one value per key.

A key the user deleted is tombstoned (deleted_at) and no worker or import re-creates
it; only the user setting it again brings it back.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.memory.provenance import WriteAction, log_change, log_deletions, said_at, said_earlier
from app.memory.validation import check_entry, same_value
from app.timeutil import utc_now

__all__ = ["KEY_CHARS", "VALUE_CHARS", "ProfileEntry", "set_profile", "delete_profile",
           "import_profile", "clear_agent_profile", "list_profile", "profile_as_of"]

KEY_CHARS = 100
VALUE_CHARS = 2000


@dataclass(frozen=True)
class ProfileEntry:
    key: str
    value: str
    source: str
    updated_at: str
    source_event_id: int | None = None
    from_outside: bool = False  # learned from, or written while reading, outside content


def set_profile(
    con: apsw.Connection,
    user_id: str,
    key: str,
    value: str,
    *,
    source: str,
    worker: str,
    source_event_id: int | None = None,
    from_outside: bool = True,
) -> WriteAction:
    """Upsert one profile key. A key the user deleted is not re-created by a worker, nor
    its value replaced by a worker's statement said before it (an older chunk learned
    after a newer turn).
    `from_outside` (app.memory.provenance.is_outside; unstated: outside): the value is
    content from outside (kept as it is for an unchanged value only if every statement of
    it did)."""
    key, value = check_entry(key, value, KEY_CHARS, VALUE_CHARS)
    now = utc_now()
    row = con.execute(
        "SELECT value, deleted_at, source_event_id, updated_at FROM profile "
        "WHERE user_id = ? AND key = ?", (user_id, key)
    ).fetchone()
    if row is None:
        con.execute(
            "INSERT INTO profile (user_id, key, value, source, source_event_id, created_at, "
            "updated_at, from_outside) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, key, value, source, source_event_id, now, now, int(from_outside)),
        )
        log_change(con, user_id, "profile", key, "insert", None, value, worker=worker,
                   created_at=now, source_event_id=source_event_id)
        return "insert"
    old_value, deleted_at, old_source_event_id, old_updated_at = row
    if deleted_at is not None and source != "user":
        return "tombstoned"
    if deleted_at is None and same_value(old_value, value):
        if not from_outside:
            con.execute("UPDATE profile SET from_outside = 0 WHERE user_id = ? AND key = ?",
                        (user_id, key))
        return "unchanged"
    if (deleted_at is None and source != "user" and said_earlier(
            con, source_event_id, said_at(con, old_source_event_id, old_updated_at))):
        return "unchanged"  # said before the value the key holds: that one stays
    con.execute(
        "UPDATE profile SET value = ?, source = ?, source_event_id = ?, updated_at = ?, "
        "deleted_at = NULL, from_outside = ? WHERE user_id = ? AND key = ?",
        (value, source, source_event_id, now, int(from_outside), user_id, key),
    )
    action = "restore" if deleted_at is not None else "update"
    log_change(con, user_id, "profile", key, action, None if deleted_at else old_value, value,
               worker=worker, created_at=now, source_event_id=source_event_id)
    return "update"


def delete_profile(con: apsw.Connection, user_id: str, key: str, *, worker: str = "user") -> bool:
    """Tombstone a profile key; returns False when there was nothing to delete."""
    key = key.strip().casefold()
    now = utc_now()
    row = con.execute(
        "SELECT value FROM profile WHERE user_id = ? AND key = ? AND deleted_at IS NULL",
        (user_id, key),
    ).fetchone()
    if row is None:
        return False
    _tombstone(con, user_id, key, row[0], worker=worker, when=now)
    return True


def _tombstone(con: apsw.Connection, user_id: str, key: str, old_value: str, *, worker: str,
               when: str) -> None:
    con.execute("UPDATE profile SET deleted_at = ?, updated_at = ? WHERE user_id = ? AND key = ?",
                (when, when, user_id, key))
    log_change(con, user_id, "profile", key, "delete", old_value, None, worker=worker,
               created_at=when)


def import_profile(
    con: apsw.Connection,
    user_id: str,
    key: str,
    value: str,
    *,
    source: str,
    source_event_id: int | None,
    created_at: str,
    updated_at: str,
    deleted_at: str | None,
    worker: str,
) -> WriteAction:
    """Merge a key from another memory, its dates kept: the newer value (or deletion) wins.
    What an import brings is from outside.

    A key the user deleted here stays deleted. `key` and `value` arrive cleaned; the
    log is dated when the change happened, not when it was imported.
    """
    row = con.execute("SELECT value, updated_at, deleted_at FROM profile WHERE user_id = ? "
                      "AND key = ?", (user_id, key)).fetchone()
    if row is None:
        con.execute("INSERT INTO profile (user_id, key, value, source, source_event_id, "
                    "created_at, updated_at, deleted_at, from_outside) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    (user_id, key, value, source, source_event_id, created_at, updated_at,
                     deleted_at))
        log_change(con, user_id, "profile", key, "insert", None, value, worker=worker,
                   created_at=updated_at)
        if deleted_at:
            log_change(con, user_id, "profile", key, "delete", value, None, worker=worker,
                       created_at=deleted_at)
        return "insert"
    old_value, old_updated, old_deleted = row
    if old_deleted is not None:
        return "tombstoned"  # the user deleted it here; an import never brings it back
    if deleted_at is not None:
        if deleted_at < old_updated:
            return "unchanged"
        _tombstone(con, user_id, key, old_value, worker=worker, when=deleted_at)
        return "update"
    if same_value(old_value, value) or updated_at < old_updated:
        return "unchanged"  # same, or the value here is newer
    con.execute("UPDATE profile SET value = ?, source = ?, source_event_id = ?, updated_at = ?, "
                "from_outside = 1 WHERE user_id = ? AND key = ?",
                (value, source, source_event_id, updated_at, user_id, key))
    log_change(con, user_id, "profile", key, "update", old_value, value, worker=worker,
               created_at=updated_at)
    return "update"


def clear_agent_profile(con: apsw.Connection, *, worker: str) -> int:
    """Delete every user's agent-derived keys (rebuild); the user's keys and tombstones stay."""
    log_deletions(con, "SELECT user_id, 'profile' AS kind, key AS owner_id, value AS old_value "
                  "FROM profile WHERE source = 'agent' AND deleted_at IS NULL",
                  worker=worker, created_at=utc_now())
    con.execute("DELETE FROM profile WHERE source = 'agent' AND deleted_at IS NULL")
    return con.changes()


def list_profile(con: apsw.Connection, user_id: str) -> list[ProfileEntry]:
    return [
        ProfileEntry(*row[:5], from_outside=bool(row[5]))
        for row in con.execute(
            "SELECT key, value, source, updated_at, source_event_id, from_outside "
            "FROM profile WHERE user_id = ? AND deleted_at IS NULL ORDER BY key",
            (user_id,),
        )
    ]


def profile_as_of(con: apsw.Connection, user_id: str, when: str) -> dict[str, str]:
    """What the profile said at time `when` (RFC 3339), replayed from memory_log."""
    state: dict[str, str] = {}
    for key, action, new_value in con.execute(
        "SELECT owner_id, action, new_value FROM memory_log WHERE user_id = ? AND "
        "owner_kind = 'profile' AND created_at <= ? ORDER BY id",
        (user_id, when),
    ):
        if action == "delete":
            state.pop(key, None)
        else:
            state[key] = new_value
    return dict(sorted(state.items()))
