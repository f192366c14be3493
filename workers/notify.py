"""Telling the person a scheduled task ran: the webhook and the desktop notification.

The worker's scheduler tick (workers/scheduler.py) hands each run that ended to
`deliver_run`. `hilo chat` shows the same runs itself, from the database
(app/tasks/delivery.py: take_undelivered); this module covers the person who is not
at a chat:

- `[notify] webhook_url`: POSTed in the shape `webhook_kind` names — "ntfy" (the reply
  as the body, the task's name as the Title header), "slack" (Slack-compatible
  incoming webhooks: {"text": ...}) or "json" (the run as an object). Tried
  `webhook_attempts` times with a growing pause; when every attempt fails, the reason
  is logged and kept on the run for `hilo tasks log`.
- `[notify] desktop`: `notify-send` when it is on PATH; skipped quietly otherwise, or
  when it cannot reach a desktop (a worker on a server).

Neither ever fails the run: it has ended, and its reply is stored whatever happens here.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx

from app.config import Config, NotifyConfig
from app.errors import Unavailable
from app.learn.reading import reading
from app.log import get_logger
from app.tasks.delivery import RunReport, record_notification, run_report
from app.tasks.runs import TaskRunResult
from app.writer import Writer

__all__ = ["log", "DESKTOP_COMMAND", "BACKOFF_SECONDS", "DESKTOP_TIMEOUT_SECONDS",
           "MAX_BODY_CHARS", "USER_AGENT", "NotifyFailed", "Notification", "notification",
           "webhook_request", "post_webhook", "show_desktop", "deliver_run", "shown_url",
           "reply_channels"]

log = get_logger(__name__)

DESKTOP_COMMAND = "notify-send"
# The pause before webhook attempt n + 1 is BACKOFF_SECONDS * 2 ** (n - 1).
BACKOFF_SECONDS = 1.0
DESKTOP_TIMEOUT_SECONDS = 5.0
# A notification is a glance: longer replies are cut (the whole one is in `hilo chat`
# and `hilo tasks log`).
MAX_BODY_CHARS = 2000
USER_AGENT = "hilo"


class NotifyFailed(Unavailable):
    """The webhook did not take the notification after its attempts; str() says why."""

    code = "notify_failed"


@dataclass(frozen=True)
class Notification:
    title: str
    body: str
    report: RunReport


def notification(report: RunReport) -> Notification:
    body = report.text
    if len(body) > MAX_BODY_CHARS:
        body = body[: MAX_BODY_CHARS - 1] + "…"
    return Notification(f"Hilo: {report.name}", body, report)


def webhook_request(settings: NotifyConfig, note: Notification) -> dict:
    """The keyword arguments of the POST for `webhook_kind`."""
    headers = {"User-Agent": USER_AGENT}
    if settings.webhook_kind == "ntfy":
        # ntfy reads headers as latin-1: a title it cannot carry goes in the body instead.
        try:
            note.title.encode("latin-1")
            headers["Title"] = note.title
            content = note.body
        except UnicodeEncodeError:
            content = f"{note.title}\n{note.body}"
        headers["Tags"] = "alarm_clock" if note.report.status == "done" else "warning"
        return {"content": content.encode("utf-8"), "headers": headers}
    if settings.webhook_kind == "slack":
        return {"json": {"text": f"*{note.title}*\n{note.body}"}, "headers": headers}
    return {"json": {"title": note.title, "text": note.body, **note.report.to_json()},
            "headers": headers}


def post_webhook(settings: NotifyConfig, note: Notification, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """POST the notification, retrying; raises NotifyFailed with the last attempt's reason."""
    request = webhook_request(settings, note)
    error = ""
    for attempt in range(1, settings.webhook_attempts + 1):
        if attempt > 1:
            sleep(BACKOFF_SECONDS * 2 ** (attempt - 2))
        try:
            response = httpx.post(settings.webhook_url, timeout=settings.webhook_timeout_seconds,
                                  **request)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            continue
        if response.is_success:
            return
        error = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
        if response.status_code < 500 and response.status_code not in (408, 429):
            break  # the request itself is wrong (URL, token): another try would not help
    raise NotifyFailed(f"webhook {settings.webhook_kind} {shown_url(settings.webhook_url)} "
                       f"failed after {attempt} attempt{'s' if attempt != 1 else ''}: {error}")


def show_desktop(note: Notification) -> bool:
    """A desktop notification through notify-send; False (quietly) when there is none."""
    command = shutil.which(DESKTOP_COMMAND)
    if command is None:
        return False
    try:
        done = subprocess.run([command, "--app-name=Hilo", note.title, note.body],
                              capture_output=True, timeout=DESKTOP_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("notify.desktop_unavailable", error=str(exc))
        return False
    if done.returncode != 0:  # no desktop session to show it in: nothing to tell anyone
        log.debug("notify.desktop_unavailable", returncode=done.returncode,
                  stderr=done.stderr.decode("utf-8", "replace")[:200])
        return False
    return True


def deliver_run(config: Config, writer: Writer, result: TaskRunResult, *,
                now: datetime | None = None,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """Send one ended run to the webhook and the desktop, as configured; record how the
    webhook went on the run. Never raises for a delivery that failed."""
    settings = config.notify
    if not settings.webhook_url and not settings.desktop:
        return
    with reading(writer) as con:
        report = run_report(con, result.run_id)
    if report is None:
        return
    note = notification(report)
    bound = log.bind(task_id=report.task_id, run_id=report.run_id)
    if settings.webhook_url:
        error = None
        try:
            post_webhook(settings, note, sleep=sleep)
        except NotifyFailed as exc:
            error = str(exc)
            bound.warning("notify.webhook_failed", error=error)
        record_notification(writer, report.run_id, now or datetime.now(UTC),
                            error=error)
    if settings.desktop:
        show_desktop(note)


def shown_url(url: str) -> str:
    """The URL without its path, which may hold a secret (a Slack token, an ntfy topic)."""
    split = urlsplit(url)
    return f"{split.scheme}://{split.netloc}/…" if split.path.strip("/") else url


def reply_channels(config: Config) -> list[str]:
    """Where a task's replies go, in words, for `hilo tasks add`."""
    channels = ["hilo chat"]
    settings = config.notify
    if settings.webhook_url:
        channels.append(f"webhook {settings.webhook_kind} {shown_url(settings.webhook_url)}")
    if settings.desktop and shutil.which(DESKTOP_COMMAND):
        channels.append("desktop notification")
    return channels
