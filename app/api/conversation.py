"""What a chat request says, and how it meets what Hilo has stored.

The client's history wins. A request's messages are the conversation the model sees
(with Hilo's memory added); Hilo stores only what it has not stored yet:

- The session's stored events are matched, in order, against the request's
  conversation (its user, assistant and tool messages): from its first message, when
  that is stored anywhere in the session (a chat whose first message was edited starts
  mid-session), else from the message that is the session's first event, each next
  message must be a later stored event — branches the client abandoned (an edited
  message, a regenerated reply) are stepped over, never sent again. What follows the
  last matched message is new, and stored.
- When neither is there — a new session, or another conversation under the same
  session id — only the request's last user message and what follows it are new: the
  earlier messages are the client's setup (few-shot examples, a history from
  elsewhere), not something the user said here.
- A request whose last message is already stored (a retry, a regenerate, Open WebUI's
  "Continue Response") stores nothing and is answered again. A continued reply is
  stored as the events of its parts, and the client's one message joining them is
  those events, not a new one.
- A request with a single message gets the session's stored window before it; it is a
  resend when it repeats the session's last user (or tool) message. Except Open
  WebUI's (a request naming its chat): it always sends the whole branch, so its single
  message is a new chat or one whose first message was edited, matched as above.

Messages are compared as Hilo stores them (sanitised, an interrupted reply without its
marker, tool calls by name and arguments). A stored user message that is the client's
text with a block added on its own line before or after it is the same message: Open
WebUI adds retrieved documents and web results to the user's message for that one
request, and sends it plain in later histories. A stored reply is the client's copy of
it within a few edits (REPLY_EDITS: spacing, trimming, a character or word changed, as
clients render and tidy replies): that copy is never stored again as the client's own,
and the turn reads the stored reply's provenance — a reply written reading a page stays
content from outside, however the client resends it.

What the request stores is the person's message as typed ("typed", the owner's hand) and
the client's history ("client": content from outside, app.memory.provenance).

The session: `X-Hilo-Session`, else Open WebUI's chat id (`X-OpenWebUI-Chat-Id`, sent
when Open WebUI runs with ENABLE_FORWARD_USER_INFO_HEADERS), else the history itself —
the request continues the session whose stored events reach furthest into it, provided
nothing the client has as a reply is missing from that session. Hilo never guesses:
when two sessions reach equally far (two chats that opened with the same words and got
the same reply), the request starts a new session, which its later requests then
reach furthest. A one-message request with no id, or one no session matches, starts a
new session: two chats that open with the same words stay apart. Except a first message
sent again after the model failed on it: the session holding only that message, with
no reply, is continued, so the message is stored once.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config import Config
from app.events import (
    Event,
    PreparedEvent,
    prepare_event,
    session_events,
    sessions_opening_with,
)
from app.http.errors import ApiError
from app.model.client_chat import ClientChat
from app.model.messages import (
    is_conversation,
    message_text,
    quotes_retrieved_documents,
    stored_role,
    text_to_store,
)
from app.model.tool_calls import stored_tool_calls, tool_calls_of, tool_name_of
from app.tasks.sessions import is_task_session
from app.turn.chat import INTERRUPTED_MARKER, ChatService

__all__ = ["OPEN_WEBUI_CHAT_HEADER", "CANDIDATE_SESSIONS", "CANDIDATE_OPENINGS", "Conversation",
           "read_conversation", "Key", "event_key", "REPLY_EDITS", "REPLY_EDITS_MIN",
           "same_message", "near_copy", "message_keys", "KnownKeys", "Match", "matched_prefix",
           "Unstored", "unstored_messages", "store_messages", "new_session_id", "named_session",
           "continued_session"]

OPEN_WEBUI_CHAT_HEADER = "x-openwebui-chat-id"
# Sessions examined when a request names none, most recently active first.
CANDIDATE_SESSIONS = 20
# Of a request's messages, the first this many may be the first of a stored session.
CANDIDATE_OPENINGS = 32


@dataclass(frozen=True)
class Conversation:
    """A chat request's messages: all of them as sent, and its turns — the user,
    assistant and tool messages, in order. `whole`: the client sends its whole branch
    on every request (Open WebUI), even when that is a single message."""

    api: str
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    whole: bool = False
    # The turns as stored for a user (message_keys), worked out once per request: the
    # session is found and the new messages told apart from the same keys.
    _keys: dict[str, list[Key]] = field(default_factory=dict, repr=False, compare=False)

    def keys(self, config: Config, user_id: str) -> list[Key]:
        """Its turns as Hilo would store them for `user_id` (message_keys)."""
        if user_id not in self._keys:
            self._keys[user_id] = message_keys(config, user_id, self.turns)
        return self._keys[user_id]

    @property
    def query(self) -> str:
        """What the memory is searched for: the last thing the user said."""
        users = [m for m in self.turns if m.get("role") == "user"]
        return message_text(users[-1] if users else self.turns[-1])

    def client_chat(self, body: Mapping[str, Any], events: Sequence[Event] = ()) -> ClientChat:
        """The request to relay: its whole history; or, for a single message from a
        client that sends only its last, its system messages and that message, with the
        stored window before it. `events`: the stored events its messages are."""
        if len(self.turns) > 1 or self.whole:
            return ClientChat(self.api, body, self.messages, False, self.query,
                              events=tuple(events))
        last = self.turns[-1]
        kept = [m for m in self.messages if m is last or not is_conversation(m)]
        return ClientChat(self.api, body, kept, True, self.query, events=tuple(events))


def read_conversation(api: str, body: Mapping[str, Any],
                      headers: Mapping[str, str]) -> Conversation:
    """The request's messages, checked only as far as Hilo must read them."""
    messages = body.get("messages")
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        raise ApiError(422, "invalid request: messages: expected a list of messages",
                       "invalid_request")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(422, f"invalid request: messages.{index}: expected an object with "
                           "a \"role\"", "invalid_request")
    return Conversation(api, messages, [m for m in messages if is_conversation(m)],
                        whole=OPEN_WEBUI_CHAT_HEADER in headers)


