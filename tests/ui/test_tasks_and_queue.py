"""Scheduled tasks and the job queue on the memory page: what runs when, what it did,
and the same steering as `hilo tasks` and `hilo queue`."""

from __future__ import annotations

from huey.utils import Error

from tests.api.support import HiloServer
from tests.ui.support import browser, follow, submit, text
from workers import jobs as queue_jobs
from workers.hooks import describe_failure
from workers.queue import huey


def add_task(hilo: HiloServer, schedule: str, prompt: str) -> dict:
    added = hilo.client().post("/memory/tasks", json={"schedule": schedule, "prompt": prompt})
    assert added.status_code == 201, added.text
    return added.json()


def tasks(hilo: HiloServer) -> list[dict]:
    return hilo.client().get("/memory/tasks").json()["tasks"]


def test_a_task_shows_its_schedule_next_run_and_how_to_trust_it(hilo: HiloServer) -> None:
    task = add_task(hilo, "every weekday at 9", "summarise my unread mail")

    shown = text(browser(hilo).get("/ui/tasks"))

    assert f"#{task['id']} " in shown and "summarise my unread mail" in shown
    assert "Runs at 09:00, Monday through Friday" in shown
    assert f"Next run: {task['next_run_at'][:10]}" in shown
    assert f"hilo tasks trust {task['id']}" in shown  # a command, not a button
    assert "/trust" not in browser(hilo).get("/ui/tasks").text


def test_a_task_says_who_added_it(hilo: HiloServer) -> None:
    from app.tasks.store import add_task as add_at_the_machine

    add_task(hilo, "every day at 8", "check the backups")
    add_at_the_machine(hilo.app.state.service.writer, hilo.config, "every day at 9",
                       "water the plants", source="cli", from_outside=False)

    shown = text(browser(hilo).get("/ui/tasks"))

    assert "added over HTTP (the API or the memory page)" in shown
    assert "added at this machine (hilo tasks add)" in shown
    assert "added by tool" not in shown


def test_a_task_is_paused_run_and_removed_from_the_page(hilo: HiloServer) -> None:
    task = add_task(hilo, "every day at 8", "check the backups")
    page = browser(hilo)

    paused = follow(page, submit(page, f"/ui/tasks/{task['id']}/pause"))
    assert f"Paused #{task['id']}" in text(paused) and tasks(hilo)[0]["is_paused"] is True
    resumed = follow(page, submit(page, f"/ui/tasks/{task['id']}/resume"))
    assert f"Resumed #{task['id']}" in text(resumed) and tasks(hilo)[0]["is_paused"] is False

    ran = follow(page, submit(page, f"/ui/tasks/{task['id']}/run"))
    assert f"Task #{task['id']} will run now" in text(ran)
    assert "manual for" in text(ran) and "queued" in text(ran)

    removed = follow(page, submit(page, f"/ui/tasks/{task['id']}/remove"))
    assert f"Removed #{task['id']}" in text(removed) and tasks(hilo) == []
    missing = submit(page, f"/ui/tasks/{task['id']}/pause")
    assert missing.status_code == 404


def failed_job(user: str, session: str) -> str:
    """A diary job that failed, as a worker records it."""
    task = queue_jobs.diary.s(user, session)
    huey.put(task.id, Error(describe_failure(task, {"error": "RuntimeError('disk on fire')",
                                                    "traceback": "Traceback ..."})))
    return task.id


def test_the_queue_shows_pending_and_failed_jobs_and_retries_one(hilo: HiloServer) -> None:
    queue_jobs.distill("default", "s1", [1, 2])
    failed = failed_job("default", "s2")
    page = browser(hilo)

    shown = text(page.get("/ui/queue"))

    assert "Pending (1)" in shown and "distill" in shown
    assert "Failed (1)" in shown and "RuntimeError('" not in shown
    assert "an unexpected RuntimeError: disk on fire" in shown  # a record of before: a sentence
    assert "learn facts from 2 messages of session s1, for default" in shown
    assert "write the diary entry of session s2, for default" in shown
    assert "No worker is running" in shown

    retried = follow(page, submit(page, f"/ui/queue/{failed}/retry"))

    assert "Retrying diary: queued again as" in text(retried)
    assert "Failed (0)" in text(retried) and "Pending (2)" in text(retried)


def test_a_person_sees_and_retries_only_their_own_jobs(hilo: HiloServer) -> None:
    from app.access import issue_token

    writer = hilo.app.state.service.writer
    alice, bob = issue_token(writer, "alice").token, issue_token(writer, "bob").token
    alices_job = failed_job("alice", "alice-diary")
    bobs_page = browser(hilo)
    submit(bobs_page, "/ui/login", {"token": bob})
    alices_page = browser(hilo)
    submit(alices_page, "/ui/login", {"token": alice})

    assert "alice-diary" in text(alices_page.get("/ui/queue"))
    assert "alice-diary" not in bobs_page.get("/ui/queue").text
    refused = follow(bobs_page, submit(bobs_page, f"/ui/queue/{alices_job}/retry"))
    assert f"No failed job {alices_job} of yours to retry" in text(refused)
    assert "Failed (1)" in text(alices_page.get("/ui/queue"))
