"""The chat turn, shared by the REPL and the HTTP front-end.

A turn: sanitise and append the user's event (stored even if the model is down),
build the context, stream the reply from the model, append the reply, and hand the
turn's events to the workers. The front-end writes only what the user authored —
events and explicit memory edits — through its own writer with synchronous=FULL;
everything derived is the workers' job. A front-end drives a `Turn` here and an
app/turn/agent.py `AgentTurn` alike, through what they share: `StreamingTurn`.

The hand-off is injected (`ChatService(config, handoff=...)`): the turn knows only the
`Handoff` protocol below, never the queue. Front-ends pass the queue's
(`workers.handoff.QueueHandoff`); without one the turn hands off nothing and the
worker's reconcile sweep finds the work in the database instead.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import apsw

from app.config import Config
from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.events import Event, append_events, session_events, supersede_events
from app.log import get_logger
from app.memory import end_session
from app.model.client import ModelClient
from app.model.client_chat import ClientChat
from app.model.errors import ModelError
from app.model.messages import ToolSpec, message_text
from app.model.prompt_speed import PromptSpeed
from app.model.replies import ReplyRecord, SentChat
from app.model.stream import ChatReply, ChatStream
from app.model.token_count import TokenCounter
from app.model.tool_calls import events_as_messages
from app.model.transport import ModelActivity
from app.model.usage import wall_time
from app.recall.fusion import SearchHit, search_memory
from app.recall.query import Query, embed_ahead, make_query
from app.recall.state import Recall
from app.sanitize import Secret, find_secrets, redact_secrets
from app.turn import metrics
from app.turn.context import (
    BuiltContext,
    ContextPlan,
    ContextRequest,
    build_context,
    read_bootstrap,
)
from app.turn.records import record_turn
from app.writer import Writer

if TYPE_CHECKING:
    from app.model.embedders import Embedder

__all__ = ["INTERRUPTED_MARKER", "MAX_CACHED_SESSIONS", "WorkingMemory", "ContextPlans", "Handoff",
           "NoHandoff", "TurnOutcome", "Outcome", "StreamingTurn", "Turn", "configured_embedder",
           "ChatService"]

log = get_logger(__name__)

INTERRUPTED_MARKER = " [interrupted]"
# Sessions whose working set is kept in RAM at once; the least recently used go first.
MAX_CACHED_SESSIONS = 256


class WorkingMemory:
    """Per-session recent events in RAM (≤ cap each), consistent with the database.

    Loaded from the database on first use, appended to on every write, and trimmed of
    events the workers have compacted since (one indexed query per read).
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._sessions: OrderedDict[tuple[str, str], deque[Event]] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, con: apsw.Connection, user_id: str, session_id: str) -> deque[Event]:
        key = (user_id, session_id)
        events = self._sessions.get(key)
        if events is None:
            loaded = session_events(con, user_id, session_id, limit=self.cap,
                                    include_compacted=False)
            events = deque(loaded, maxlen=self.cap)
            self._sessions[key] = events
            while len(self._sessions) > MAX_CACHED_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return events

    def add(self, con: apsw.Connection, event: Event) -> None:
        with self._lock:
            events = self._get(con, event.user_id, event.session_id)
            if not events or events[-1].id < event.id:
                events.append(event)

    def window(self, con: apsw.Connection, user_id: str, session_id: str,
               since: int | None = None) -> list[Event] | None:
        """The session's un-compacted recent events, oldest first. With `since`, every
        event from that id on, compacted or not (a stretch's window: app/turn/context.py), or
        None when the working memory no longer reaches back that far."""
        with self._lock:
            events = list(self._get(con, user_id, session_id))
        if since is not None:
            if not events or events[0].id > since:
                return None
            return [e for e in events if e.id >= since]
        row = con.execute(
            "SELECT max(id) FROM events WHERE user_id = ? AND session_id = ? AND compacted = 1",
            (user_id, session_id),
        ).fetchone()
        compacted_upto = row[0] or 0
        return [e for e in events if e.id > compacted_upto]