# -- matching the stored events ------------------------------------------------------------

Key = tuple[str, str, tuple[tuple[str, str], ...]]


def _squash(text: str) -> str:
    return " ".join(text.split())


def _calls_key(calls: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(c.get("name")), json.dumps(c.get("arguments"), sort_keys=True))
                 for c in calls)


def event_key(event: Event) -> Key:
    calls = stored_tool_calls(event.tool_calls_json)
    # An interrupted reply is stored with a marker; the client kept the text without it.
    return event.role, event.content.removesuffix(INTERRUPTED_MARKER), _calls_key(calls)


# A client's copy of a stored reply may differ by this share of the reply's characters
# (at least REPLY_EDITS_MIN): enough for a renderer's tidying, not for another answer.
REPLY_EDITS = 0.05
REPLY_EDITS_MIN = 2


def same_message(stored: Key, said: Key) -> bool:
    """Whether a stored event (`event_key`) is this message of the client's."""
    (role, text, calls), (said_role, said_text, said_calls) = stored, said
    if role != said_role or calls != said_calls:
        return False
    if _squash(text) == _squash(said_text):
        return True
    if role == "assistant":
        return near_copy(text, said_text)
    return (role == "user" and bool(said_text.strip())
            and (text.startswith(said_text + "\n") or text.endswith("\n" + said_text)))


def near_copy(stored: str, said: str) -> bool:
    """Whether `said` is `stored` within a few edits (module docstring), spacing aside."""
    stored, said = _squash(stored), _squash(said)
    allowed = max(REPLY_EDITS_MIN, int(REPLY_EDITS * max(len(stored), len(said))))
    if abs(len(stored) - len(said)) > allowed or not said:
        return False
    # start-up: rapidfuzz loads only when a client's copy differs from the stored reply
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(stored, said, score_cutoff=allowed) <= allowed


def _as_stored(config: Config, user_id: str, message: dict[str, Any]) -> PreparedEvent:
    """The message as Hilo would store it: sanitised, capped."""
    return prepare_event(config, user_id, "-", stored_role(message), text_to_store(message),
                         tool_calls=tool_calls_of(message) or None, origin="client")


def _prepared_key(prepared: PreparedEvent) -> Key:
    calls = stored_tool_calls(prepared.tool_calls_json)
    return prepared.role, prepared.content, _calls_key(calls)


def message_keys(config: Config, user_id: str, messages: list[dict[str, Any]]) -> list[Key]:
    """The messages as Hilo would store them, to compare with stored events."""
    return [_KNOWN_KEYS.key(config, user_id, m) for m in messages]


