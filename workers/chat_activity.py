"""The user first: a front-end's requests to the model server, and the workers' model
jobs waiting for them.

On a CPU a local model serves one request at a time, and the person at the keyboard
waits behind whatever came first; a background call also replaces what the model's
prompt cache holds. So a job that needs the model never starts while a front-end has a
request in flight on the same model server, and waits until that server has served
none for `[queue] chat_idle_seconds` (someone reading the reply and typing the next
message) — unless its work has already waited `[queue] max_defer_seconds`, when it runs
between two requests.

- `ChatActivity`, the front-end's side (app.model.transport.ModelActivity): each request
  that makes the model work — a chat turn, the query's embedding, a relayed completion —
  counts as in flight while it runs. The count and the time it last changed go to the
  queue's key-value store under `hilo.chat.<server>.<process>`, where a worker on this host
  or another (Redis) reads them: one small write when a request starts, one when it ends.
  Each start also stamps `hilo.chat-began.<server>`: a background call already running
  reads that one key every few milliseconds and gives way (`chat_began_after`).
- `chat_deferral`, the workers' side: whether a job should wait, why, and until when.
- `ChatActivity.served` / `last_chat`: the last chat request the server answered and its
  reply (every string redacted, tool calls' arguments too, under `hilo.prompt.<server>`):
  the model's prompt cache holds it, so a learning call that starts with it reads only
  its own instructions anew, and the person's next message finds the cache still warm
  (ModelClient.continue_json).

A process that is gone (workers/locks.py) has nothing in flight. The markers are hints
like the queue: lost ones only mean a job runs sooner.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.config import Config
from app.log import get_logger
from workers.locks import LockOwner, owner_alive, this_process

if TYPE_CHECKING:
    from app.model.replies import SentChat

__all__ = ["log", "ACTIVITY_PREFIX", "CHAT_BEGAN_PREFIX", "LAST_CHAT_PREFIX", "MAX_KEPT_CHARS",
           "REMOTE_IN_FLIGHT_SECONDS", "server_id", "ChatActivity", "LastChat", "last_chat",
           "forget_last_chat", "chat_to_continue", "keep_alive_seconds", "ServerActivity",
           "read_activity", "Deferral", "chat_deferral", "chat_began_after", "activity_is_stale"]

log = get_logger(__name__)

ACTIVITY_PREFIX = "hilo.chat."
# When a front-end last started a request to a server: one key a running background call
# can read many times a second, to give way within a few milliseconds of the person.
CHAT_BEGAN_PREFIX = "hilo.chat-began."
LAST_CHAT_PREFIX = "hilo.prompt."
# A chat bigger than this is not kept for the workers to continue (images, huge pastes).
MAX_KEPT_CHARS = 400_000
# A marker from another host (no pid to check) in flight for longer than this is stale.
REMOTE_IN_FLIGHT_SECONDS = 15 * 60.0


def server_id(url: str) -> str:
    """A short stable name for a model server URL, for storage keys."""
    return hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]


class ChatActivity:
    """This process's requests to one model server, where the workers read them."""

    def __init__(self, queue: Any, url: str) -> None:
        self.queue = queue
        self.url = url.rstrip("/")
        self.key = f"{ACTIVITY_PREFIX}{server_id(self.url)}.{this_process().key}"
        self._in_flight = 0
        self._lock = threading.Lock()
        self._warned = False

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._write()
            self._put(CHAT_BEGAN_PREFIX + server_id(self.url), time.time())

    def end(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            self._write()

    def served(self, user_id: str, session_id: str, sent: SentChat) -> None:
        """Keep the chat the server just answered, for the workers to continue."""
        kept = _sanitised(sent)
        if kept is None:
            return
        value = {"user_id": user_id, "session_id": session_id, "path": kept.path,
                 "body": dict(kept.body), "reply": kept.reply, "at": time.time()}
        try:
            self.queue.put(LAST_CHAT_PREFIX + server_id(self.url), value)
        except Exception as exc:  # noqa: BLE001 — the workers then ask without the cache
            log.warning("chat_activity.unrecorded", error=str(exc))

    def _write(self) -> None:
        self._put(self.key, {"url": self.url, "in_flight": self._in_flight,
                             "owner": this_process().to_value(time.time()), "at": time.time()})

    def _put(self, key: str, value: Any) -> None:
        try:
            self.queue.put(key, value)
        except Exception as exc:  # noqa: BLE001 — the chat goes on; the worker may then not wait for it
            if not self._warned:
                self._warned = True
                log.warning("chat_activity.unrecorded", error=str(exc),
                            note="background model jobs may not wait for this chat")


def _sanitised(sent: SentChat) -> SentChat | None:
    """The exchange with secrets redacted, as everything Hilo stores; None for one that
    cannot be kept as text (images, content parts, a huge body)."""
    # start-up: the chat formats and redaction load when a front-end first keeps a chat;
    # `hilo queue status`, which reads the markers only, never needs them
    from app.model.replies import SentChat
    from app.sanitize import redact_json, redact_secrets

    for message in sent.body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or message.get("images"):
            return None
    text = json.dumps(sent.body, default=str)
    if len(text) > MAX_KEPT_CHARS:
        return None
    # The whole request: tool calls' arguments hold secrets as often as messages do.
    body = redact_json(json.loads(text))
    return SentChat(sent.path, body, redact_secrets(sent.reply).text)


@dataclass(frozen=True)
class LastChat:
    """The chat a model server answered last: whose, what, and when (Unix time)."""

    user_id: str
    session_id: str
    sent: SentChat
    at: float


def last_chat(queue: Any, url: str) -> LastChat | None:
    from app.model.replies import SentChat  # start-up: see _sanitised

    try:
        value = queue.get(LAST_CHAT_PREFIX + server_id(url), peek=True)
        return LastChat(value["user_id"], value["session_id"],
                        SentChat(value["path"], value["body"], value["reply"]), float(value["at"]))
    except Exception:  # noqa: BLE001 — none kept, or not readable: ask without it
        return None


def forget_last_chat(queue: Any, url: str | None) -> None:
    """The server is about to read another prompt: its cache will not hold the last chat."""
    if url is None:
        return
    try:
        queue.delete(LAST_CHAT_PREFIX + server_id(url))
    except Exception:  # noqa: BLE001, S110 — a later learning call only reads more than it needed to
        pass


def chat_to_continue(queue: Any, config: Config, url: str | None, user_id: str,
                     session_id: str, now: float | None = None) -> SentChat | None:
    """The session's chat the server answered last, if its cache may still hold it: it
    was this session's, on the workers' model, and the model has not been unloaded since
    (keep_alive)."""
    last = None if url is None else last_chat(queue, url)
    if last is None or (last.user_id, last.session_id) != (user_id, session_id):
        return None
    if _full_name(str(last.sent.body.get("model") or "")) != _full_name(config.llm.distill_model):
        return None
    keep_alive = last.sent.body.get("keep_alive", config.llm.keep_alive)
    now = time.time() if now is None else now
    return last.sent if now - last.at < keep_alive_seconds(keep_alive) else None


def _full_name(model: str) -> str:
    return model if ":" in model else f"{model}:latest"


_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6,
                   "μs": 1e-6, "ns": 1e-9}