class ContextPlans:
    """Each session's ContextPlan (app/turn/context.py) between its turns, in RAM: lost, a
    session's next turn starts a new stretch. The least recently used go first."""

    def __init__(self) -> None:
        self._plans: OrderedDict[tuple[str, str], ContextPlan] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: str, session_id: str) -> ContextPlan | None:
        with self._lock:
            return self._plans.get((user_id, session_id))

    def put(self, user_id: str, session_id: str, plan: ContextPlan) -> None:
        with self._lock:
            self._plans[(user_id, session_id)] = plan
            self._plans.move_to_end((user_id, session_id))
            while len(self._plans) > MAX_CACHED_SESSIONS:
                self._plans.popitem(last=False)


class Handoff(Protocol):
    """How a turn's derived work reaches the workers.

    Must never block or fail the chat: an implementation that cannot hand the work off
    logs it and returns False, and the worker's reconcile sweep finds the undone work in
    the database (undistilled events, an ended session without its diary) later.
    """

    def after_reply(self, user_id: str, session_id: str, event_ids: list[int],
                    sent: SentChat | None = None) -> bool:
        """A turn's events are stored: distill them. True when the job was handed off.
        `sent`: the model request and its reply, which the workers' learning can start
        with to find the model's prompt cache still warm."""
        ...

    def session_ended(self, user_id: str, session_id: str) -> bool:
        """A session was closed: write its diary entry. True when the job was handed off."""
        ...

    def model_activity(self) -> ModelActivity | None:
        """Where this front-end's requests to the model server are reported, so that the
        workers' model jobs wait for the person (None: nowhere)."""
        ...

    def wake_scheduler(self, at: datetime) -> bool:
        """A task runs at `at`, between the scheduler's minute ticks ("in 30 seconds"):
        have a tick run then. True when handed off; else it runs at the next tick."""
        ...


class NoHandoff:
    """Hands off nothing: the reconcile sweep of a running worker finds the work in the
    database after its grace period (a minute or two). For library use and tests."""

    def after_reply(self, user_id: str, session_id: str, event_ids: list[int],
                    sent: SentChat | None = None) -> bool:
        return False

    def session_ended(self, user_id: str, session_id: str) -> bool:
        return False

    def model_activity(self) -> ModelActivity | None:
        return None

    def wake_scheduler(self, at: datetime) -> bool:
        return False


@dataclass
class TurnOutcome:
    user_event: Event
    context: BuiltContext
    reply_event: Event | None = None
    error: ModelError | None = None
    interrupted: bool = False
    # Events this request stored before the reply (a relayed request may store several).
    stored: list[Event] = field(default_factory=list)


@runtime_checkable
class Outcome(Protocol):
    """What a finished turn tells its caller, whichever kind it was (TurnOutcome,
    app.turn.agent.AgentOutcome)."""

    @property
    def reply_event(self) -> Event | None:
        """The reply stored, if the model gave one."""
        ...


@runtime_checkable
class StreamingTurn(Protocol):
    """A turn in flight as a front-end drives it, whichever kind it is: `Turn` (one model
    call) or app.turn.agent.AgentTurn (the model may call tools)."""

    @property
    def record(self) -> ReplyRecord | None:
        """Of a relayed request: the reply as read so far, and its content type."""
        ...

    def __iter__(self) -> Iterator[Any]:
        """Text pieces; for a relayed request, the bytes to pass on to the client."""
        ...

    def run(self) -> Outcome:
        """Consume the whole reply; ModelError propagates after what arrived is stored."""
        ...