class KnownKeys:
    """The stored form (Key) of the text messages a client resends with every request,
    so that each request works out only its new ones: sanitising a whole history anew
    cost ~1 ms per 60 messages of every turn, growing with the conversation. Bounded by
    the characters held; the least recently used go first. A message with tool calls
    is worked out every time."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._keys: OrderedDict[tuple, tuple[Config, Key, int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def key(self, config: Config, user_id: str, message: dict[str, Any]) -> Key:
        if tool_calls_of(message):
            return _prepared_key(_as_stored(config, user_id, message))
        role, text = stored_role(message), text_to_store(message)
        known = (id(config), user_id, role, text)
        with self._lock:
            hit = self._keys.get(known)
            if hit is not None and hit[0] is config:
                self._keys.move_to_end(known)
                return hit[1]
        key = _prepared_key(prepare_event(config, user_id, "-", role, text, origin="client"))
        size = len(text) + len(key[1])
        with self._lock:
            old = self._keys.pop(known, None)
            self._chars += size - (old[2] if old else 0)
            self._keys[known] = (config, key, size)
            while self._chars > self.max_chars and self._keys:
                self._chars -= self._keys.popitem(last=False)[1][2]
        return key


# Of a process: a few long conversations' worth of messages.
_KNOWN_KEYS = KnownKeys(max_chars=4_000_000)


def _stored_as(stored_keys: list[Key], at: int, said: Key) -> int | None:
    """The last of the stored events from `at` on that are the client's message `said`:
    `at` itself, or for a reply that was continued ("Continue Response"), the events of
    its parts, which the client shows joined as one message. None: not this message."""
    if same_message(stored_keys[at], said):
        return at
    role, text, calls = said
    if role != "assistant" or calls:
        return None
    wanted, joined = _squash(text), ""
    for index in range(at, len(stored_keys)):
        part_role, part, part_calls = stored_keys[index]
        if part_role != "assistant" or part_calls:
            return None
        joined += part
        if _squash(joined) == wanted:
            return index if index > at else None
        if not wanted.startswith(_squash(joined)):
            return None
    return None


def _next_stored(stored_keys: list[Key], after: int, said: Key) -> tuple[int, int] | None:
    """The first stored event from `after` on that starts the client's message `said`,
    and the last event it spans."""
    for at in range(after, len(stored_keys)):
        last = _stored_as(stored_keys, at, said)
        if last is not None:
            return at, last
    return None


@dataclass(frozen=True)
class Match:
    """How far into a request a session's stored events reach: `end`, the index of the
    first new message; `anchor`, the stored event of the message before it; `events`,
    the stored events the matched messages are."""

    end: int
    anchor: Event | None = None
    events: tuple[Event, ...] = ()


def matched_prefix(keys: list[Key], stored: list[Event]) -> Match:
    """How far into the request the session's stored events reach (Match); Match(0)
    when the match has nowhere to start (module docstring)."""
    if not stored or not keys:
        return Match(0)
    stored_keys = [event_key(e) for e in stored]
    first = _next_stored(stored_keys, 0, keys[0])
    if first is not None:
        end, (start, last) = 1, first
    else:
        # The client's setup (few-shot examples) may stand before the session's first event.
        opening = next(((i, found) for i, key in enumerate(keys)
                        if (found := _stored_as(stored_keys, 0, key)) is not None), None)
        if opening is None:
            return Match(0)
        end, start, last = opening[0] + 1, 0, opening[1]
    matched = stored[start:last + 1]
    anchor, after = stored[last], last + 1
    for key in keys[end:]:
        found = _next_stored(stored_keys, after, key)
        if found is None:
            break
        matched += stored[found[0]:found[1] + 1]
        end, anchor, after = end + 1, stored[found[1]], found[1] + 1
    return Match(end, anchor, tuple(matched))


@dataclass(frozen=True)
class Unstored:
    """What a request brings that the session lacks: its turns from `start` on (None:
    nothing), and `resent`, the stored event its last message is when it brings nothing;
    `matched`, the stored events its other messages are. `replaced`: the stored reply to
    the resent message, which the client no longer has (it asked again: "Try Again", a
    retry), superseded once the new reply is stored. `chosen_again`: replies superseded
    earlier that the client's history has again (it went back to them), current again
    from this request on."""

    start: int | None
    resent: Event | None = None
    matched: tuple[Event, ...] = ()
    replaced: tuple[int, ...] = ()
    chosen_again: tuple[int, ...] = ()


def _reply_after(stored: list[Event], message: Event) -> tuple[int, ...]:
    """The current reply stored after `message` (a user or tool message): the assistant
    and tool events that follow it, up to the next user message."""
    if message.role not in ("user", "tool"):
        return ()  # a resent reply is continued ("Continue Response"), not replaced
    at = next(i for i, e in enumerate(stored) if e.id == message.id)
    reply = []
    for event in stored[at + 1:]:
        if event.role == "user":
            break
        if event.superseded_by is None:
            reply.append(event.id)
    return tuple(reply)


def unstored_messages(service: ChatService, user_id: str, session_id: str,
                      conversation: Conversation) -> Unstored:
    """The module docstring's rule, for one request."""
    turns = conversation.turns
    stored = [e for e in session_events(service.reader(), user_id, session_id)
              if e.role in ("user", "assistant", "tool")]
    keys = conversation.keys(service.config, user_id)
    if len(turns) == 1 and not conversation.whole:
        inputs = [e for e in stored if e.role in ("user", "tool")]
        if inputs and same_message(event_key(inputs[-1]), keys[0]):
            return Unstored(None, inputs[-1], replaced=_reply_after(stored, inputs[-1]))
        return Unstored(0)
    match = matched_prefix(keys, stored)
    again = tuple(e.id for e in match.events if e.superseded_by is not None)
    if match.end == len(turns):
        assert match.anchor is not None  # every message matched
        return Unstored(None, match.anchor, match.events, _reply_after(stored, match.anchor),
                        again)
    if match.end == 0:
        users = [i for i, m in enumerate(turns) if m.get("role") == "user"]
        return Unstored(users[-1] if users else len(turns) - 1)
    return Unstored(match.end, matched=match.events, chosen_again=again)


