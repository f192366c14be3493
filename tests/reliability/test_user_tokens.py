"""Per-user tokens: the user comes from the token, so holding one reads one user's memory.
The shared `[server] token` keeps working for single-user setups."""

from __future__ import annotations

import httpx
import pytest

from app.access import AccessError, issue_token, list_tokens, revoke_token, token_user
from app.datadir import DataDir
from app.db import MIGRATIONS_TABLE, connect, connect_readonly, migrate
from tests.api.support import HiloServer, serve

SHARED = "shared-secret-token"


def as_bearer(server: HiloServer, token: str, **headers: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30,
                        headers={"Authorization": f"Bearer {token}", **headers})


@pytest.fixture
def two_users(hilo: HiloServer) -> tuple[HiloServer, str, str]:
    """Ana and Bob each with a fact and a token of their own."""
    for user, city in (("ana", "Madrid"), ("bob", "Lima")):
        assert hilo.client(user=user).post(
            "/memory/facts", json={"key": "city", "value": city}).status_code == 201
    writer = hilo.app.state.service.writer
    return hilo, issue_token(writer, "ana", "laptop").token, issue_token(writer, "bob").token


def test_a_per_user_token_reads_its_users_memory(two_users) -> None:
    server, ana, bob = two_users

    facts = as_bearer(server, ana).get("/memory/facts").json()["facts"]

    assert [f["value"] for f in facts] == ["Madrid"]
    assert [f["value"] for f in as_bearer(server, bob).get("/memory/facts").json()["facts"]] == ["Lima"]


def test_a_per_user_token_cannot_read_another_user_by_naming_them(two_users) -> None:
    server, ana, _ = two_users

    response = as_bearer(server, ana, **{"X-Hilo-User": "bob"}).get("/memory/facts")

    assert response.status_code == 403
    assert "Lima" not in response.text
    assert "cannot act as another user" in response.json()["error"]


def test_naming_its_own_user_is_fine(two_users) -> None:
    server, ana, _ = two_users

    assert as_bearer(server, ana, **{"X-Hilo-User": "ana"}).get("/memory/facts").status_code == 200


def test_once_per_user_tokens_exist_a_request_without_one_is_refused(two_users) -> None:
    server, _, _ = two_users

    response = httpx.get(f"{server.url}/memory/facts", headers={"X-Hilo-User": "bob"})

    assert response.status_code == 401
    assert "Lima" not in response.text
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_a_wrong_token_is_refused(two_users) -> None:
    server, ana, _ = two_users

    assert as_bearer(server, ana[:-1] + "x").get("/memory/facts").status_code == 401


def test_a_revoked_token_is_refused_at_once(two_users) -> None:
    server, ana, _ = two_users
    writer = server.app.state.service.writer
    record = next(t for t in list_tokens(server.app.state.service.reader(), "ana"))

    revoked = revoke_token(writer, record.id)

    assert revoked.revoked_at is not None
    assert as_bearer(server, ana).get("/memory/facts").status_code == 401


def test_chat_with_a_per_user_token_is_stored_as_that_user(two_users) -> None:
    server, ana, _ = two_users

    reply = as_bearer(server, ana, **{"X-Hilo-Session": "s1"}).post("/api/chat", json={
        "model": "gemma3:4b", "stream": False, "messages": [{"role": "user", "content": "hola"}]})

    assert reply.status_code == 200
    events = as_bearer(server, ana).get("/memory/sessions/s1/events").json()["events"]
    assert [(e["role"], e["content"]) for e in events] == [("user", "hola"), ("assistant", "ok: hola")]


def test_the_shared_token_still_lets_the_header_choose_the_user(config, data_dir, fake_ollama) -> None:
    for server in serve(config.replace(server={"token": SHARED}), fake_ollama):
        writer = server.app.state.service.writer
        issue_token(writer, "ana")
        as_bob = as_bearer(server, SHARED, **{"X-Hilo-User": "bob"})
        assert as_bob.post("/memory/facts", json={"key": "city", "value": "Lima"}).status_code == 201
        assert [f["value"] for f in as_bob.get("/memory/facts").json()["facts"]] == ["Lima"]


def test_a_token_is_stored_hashed_and_listed_by_its_prefix(config, writer) -> None:
    issued = issue_token(writer, "ana", "phone")

    con = connect_readonly(DataDir.of(config).memory_db)
    assert issued.token.startswith("hilo_") and len(issued.token) > 40
    assert issued.token.encode() not in DataDir.of(config).memory_db.read_bytes()
    assert all(issued.token not in str(row) for row in con.execute("SELECT * FROM access_tokens"))
    [listed] = list_tokens(con)
    assert (listed.user_id, listed.name, listed.prefix) == ("ana", "phone", issued.token[:11])
    assert token_user(con, issued.token) == "ana"
    assert token_user(con, "hilo_" + "x" * 43) is None


def test_revoking_by_prefix_and_unknown_tokens(config, writer) -> None:
    issued = issue_token(writer, "ana")

    assert revoke_token(writer, issued.record.prefix).id == issued.record.id
    with pytest.raises(AccessError, match="no token 'hilo_nope'"):
        revoke_token(writer, "hilo_nope")
    con = connect_readonly(DataDir.of(config).memory_db)
    assert list_tokens(con) == []
    assert len(list_tokens(con, include_revoked=True)) == 1


@pytest.mark.parametrize("user", ["", "a" * 300, "ana\x00", "sk_live_" + "a1b2c3d4e5" * 3])
def test_a_token_for_a_bad_user_id_is_refused(writer, user: str) -> None:
    with pytest.raises(AccessError):
        issue_token(writer, user)


def test_a_database_migrated_past_the_tokens_number_still_gets_their_table(config, data_dir) -> None:
    # Migrations are applied by name, so one numbered below the newest applied (a gap
    # filled by a later release) is applied on the next start.
    con = connect(DataDir.of(config).memory_db)
    migrate(con)
    con.execute("DROP TABLE access_tokens")
    con.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = '0006_access_tokens.sql'")

    assert migrate(con) == ["0006_access_tokens.sql"]
    assert list_tokens(con) == []