class Turn:
    """One turn in flight: iterate it for the reply's pieces as they arrive.

    When iteration ends — completed, interrupted by `interrupt()` or Ctrl-C, or failed
    with a ModelError (re-raised) — the reply received so far is stored and handed off.
    """

    def __init__(self, service: ChatService, outcome: TurnOutcome, stream: ChatStream,
                 started: float | None = None, client: ClientChat | None = None,
                 replaces: Sequence[int] = ()) -> None:
        self.service = service
        self.outcome = outcome
        self._stream = stream
        self._client = client
        self._replaces = replaces
        self._interrupt = threading.Event()
        self._started = started or time.perf_counter()  # when the model was asked

    @property
    def context(self) -> BuiltContext:
        return self.outcome.context

    @property
    def reply(self) -> ChatReply | None:
        """The model's totals (token counts, done reason) once the reply is complete."""
        return self._stream.reply

    @property
    def record(self) -> ReplyRecord | None:
        """Of a relayed request: the reply as read so far, and its content type."""
        return self._stream.record

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tools the model called, as it called them (the stored copy is redacted)."""
        return self._stream.tool_calls

    def interrupt(self) -> None:
        self._interrupt.set()

    def __iter__(self) -> Iterator[Any]:
        """Text pieces; for a relayed request, the bytes to pass on to the client.

        A relayed reply's end (the pieces from the one where the model says it is done)
        goes only once the reply is stored: a client that sends its next message the
        moment the reply ends finds it already remembered. Every piece before it goes
        as it arrives, the first one included.
        """
        record = self._stream.record
        held: list[Any] = []
        try:
            for piece in self._stream:
                if record is not None and (held or record.finished or record.done_reason):
                    held.append(piece)
                    continue
                yield piece
                if self._interrupt.is_set():
                    self.outcome.interrupted = True
                    break
        except ModelError as exc:
            metrics.MODEL_ERRORS.labels("chat", type(exc).__name__).inc()
            self.outcome.error = exc
            self._finish(self._stream.text, interrupted=True)
            yield from held
            raise
        except (KeyboardInterrupt, GeneratorExit):
            self.outcome.interrupted = True
            self._finish(self._stream.text, interrupted=True)
            raise
        finally:
            self._stream.close()
        self._finish(self._stream.text, interrupted=self.outcome.interrupted)
        yield from held

    def _secrets_sent(self) -> tuple[Secret, ...]:
        """The secrets in the client's own messages, relayed as sent: a model may repeat
        a piece of one, which its rule no longer recognises. (What Hilo sends of its own
        is stored text, redacted already.)"""
        if self._client is None:
            return ()
        # Message by message: the same texts come with every request (app.sanitize
        # remembers what it found in each); each as far as it is kept.
        kept = self.service.kept
        return tuple(dict.fromkeys(secret for m in self._client.messages
                                   for secret in find_secrets(kept(message_text(m)))))

    def run(self) -> TurnOutcome:
        """Consume the whole reply; ModelError propagates after the user event is stored."""
        for _ in self:
            pass
        return self.outcome

    def _finish(self, text: str, *, interrupted: bool) -> None:
        if self.outcome.reply_event is not None:
            return
        metrics.MODEL_CALL_SECONDS.labels("chat").observe(time.perf_counter() - self._started)
        if interrupted and text:
            text += INTERRUPTED_MARKER
        tool_calls = self._stream.tool_calls
        if text or tool_calls:
            self.outcome.reply_event = self.service.append(
                self.outcome.user_event.user_id, self.outcome.user_event.session_id,
                "assistant", text, tool_calls=tool_calls or None,
                echoes_of=self._secrets_sent(), origin="model",
                # Words written while reading outside content carry it on.
                from_outside=self.outcome.context.outside_content)
            if self._replaces:  # the reply asked again for: never recalled nor learned from
                reply_id, user_id = self.outcome.reply_event.id, self.outcome.user_event.user_id
                self.service.writer.submit(lambda con: supersede_events(
                    con, user_id, self._replaces, reply_id))
        if self._stream.done:
            self.service.calibrate(self.outcome.context, self._stream.reply)
        reply = self._stream.reply
        engine = None if reply is None else (
            reply.engine or wall_time(time.perf_counter() - self._started))
        record_turn(self.service.writer, self.outcome.context, self.outcome.user_event,
                    self.outcome.reply_event, reply, self.outcome.error, engine)
        ids = sorted({e.id for e in self.outcome.stored} | {self.outcome.user_event.id})
        if self.outcome.reply_event is not None:
            ids.append(self.outcome.reply_event.id)
        self.service.handoff.after_reply(self.outcome.user_event.user_id,
                                         self.outcome.user_event.session_id, ids,
                                         sent=self._exchange(interrupted))

    def _exchange(self, interrupted: bool) -> SentChat | None:
        """The request and the reply as stored (secrets redacted, echoes included), for
        the workers to continue; none for a reply cut short."""
        exchange = self._stream.exchange()
        reply = self.outcome.reply_event
        if interrupted or exchange is None or reply is None:
            return None
        return SentChat(exchange.path, exchange.body, reply.content)


def _timed_embedding(embedding: Future) -> None:
    """Count a question's embedding, from now until it is made, in the metrics."""
    started = time.perf_counter()

    def observe(done: Future) -> None:
        call = "embed" if done.result() is not None else "embed_failed"
        metrics.MODEL_CALL_SECONDS.labels(call).observe(time.perf_counter() - started)

    embedding.add_done_callback(observe)