def store_messages(service: ChatService, user_id: str, session_id: str,
                   conversation: Conversation, start: int) -> list[Event]:
    """Store a request's turns from `start` on as events, tool calls and results included:
    all of them, or (InvalidEvent) none. The request's last user message is the one the
    person typed ("typed"); the rest is history the client sent ("client"). A message
    quoting documents the client retrieved is content from outside."""
    turns, messages = conversation.turns, []
    typed = max((i for i, m in enumerate(turns) if m.get("role") == "user"), default=None)
    for index in range(start, len(turns)):
        message, role = turns[index], stored_role(turns[index])
        messages.append((role, text_to_store(message), {
            "origin": "typed" if index == typed else "client",
            "from_outside": quotes_retrieved_documents(message),
            "tool_calls": tool_calls_of(message) or None,
            "tool_call_id": message.get("tool_call_id") if role == "tool" else None,
            "tool_name": tool_name_of(message, turns[:index]) if role == "tool" else None}))
    return service.append_all(user_id, session_id, messages)


# -- the session ---------------------------------------------------------------------------


def new_session_id() -> str:
    return f"auto-{uuid.uuid4().hex[:16]}"


def named_session(session_header: str | None, headers: Mapping[str, str],
                  check: Callable[[str], str]) -> str | None:
    """The session the request names: X-Hilo-Session (already checked), else Open WebUI's
    chat id, checked by `check`."""
    if session_header is not None:
        return session_header
    chat_id = headers.get(OPEN_WEBUI_CHAT_HEADER)
    return check(chat_id) if chat_id else None


def continued_session(service: ChatService, user_id: str,
                      conversation: Conversation) -> str | None:
    """The stored session this unnamed request continues, if any (module docstring)."""
    turns = conversation.turns
    keys = conversation.keys(service.config, user_id)
    if len(turns) == 1:
        return _unanswered_opening(service, user_id, keys[0])
    if not turns:
        return None
    openings = sorted({content for _, content, _ in keys[:CANDIDATE_OPENINGS]})
    con = service.reader()
    candidates = sessions_opening_with(con, user_id, openings, CANDIDATE_SESSIONS)
    best, best_end, tied = None, 0, False
    for session_id in (c for c in candidates if not is_task_session(c)):
        stored = [e for e in session_events(con, user_id, session_id)
                  if e.role in ("user", "assistant", "tool")]
        end = matched_prefix(keys, stored).end
        # A reply the client has and the session lacks: another conversation.
        if any(m.get("role") == "assistant" for m in turns[end:]):
            continue
        if end > best_end:
            best, best_end, tied = session_id, end, False
        elif end == best_end and best is not None:
            tied = True
    # Two sessions hold this history alike: which chat it is cannot be told, so neither.
    return None if tied else best


def _unanswered_opening(service: ChatService, user_id: str, said: Key) -> str | None:
    """The latest session whose one message is `said`, never answered (the model failed):
    the same first message sent again continues it rather than being stored twice."""
    con = service.reader()
    for session_id in sessions_opening_with(con, user_id, [said[1]], CANDIDATE_SESSIONS):
        stored = [e for e in session_events(con, user_id, session_id)
                  if e.role in ("user", "assistant", "tool")]
        if (not is_task_session(session_id) and len(stored) == 1
                and same_message(event_key(stored[0]), said)):
            return session_id
    return None
