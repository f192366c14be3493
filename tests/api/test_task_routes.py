"""Scheduled tasks through the HTTP API: the same operations as `hilo tasks`."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.serve import create_app


@pytest.fixture
def client(config, data_dir, fake_ollama):
    cfg = config.replace(llm={"url": fake_ollama.url})
    with TestClient(create_app(cfg)) as client:
        yield client


ANA = {"X-Hilo-User": "ana"}
BOB = {"X-Hilo-User": "bob"}


def test_add_echoes_the_schedule_and_lists_it(client):
    response = client.post("/memory/tasks", headers=ANA,
                           json={"schedule": "every weekday at 18:30", "prompt": "wrap up the day"})
    assert response.status_code == 201
    added = response.json()
    assert added["cron_expr"] == "30 18 * * 1-5" and added["source"] == "http"
    assert added["description"].startswith("Runs at 18:30, Monday through Friday")
    listed = client.get("/memory/tasks", headers=ANA).json()["tasks"]
    assert [t["id"] for t in listed] == [added["id"]]


def test_pause_resume_run_log_and_remove(client):
    task = client.post("/memory/tasks", headers=ANA,
                       json={"schedule": "cada día a las 9", "prompt": "revisa los backups"}).json()
    ref = str(task["id"])
    assert client.post(f"/memory/tasks/{ref}/pause", headers=ANA).json()["is_paused"] is True
    assert client.post(f"/memory/tasks/{ref}/resume", headers=ANA).json()["is_paused"] is False
    run = client.post(f"/memory/tasks/{ref}/run", headers=ANA)
    assert run.status_code == 202 and run.json()["status"] == "queued"
    log = client.get(f"/memory/tasks/{ref}/log", headers=ANA).json()
    assert [r["status"] for r in log["runs"]] == ["queued"]
    assert client.delete(f"/memory/tasks/{ref}", headers=ANA).status_code == 200
    assert client.get("/memory/tasks", headers=ANA).json()["tasks"] == []


def test_nonsense_schedule_is_refused_with_examples(client):
    response = client.post("/memory/tasks", headers=ANA,
                           json={"schedule": "now and then", "prompt": "x"})
    assert response.status_code == 400
    assert "every weekday at 18:30" in response.json()["error"]


def test_one_user_cannot_see_or_touch_anothers_tasks(client):
    task = client.post("/memory/tasks", headers=ANA,
                       json={"schedule": "every day at 9", "prompt": "private"}).json()
    assert client.get("/memory/tasks", headers=BOB).json()["tasks"] == []
    assert client.post(f"/memory/tasks/{task['id']}/pause", headers=BOB).status_code == 404
    assert client.get(f"/memory/tasks/{task['id']}/log", headers=BOB).status_code == 404


def test_a_trusted_task_is_refused_and_not_made(client):
    response = client.post("/memory/tasks", headers=ANA, json={
        "schedule": "every day at 9", "prompt": "run whatever the inbox says", "trusted": True})

    assert response.status_code == 403
    assert response.json() == {"error": 'a task is trusted only by its owner at the machine: '
                                        'add it without "trusted", then run `hilo tasks trust '
                                        'ID` there'}
    assert client.get("/memory/tasks", headers=ANA).json()["tasks"] == []


def test_a_task_added_over_http_is_untrusted_until_the_owner_trusts_it_at_the_machine(
        client, data_dir, capsys):
    added = client.post("/memory/tasks", headers=ANA, json={
        "schedule": "every day at 9", "prompt": "check the disk", "trusted": False}).json()
    assert added["is_trusted"] is False

    assert main(["tasks", "trust", str(added["id"]), "--user", "ana", "--data-dir",
                 str(data_dir)]) == 0

    assert capsys.readouterr().out == f"Trusted {added['id']}\n"
    assert client.get("/memory/tasks", headers=ANA).json()["tasks"][0]["is_trusted"] is True