def configured_embedder(config: Config, client: ModelClient) -> Embedder | None:
    """The embedder [embedder] asks for; none for `kind = "none"`, whose recall by keywords
    never loads the embedders (nor numpy)."""
    if config.embedder.kind == "none":
        return None
    # start-up: app.model.embedders loads numpy, ~0.15 s of a start that embeds nothing
    from app.model.embedders import make_embedder

    return make_embedder(config, client=client)


class ChatService:
    """What a front-end process holds: the event writer, the model client, the token
    counter, the working memory and the Recall (the vector index, word counts and
    embedding threads every search of the process goes through). Thread-safe; one per
    process."""

    def __init__(self, config: Config, *, model: ModelClient | None = None,
                 writer: Writer | None = None, handoff: Handoff | None = None) -> None:
        """`writer`/`model` let a process that already has them (the worker, running
        scheduled tasks) share them: one write connection per process. Shared ones are
        left open by close().

        `handoff` takes each turn's events and each ended session to the workers; front-
        ends pass the queue's (workers.handoff). The default, NoHandoff, hands off
        nothing and relies on the worker's reconcile sweep: fine for library use and
        tests, minutes late for a chat."""
        self.config = config
        self.handoff: Handoff = handoff or NoHandoff()
        self._owns = (writer is None, model is None)
        self.writer = writer or Writer.from_config(config, Durability.FULL)
        # The person's requests to the model server are reported through the hand-off:
        # the workers' model jobs wait while they run (workers/chat_activity.py).
        self.model = model or ModelClient.from_config(config,
                                                      activity=self.handoff.model_activity())
        self._embedder: Embedder | None = None
        self._embedder_made = False
        self._making_embedder = threading.Lock()
        # Set once warm_vectors' thread has the embedder and has marked the indexes it
        # loads; None in a process that never warms (library use, tests).
        self._warmed: threading.Event | None = None
        self.recall = Recall(config.embedder.ann_threshold)
        self.tokens = TokenCounter()
        self.prompt_speed = PromptSpeed()
        self.working = WorkingMemory(config.memory.working_memory_cap)
        self.plans = ContextPlans()
        self._local = threading.local()

    def close(self) -> None:
        owns_writer, owns_model = self._owns
        if owns_writer:
            self.writer.close()
        if owns_model:
            self.model.close()

    @property
    def embedder(self) -> Embedder | None:
        """The embedder [embedder] asks for, made at its first use: making it loads numpy
        (~0.15 s of a start), which warm_vectors does off the first message's path."""
        if not self._embedder_made:
            with self._making_embedder:
                if not self._embedder_made:
                    self._embedder = configured_embedder(self.config, self.model)
                    self._embedder_made = True
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        with self._making_embedder:
            self._embedder, self._embedder_made = embedder, True

    def warm_vectors(self) -> threading.Event:
        """Make the embedder and load its vector indexes in the background, so the first
        turn after a start is as fast as the hundredth; front-ends call it as they start.
        Until the indexes are marked as loading, questions are recalled by keywords. The
        event is set once they are (at once with `[embedder] kind = "none"`)."""
        if self._warmed is not None:
            return self._warmed
        warmed = self._warmed = threading.Event()
        if self.config.embedder.kind == "none":
            warmed.set()
            return warmed

        def warm() -> None:
            try:
                embedder = self.embedder
                if embedder is not None:
                    embedder.start_loading()
                    self.recall.vectors.warm(DataDir.of(self.config).memory_db, embedder.model)
            except Exception as exc:  # noqa: BLE001 - a turn makes the embedder itself then
                log.warning("embedder.warm_failed", error=str(exc))
            finally:
                warmed.set()

        threading.Thread(target=warm, name="hilo-vectors-warm", daemon=True).start()
        return warmed

    @property
    def query_embedder(self) -> Embedder | None:
        """The embedder, if it can embed a question now; until then None — recall by
        keywords — while it loads in the background: a message must not wait for a model
        (or numpy) to load (app/model/embedders.py)."""
        if self._warmed is not None and not self._warmed.is_set():
            return None
        embedder = self.embedder
        if embedder is None or embedder.ready:
            return embedder
        embedder.start_loading()
        return None

    def __enter__(self) -> ChatService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reader(self) -> apsw.Connection:
        """This thread's read-only connection (a cursor must not cross threads)."""
        con = getattr(self._local, "con", None)
        if con is None:
            con = connect_readonly(DataDir.of(self.config).memory_db)
            self._local.con = con
        return con

    # -- writes the user authored ------------------------------------------------------------

    def append(self, user_id: str, session_id: str, role: str, content: str | bytes,
               **fields: Any) -> Event:
        return self.append_all(user_id, session_id, [(role, content, fields)])[0]

    def append_all(self, user_id: str, session_id: str,
                   messages: Sequence[tuple[str, str | bytes, dict[str, Any]]]) -> list[Event]:
        """Events of one session, stored together: in one transaction and one commit."""
        events = append_events(self.writer, self.config, user_id, session_id, messages)
        for event in events:
            self.working.add(self.reader(), event)
        return events

    def edit(self, write) -> Any:
        """An explicit memory edit by the user (a function of the write connection)."""
        return self.writer.submit(write)

    # -- reads ---------------------------------------------------------------------------

    def search_memory(self, user_id: str, q: str, limit: int) -> list[SearchHit]:
        """The user's memory searched for `q` as the chat recalls it (the /memory/search
        route and the memory page's search)."""
        # Stored text holds no secret to find, and the query is embedded by the model server.
        return search_memory(self.reader(), user_id, redact_secrets(q).text, limit,
                             recall=self.recall, embedder=self.query_embedder)

    def build_context(self, user_id: str, session_id: str, text: str, *,
                      client_system: str | None = None, model: str | None = None,
                      before_event_id: int | None = None,
                      client: ClientChat | None = None, turn: bool = False) -> BuiltContext:
        """The context for `text`; with before_event_id, the window stops before that
        event (the message being answered). With `client`, the client's own messages
        are sent (ContextRequest's `history`), after the window only if it asks for one;
        otherwise the window, the request's own messages included, is only kept out of
        the quoted past. A `turn` continues the session's stretch (app/turn/context.py's
        ContextPlan) and keeps it for the next; without, the context is a preview."""
        query = self._query(user_id, text)
        started = time.perf_counter()
        con = self.reader()
        plan = self.plans.get(user_id, session_id) if turn else None
        window = None
        if plan is not None and plan.window_start is not None:
            window = self.working.window(con, user_id, session_id, since=plan.window_start)
        if window is None:
            window = self.working.window(con, user_id, session_id) or []
        if before_event_id is not None and (client is None or client.with_window):
            window = [e for e in window if e.id < before_event_id]
        context = build_context(con, self.config, self.tokens, ContextRequest(
            user_id, text, session_id=session_id, window=window,
            bootstrap=read_bootstrap(DataDir.of(self.config).bootstrap),
            client_system=client_system, model=model, query=query,
            history=client.messages if client else None,
            history_sent=client.sent if client else None,
            num_ctx=client.num_ctx if client else None, api=client.api if client else None,
            show_window=client is None or client.with_window, plan=plan,
            message_id=before_event_id,
            prompt_speed=self.prompt_speed.tokens_per_second(model or self.config.llm.chat_model)))
        if turn and context.plan is not None:
            self.plans.put(user_id, session_id, context.plan)
        metrics.CONTEXT_BUILD_SECONDS.observe(time.perf_counter() - started)
        return context

    def _query(self, user_id: str, text: str) -> Query:
        """The turn's retrieval query; with an embedder ready, the question is embedded
        while the keyword streams run (make_query's `ahead`), unless embed_ahead began
        it already."""
        embedder = self.query_embedder
        text = self.kept(text)
        if embedder is None:
            return make_query(user_id, text, recall=self.recall, con=self.reader())
        return make_query(user_id, text, embedder, recall=self.recall, con=self.reader(),
                          ahead=True, on_embedding=_timed_embedding)

    def kept(self, text: str) -> str:
        """What Hilo reads of a message to search its memory and scan it: what it stores
        ([memory] max_message_chars), so a huge message costs the time of what is kept
        (it is still relayed to the model whole)."""
        return text[:self.config.memory.max_message_chars]

    def embed_ahead(self, user_id: str, text: str) -> None:
        """Begin embedding the question of a turn about to be answered: a front-end calls
        it as soon as the message's text is known, so the embedding runs while the message
        is stored, and the turn's recall (build_context with the same text) takes it
        (app/recall/query.py, embed_ahead). Nothing without an embedder ready."""
        embedder = self.query_embedder
        if embedder is not None:
            embed_ahead(user_id, self.kept(text), embedder, recall=self.recall,
                        con=self.reader(), on_embedding=_timed_embedding)

    # -- the turn ----------------------------------------------------------------------------

    def start_turn(self, user_id: str, session_id: str, text: str | bytes, *,
                   client_system: str | None = None, model: str | None = None,
                   options: dict | None = None, role: str = "user", origin: str = "typed",
                   tools: Sequence[ToolSpec] | None = None) -> Turn:
        """Store the user's message, build the context and open the model's stream.

        `role` "system" stores instructions that are not the user speaking (a scheduled
        task's prompt): the model still answers them; the workers learn nothing from them.
        `origin`: where the message came from (app/events.py ORIGINS).
        `tools` are offered to the model (app/turn/agent.py runs what it calls).
        Raises ModelError (after the message is stored) when the model cannot start.
        """
        user_event = self.append(user_id, session_id, role, text, origin=origin)
        return self.answer(user_event, client_system=client_system, model=model,
                           options=options, tools=tools)

    def answer(self, user_event: Event, *, client_system: str | None = None,
               model: str | None = None, options: dict | None = None,
               client: ClientChat | None = None, stored: Sequence[Event] = (),
               tools: Sequence[ToolSpec] | None = None,
               continued: Sequence[Event] = (), replaces: Sequence[int] = ()) -> Turn:
        """Open the model's reply to a stored user message: a new one, or one a client
        resends (a retry, a regenerate). The window holds only what came before it, so
        an earlier reply to it is not shown again.

        With `client`, a client's own request is relayed (ModelClient.relay_chat): its
        body as sent, its messages with the memory layers added, no option of Hilo's;
        `user_event` is then the stored event its last message is (user, tool or
        assistant), and `stored` what the request stored, handed off with the reply.

        `continued` are this turn's events after the message — the model's tool calls and
        their results — sent after it (a relayed request has them among its messages), so
        the model answers what the tools found; the context reads them too.

        `replaces`: the stored reply to the message that the client asked again for
        (app/api/conversation.py): once this reply is stored, that one is superseded."""
        user_id, session_id = user_event.user_id, user_event.session_id
        model = client.model if client is not None else model
        history = client
        if client is None and continued:
            # The message as the model first saw it (a task's instructions go as "user").
            messages = [{"role": "user", "content": user_event.content},
                        *events_as_messages(continued, self.config.llm.provider)]
            history = ClientChat(self.config.llm.provider, {}, messages, with_window=True,
                                 query=user_event.content, sent=1)
        context = self.build_context(user_id, session_id,
                                     history.query if history else user_event.content,
                                     client_system=client_system, model=model,
                                     before_event_id=user_event.id, client=history, turn=True)
        # The message itself may be content from outside (an imported task's prompt), and
        # so may what a client resends of the session (a reply written reading a page).
        context = context.reading([user_event, *continued, *(client.events if client else ())])
        outcome = TurnOutcome(user_event, context, stored=list(stored))
        opts = {"temperature": self.config.llm.temperature, **(options or {})}
        started = time.perf_counter()
        try:
            if client is not None:
                stream = self.model.relay_chat(client.api, {**client.body,
                                                            "messages": context.messages})
            else:
                stream = self.model.chat_stream(context.messages, model=model, options=opts,
                                                tools=tools)
        except ModelError as exc:
            metrics.MODEL_ERRORS.labels("chat", type(exc).__name__).inc()
            outcome.error = exc
            record_turn(self.writer, context, user_event, None, None, exc)
            self.handoff.after_reply(user_id, session_id,
                                     sorted({e.id for e in stored} | {user_event.id}))
            raise
        return Turn(self, outcome, stream, started, client, replaces)

    def calibrate(self, context: BuiltContext, reply: ChatReply | None) -> None:
        """Learn from the server's counters: the prompt's tokens, and how fast it read them."""
        if reply is None:
            return
        chars = sum(len(message_text(m)) for m in context.messages)
        self.tokens.observe(context.explain["model"], chars, reply.prompt_eval_count)
        self.prompt_speed.observe(context.explain["model"], reply.prompt_read)

    def end_session(self, user_id: str, session_id: str) -> bool:
        """Close the session and ask the workers for its diary entry."""
        ended = self.writer.submit(lambda con: end_session(con, user_id, session_id))
        self.handoff.session_ended(user_id, session_id)
        return ended
