"""`hilo token`: a per-user token made on the command line lets `hilo serve` answer as
that user only, and a revoked one is refused."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from app.cli import main
from app.serve import create_app


def run(capsys, *argv: str) -> tuple[int, dict]:
    status = main(list(argv))
    return status, json.loads(capsys.readouterr().out)


def test_a_token_made_by_hilo_token_add_acts_as_its_user_until_revoked(config, data_dir,
                                                                        fake_ollama, capsys):
    status, issued = run(capsys, "token", "add", "ana", "--name", "laptop", "--json",
                         "--data-dir", str(data_dir))
    assert status == 0 and issued["token"].startswith("hilo_") and issued["user_id"] == "ana"
    status, listed = run(capsys, "token", "list", "--json", "--data-dir", str(data_dir))
    assert [t["name"] for t in listed["tokens"]] == ["laptop"]
    assert issued["token"] not in json.dumps(listed)  # never shown again

    config = config.replace(llm={"url": fake_ollama.url})
    with TestClient(create_app(config), base_url="http://localhost") as client:
        bearer = {"Authorization": f"Bearer {issued['token']}"}
        assert client.get("/memory/profile", headers=bearer).status_code == 200
        other = client.get("/memory/profile", headers={**bearer, "X-Hilo-User": "bob"})
        assert other.status_code == 403
        # With another user's token still in use, a revoked one opens nothing.
        run(capsys, "token", "add", "bob", "--json", "--data-dir", str(data_dir))
        run(capsys, "token", "revoke", str(issued["id"]), "--json", "--data-dir", str(data_dir))
        assert client.get("/memory/profile", headers=bearer).status_code == 401


def test_once_a_token_exists_a_request_without_one_gets_a_401_that_says_why(
        config, data_dir, fake_ollama, capsys):
    assert main(["token", "add", "ana", "--data-dir", str(data_dir)]) == 0
    said = capsys.readouterr().out
    assert "From now on `hilo serve` answers only requests that carry a token" in said
    config = config.replace(llm={"url": fake_ollama.url})
    with TestClient(create_app(config), base_url="http://localhost") as client:
        assert client.get("/health").status_code == 200
        for path in ("/", "/api/tags", "/docs"):
            refused = client.get(path)
            assert refused.status_code == 401, path
            assert ("per-user tokens exist (`hilo token list`), so every request but /health "
                    "needs one: send the header `Authorization: Bearer <token>`") in refused.text