def keep_alive_seconds(value: Any) -> float:
    """Ollama's keep_alive in seconds: a number, or a Go duration ("5m", "1h30m"); a
    negative one keeps the model loaded for ever. Unreadable: 0 (assume unloaded)."""
    if isinstance(value, (int, float)):
        return float("inf") if value < 0 else float(value)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        return keep_alive_seconds(int(text))
    parts = re.findall(r"(\d+(?:\.\d*)?)(ms|us|µs|μs|ns|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.lstrip("+-"):
        return 0.0
    seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    return float("inf") if text.startswith("-") else seconds


@dataclass(frozen=True)
class ServerActivity:
    """What the front-ends report of one model server."""

    in_flight: int  # requests running now, in live processes
    last_at: float | None  # when one last started or ended (Unix time); None: never


def read_activity(queue: Any, url: str, now: float | None = None) -> ServerActivity:
    now = time.time() if now is None else now
    prefix = f"{ACTIVITY_PREFIX}{server_id(url)}."
    in_flight, last_at = 0, None
    for key, raw in queue.all_results().items():
        if not key.startswith(prefix):
            continue
        try:
            value = queue.serializer.deserialize(raw)
        except Exception:  # noqa: BLE001, S112 — not ours to judge
            continue
        if not isinstance(value, dict) or not isinstance(value.get("at"), (int, float)):
            continue
        at = float(value["at"])
        last_at = at if last_at is None else max(last_at, at)
        if value.get("in_flight") and _running(value, at, now):
            in_flight += int(value["in_flight"])
    return ServerActivity(in_flight, last_at)


def _running(value: dict, at: float, now: float) -> bool:
    owner = LockOwner.from_value(value.get("owner"))
    if owner is None:
        return False
    if owner.host == socket.gethostname():
        return owner_alive(owner, None)
    return now - at < REMOTE_IN_FLIGHT_SECONDS


@dataclass(frozen=True)
class Deferral:
    """Why a model job waits, and when to look again (Unix time)."""

    reason: str
    until: float


def chat_deferral(queue: Any, config: Config, url: str | None, waiting_since: float | None,
                  now: float | None = None) -> Deferral | None:
    """Whether a job for model server `url` (None: not the chat's server) should wait,
    its work having waited since `waiting_since` (Unix time; None: just now)."""
    policy = config.queue
    if url is None or policy.chat_idle_seconds <= 0:
        return None
    now = time.time() if now is None else now
    since = now if waiting_since is None else min(waiting_since, now)
    give_up_at = since + policy.max_defer_seconds
    if now >= give_up_at:
        return None
    activity = read_activity(queue, url, now)
    if activity.in_flight:
        reason = f"{activity.in_flight} chat request(s) in flight"
        until = now + policy.chat_idle_seconds
    elif activity.last_at is not None and now - activity.last_at < policy.chat_idle_seconds:
        reason = f"a chat request ended {now - activity.last_at:.0f} s ago"
        until = activity.last_at + policy.chat_idle_seconds
    else:
        return None
    return Deferral(reason, min(until, give_up_at))


def chat_began_after(queue: Any, url: str | None, moment: float) -> bool:
    """Whether a front-end started a request to model server `url` after `moment` (Unix
    time): one key read, cheap enough to ask while a background call runs."""
    if url is None:
        return False
    try:
        began = queue.get(CHAT_BEGAN_PREFIX + server_id(url), peek=True)
    except Exception:  # noqa: BLE001 — unreadable: the call goes on, as it would have
        return False
    return isinstance(began, (int, float)) and began > moment


def activity_is_stale(value: Any, now: float) -> bool:
    """A marker of a process that is gone, or a garbled one: safe to delete."""
    if not isinstance(value, dict) or not isinstance(value.get("at"), (int, float)):
        return True
    owner = LockOwner.from_value(value.get("owner"))
    if owner is None:
        return True
    if owner.host == socket.gethostname():
        return not owner_alive(owner, None)
    return now - float(value["at"]) > REMOTE_IN_FLIGHT_SECONDS
