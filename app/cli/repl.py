"""`hilo chat`: the interactive REPL on top of ChatService and the agent (app/turn/agent.py).

A loop: read a line, run a slash command from `COMMANDS` or send the line as a turn and
stream the reply. The model may call tools: each call and its result show as they run;
a terminal command that no allow rule covers asks "once / always / deny", and a
learned macro asks before it runs. Ctrl-C stops a reply or a running command (what
arrived is kept, marked interrupted), not the session; leaving closes the session so
the workers write its diary entry.
Input history persists in `<data_dir>/repl_history`; with stdin not a terminal the
REPL reads plain lines, and with stdout not a terminal it prints plain text.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.text import Text

from app.cli.format import (
    card_line,
    diary_line,
    excerpt,
    fact_line,
    fact_text,
    hit_line,
    profile_line,
    task_lines,
    task_reply_lines,
)
from app.config import Config
from app.datadir import DataDir
from app.db import DatabaseError
from app.events import InvalidEvent, count_session_events, events_by_ids
from app.log import configure_logging, get_logger
from app.memory import (
    cards_by_ids,
    get_fact,
    last_diary,
    list_cards,
    list_facts,
    list_profile,
)
from app.memory.forget import forget as forget_for_good
from app.model.errors import ModelError
from app.recall.fusion import event_text, search_memory
from app.tasks.delivery import has_undelivered, take_undelivered
from app.tasks.store import describe_task, list_tasks
from app.turn.agent import Agent, AgentTurn, ToolNote
from app.turn.chat import ChatService
from app.turn.context import BuiltContext
from app.turn.tools import Decision
from app.turn.tools.registry import OUTSIDE_KINDS
from app.turn.tools.terminal import allow_rules
from workers.handoff import queue_handoff

__all__ = ["log", "PROMPT", "IDLE_POLL_SECONDS", "TASK_REPLIES_SHOWN", "DIARY_SHOWN",
           "SEARCH_LIMIT", "RESULT_LINES_SHOWN", "RESULT_LINE_CHARS", "ARGUMENTS_SHOWN_CHARS",
           "LineInput", "repeating", "Repl", "Command", "COMMANDS", "HELP", "command",
           "show_profile", "show_facts", "show_cards", "show_diary", "search", "forget", "explain",
           "show_tasks", "show_tools", "show_help", "leave", "run_command", "ReplApprover",
           "ToolDisplay", "chat_turn", "new_session_id", "greet", "run_repl"]

log = get_logger(__name__)

PROMPT = "you> "
# Scheduled task replies: how often an idle prompt looks for new ones, and how many
# one look shows at most (the rest are in `hilo tasks log`).
IDLE_POLL_SECONDS = 2.0
TASK_REPLIES_SHOWN = 5
DIARY_SHOWN = 5
SEARCH_LIMIT = 10
# Of a tool's result, the lines shown under the call (all of it is stored).
RESULT_LINES_SHOWN = 8
RESULT_LINE_CHARS = 200
ARGUMENTS_SHOWN_CHARS = 160


# -- input -----------------------------------------------------------------------------------


class LineInput:
    """Lines from the user: prompt_toolkit with persistent history on a terminal, plain
    lines otherwise. `read()` raises EOFError when the user leaves (Ctrl-D, end of input,
    or Ctrl-C twice at an empty prompt)."""

    def __init__(self, history_path: Path, out: Console,
                 while_idle: Callable[[], None] | None = None) -> None:
        """`while_idle` is called every IDLE_POLL_SECONDS while the prompt waits on a
        terminal; what it prints appears above the prompt."""
        self.out = out
        self.while_idle = while_idle
        self._session = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import FileHistory

            self._session = PromptSession(history=FileHistory(str(history_path)))

    def read(self) -> str:
        armed = False  # a first Ctrl-C at an empty prompt arms the second one to leave
        while True:
            try:
                return self._read_once()
            except KeyboardInterrupt:
                if self._session is None:
                    raise EOFError from None
                if self._session.default_buffer.text:
                    armed = False  # Ctrl-C on a typed line just discards it
                    continue
                if armed:
                    raise EOFError from None
                armed = True
                self.out.print("(Ctrl-C again or Ctrl-D to leave)", style="dim")

    def ask(self, question: str) -> str:
        """One answer to a question (an approval), outside the chat's history. Ctrl-D
        answers nothing; Ctrl-C interrupts the turn (KeyboardInterrupt)."""
        try:
            if self._session is not None:
                from prompt_toolkit import prompt

                return prompt(question).strip()
            self.out.print(Text(question), end="")
            self.out.file.flush()
            stream = getattr(sys.stdin, "buffer", None)
            raw = stream.readline() if stream is not None else sys.stdin.readline()
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            return line.strip()
        except EOFError:
            return ""

    def _read_once(self) -> str:
        if self._session is not None:
            if self.while_idle is None:
                return self._session.prompt(PROMPT)
            from prompt_toolkit.patch_stdout import patch_stdout

            with patch_stdout(raw=True), repeating(IDLE_POLL_SECONDS, self.while_idle):
                return self._session.prompt(PROMPT)
        # Bytes, decoded here: input that is not UTF-8 is replaced (U+FFFD), not fatal.
        stream = getattr(sys.stdin, "buffer", None)
        raw = stream.readline() if stream is not None else sys.stdin.readline()
        if not raw:
            raise EOFError
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return line.rstrip("\r\n")


@contextmanager
def repeating(seconds: float, action: Callable[[], None]) -> Iterator[None]:
    """Call `action` every `seconds` on a background thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            try:
                action()
            except Exception:
                log.warning("repl.idle_action_failed", exc_info=True)

    thread = threading.Thread(target=loop, name="repl-idle", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# -- the REPL's state and its commands ----------------------------------------------------------


@dataclass
class Repl:
    service: ChatService
    out: Console
    user_id: str
    session_id: str
    last_context: BuiltContext | None = None  # None after a message that never reached the model
    messages_sent: int = 0
    agent: Agent | None = None  # set by run_repl, with this REPL answering its approvals
    # Task replies are shown from the prompt's idle thread and before each prompt.
    _delivering: threading.Lock = field(default_factory=threading.Lock)

    def say(self, text: str, style: str | None = None) -> None:
        """One line of output; never parsed as rich markup (memory text may hold brackets)."""
        self.out.print(Text(text, style=style or ""))

    def show_task_replies(self, *, away: bool = False) -> None:
        """Print the scheduled task runs that ended since a chat last showed them (and
        mark them shown); `away` at the start of a chat. Cheap when there are none."""
        if not has_undelivered(self.service.reader(), self.user_id):
            return
        with self._delivering:
            reports, older = take_undelivered(self.service.writer, self.user_id,
                                              limit=TASK_REPLIES_SHOWN)
            if not reports:
                return
            if away:
                self.say("While you were away:", "bold")
            if older:
                self.say(f"({older} earlier run{'s' if older != 1 else ''} not shown: "
                         "`hilo tasks log <id>` has them)", "dim")
            for report in reports:
                for text, style in task_reply_lines(report):
                    self.say(text, style)

    def events_in_session(self) -> int:
        return count_session_events(self.service.reader(), self.user_id, self.session_id)


# A command takes the REPL and the text after its name; it returns True to leave.
Command = Callable[[Repl, str], bool | None]
COMMANDS: dict[str, Command] = {}
HELP: dict[str, str] = {}


def command(name: str, usage: str) -> Callable[[Command], Command]:
    def register(fn: Command) -> Command:
        COMMANDS[name] = fn
        HELP[name] = usage
        return fn

    return register


@command("/profile", "/profile            what Hilo knows about you (key: value)")
def show_profile(repl: Repl, arg: str) -> None:
    entries = list_profile(repl.service.reader(), repl.user_id)
    if not entries:
        repl.say("No profile yet: it fills in as you chat.", "dim")
    for entry in entries:
        repl.say(profile_line(entry))


@command("/facts", "/facts              dated facts, with the ids /forget takes")
def show_facts(repl: Repl, arg: str) -> None:
    facts = list_facts(repl.service.reader(), repl.user_id)
    if not facts:
        repl.say("No facts yet: they are distilled from your messages after each reply.", "dim")
    for fact in facts:
        repl.say(fact_line(fact))


@command("/cards", "/cards              summaries of earlier conversation")
def show_cards(repl: Repl, arg: str) -> None:
    cards = list_cards(repl.service.reader(), repl.user_id)
    if not cards:
        repl.say("No context cards yet: long sessions are summarised into cards.", "dim")
    for card in cards:
        repl.say(card_line(card))


@command("/diary", "/diary              the last session summaries")
def show_diary(repl: Repl, arg: str) -> None:
    entries = last_diary(repl.service.reader(), repl.user_id, limit=DIARY_SHOWN)
    if not entries:
        repl.say("No diary entries yet: one is written when a session ends.", "dim")
    for entry in entries:
        repl.say(diary_line(entry))


@command("/search", "/search <words>     search facts, cards and past messages")
def search(repl: Repl, arg: str) -> None:
    if not arg:
        repl.say("Usage: /search <words>", "yellow")
        return
    hits = search_memory(repl.service.reader(), repl.user_id, arg, SEARCH_LIMIT,
                         recall=repl.service.recall, embedder=repl.service.query_embedder)
    if not hits:
        repl.say(f"Nothing in memory matches {arg!r}.", "dim")
    for hit in hits:
        repl.say(hit_line(hit))


@command("/forget", "/forget <fact id>   forget a fact for good; workers will not re-learn it")
def forget(repl: Repl, arg: str) -> None:
    if not arg.lstrip("#").isdigit():
        repl.say("Usage: /forget <fact id>  (the ids are in /facts)", "yellow")
        return
    fact_id = int(arg.lstrip("#"))
    gone = forget_for_good(repl.service.writer, repl.user_id, fact_id)
    if gone is None or gone.fact is None:
        repl.say(f"No fact #{fact_id} to forget (see /facts for the current ones).", "yellow")
        return
    repl.say(f"Forgot fact #{fact_id}: {fact_text(gone.fact)}")


@command("/explain", "/explain            what the last context contained, and why")
def explain(repl: Repl, arg: str) -> None:
    if repl.last_context is None:
        if repl.messages_sent:
            repl.say("Nothing to explain: your last message did not reach the model.", "dim")
        else:
            repl.say("Nothing to explain yet: send a message first.", "dim")
        return
    info = repl.last_context.explain
    repl.say(f"Context of the last turn: {info['tokens']} of {info['budget']} tokens "
             f"(model {info['model']}, {info['chars_per_token']} chars/token)", "bold")
    repl.say(f"  {'layer':<10} {'status':<10} {'items':>7} {'tokens':>7}", "dim")
    for layer in info["layers"]:
        items = f"{layer['items']}/{layer['of']}"
        repl.say(f"  {layer['name']:<10} {layer['status']:<10} {items:>7} {layer['tokens']:>7}")
    con = repl.service.reader()
    shown = {item["id"]: get_fact(con, repl.user_id, item["id"]) for item in info["facts"]}
    forgotten = {i for i, fact in shown.items() if fact is None or fact.deleted_at is not None}
    # What each recalled item says, as it is now: a short excerpt beside its id.
    said = {("facts", i): fact_text(fact) for i, fact in shown.items() if i not in forgotten}
    said.update((("cards", card.id), card.summary) for card in cards_by_ids(
        con, repl.user_id, [item["id"] for item in info["cards"]]))
    said.update((("events", event.id), event_text(event)) for event in events_by_ids(
        con, repl.user_id, [item["id"] for item in info.get("events", [])]))
    for kind in ("facts", "cards"):
        for item in info[kind]:
            if kind == "facts" and item["id"] in forgotten:
                continue  # it was in that prompt, and has left every prompt since
            ranks = ", ".join(f"{stream} rank {rank}" for stream, rank in
                              item.get("ranks", {}).items())
            score = f", score {item['score']}" if "score" in item else ""
            detail = f" ({ranks}{score})" if ranks or score else ""
            text = said.get((kind, item["id"]), "(gone since)")
            repl.say(f"  {kind[:-1]} #{item['id']}: {item['why']}{detail} — {excerpt(text)}")
    if forgotten:
        repl.say(f"  and {len(forgotten)} fact(s) forgotten since", "dim")
    for item in info.get("events", []):
        part = f", {item['quoted']} quoted" if "quoted" in item else ""
        text = said.get(("events", item["id"]), "(deleted since)")
        repl.say(f"  past message #{item['id']} (score {item['score']}{part}) — {excerpt(text)}")
    if info["window"]:
        repl.say(f"  window: events {', '.join(f'#{i}' for i in info['window'])}")
    if info["diary"]:
        repl.say(f"  diary: session {', '.join(info['diary'])}")
    if info.get("user_text_truncated"):
        repl.say("  your message was cut to fit the budget", "yellow")


@command("/tasks", "/tasks              scheduled tasks")
def show_tasks(repl: Repl, arg: str) -> None:
    tz = repl.service.config.schedule.timezone
    tasks = list_tasks(repl.service.reader(), repl.user_id, tz)
    if not tasks:
        repl.say("No scheduled tasks.", "dim")
    for task in tasks:
        for text, style in task_lines(task, describe_task(task, tz)):
            repl.say(text, style)


@command("/tools", "/tools              the tools the model may call, the commands it may run")
def show_tools(repl: Repl, arg: str) -> None:
    agent = repl.agent
    if agent is None or not agent.enabled:
        repl.say("Tools are off in the chat ([tools] chat = false).", "dim")
        return
    for tool in agent.registry.available("chat"):
        repl.say(f"{tool.name}: {tool.description.split('. ')[0]}")
    if agent.registry.get("terminal", "chat") is not None:
        rules = allow_rules(repl.service.reader(), repl.service.config, repl.user_id)
        repl.say("Commands that run without asking: " +
                 (", ".join(r.text for r in rules) if rules
                  else "none yet (answer \"always\" to add one)"), "dim")


@command("/help", "/help               this list")
def show_help(repl: Repl, arg: str) -> None:
    for usage in HELP.values():
        repl.say(usage)
    repl.say("Anything else is sent to the model. Ctrl-C stops a reply; Ctrl-D leaves.", "dim")


@command("/exit", "/exit               close the session and leave (or Ctrl-D)")
def leave(repl: Repl, arg: str) -> bool:
    return True


COMMANDS["/quit"] = leave


def run_command(repl: Repl, line: str) -> bool:
    name, _, arg = line.partition(" ")
    fn = COMMANDS.get(name.lower())
    if fn is None:
        repl.say(f"Unknown command {name}: type /help for the commands.", "yellow")
        return False
    return bool(fn(repl, arg.strip()))


# -- a turn ------------------------------------------------------------------------------------


class ReplApprover:
    """Answers the agent's questions by asking the person at the prompt."""

    def __init__(self, lines: LineInput,
                 say: Callable[[str, str], None] = lambda text, style: None) -> None:
        self.lines = lines
        self.say = say  # a line shown before a question (the REPL's own `say`)

    def approve_command(self, command: str, rule: str | None, why_not_always: str = "") -> Decision:
        if rule is None:
            choices = f"[o]nce or [d]eny ({why_not_always}: it cannot be allowed always)"
        else:
            choices = "[o]nce, [a]lways (exactly this command), or [d]eny"
        for _ in range(3):
            answer = self.lines.ask(f"Run `{command}`? {choices}: ").lower()
            if answer in ("o", "once", "y", "yes"):
                return "once"
            if answer in ("a", "always") and rule is not None:
                return "always"
            if answer in ("d", "deny", "n", "no", ""):
                return "deny"
        return "deny"

    def confirm_macro(self, description: str) -> bool:
        answer = self.lines.ask(f"Learned macro: {description}. Run it? [y/N]: ").lower()
        return answer in ("y", "yes")

    def approve_outside(self, action: str) -> bool:
        self.say(f"This turn read content from outside ({OUTSIDE_KINDS}): what the "
                 "model asks for may come from it, not from you.", "yellow")
        answer = self.lines.ask(f"The model asks to {action}. Do it? [y/N]: ").lower()
        return answer in ("y", "yes")


def _arguments_text(name: str, arguments: object) -> str:
    if name == "terminal" and isinstance(arguments, dict) and "command" in arguments:
        return str(arguments["command"])
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= ARGUMENTS_SHOWN_CHARS else text[:ARGUMENTS_SHOWN_CHARS] + "…"


class ToolDisplay:
    """Shows the agent's calls and results between the streamed pieces of text."""

    def __init__(self, repl: Repl) -> None:
        self.repl = repl
        self.mid_line = False  # the streamed text so far does not end a line

    def write(self, piece: str) -> None:
        out = self.repl.out.file
        out.write(piece)
        out.flush()
        self.mid_line = not piece.endswith("\n")

    def end_line(self) -> None:
        if self.mid_line:
            self.repl.out.file.write("\n")
            self.mid_line = False

    def __call__(self, note: ToolNote) -> None:
        self.end_line()
        if note.phase == "call":
            macro = f" (macro #{note.macro.id})" if note.macro is not None else ""
            self.repl.say(f"⚙ {note.name}{macro}: {_arguments_text(note.name, note.arguments)}",
                          "cyan")
            return
        lines = (note.result.content if note.result is not None else "").splitlines() or [""]
        style = "dim" if note.ok else "yellow"
        for line in lines[:RESULT_LINES_SHOWN]:
            cut = line if len(line) <= RESULT_LINE_CHARS else line[:RESULT_LINE_CHARS] + "…"
            self.repl.say(f"  ↳ {cut}", style)
        if len(lines) > RESULT_LINES_SHOWN:
            self.repl.say(f"  ↳ … ({len(lines) - RESULT_LINES_SHOWN} more lines, all stored)",
                          style)


def chat_turn(repl: Repl, text: str) -> None:
    """Send one message and stream the reply, with the tools the model calls; Ctrl-C or
    a model error ends it early."""
    out = repl.out.file
    repl.messages_sent += 1
    repl.last_context = None
    assert repl.agent is not None  # run_repl gives it this REPL as its approver
    display = ToolDisplay(repl)
    try:
        turn: AgentTurn = repl.agent.start_turn(repl.user_id, repl.session_id, text,
                                                origin="typed", on_tool=display)
    except ModelError as exc:
        repl.say(f"✗ {exc}", "red")
        repl.say("(your message is saved; send it again once the model is back)", "dim")
        return
    except KeyboardInterrupt:
        repl.say("[interrupted before the reply began]", "dim")
        return
    except InvalidEvent as exc:  # e.g. a --session id that cannot be stored
        repl.say(f"✗ {exc}", "red")
        return
    repl.last_context = turn.context
    pieces = iter(turn)
    try:
        for piece in pieces:
            display.write(piece)
    except KeyboardInterrupt:
        pieces.close()  # a Ctrl-C landing outside the generator: it stores the partial reply
        display.end_line()
        repl.say("[interrupted]", "dim")
        return
    except ModelError as exc:
        display.end_line()
        repl.say(f"✗ {exc}", "red")
        repl.say("(what arrived is saved, marked interrupted)", "dim")
        return
    finally:
        repl.last_context = turn.context
    display.end_line()
    if turn.outcome.stopped:
        repl.say(f"(stopped: {turn.outcome.stopped})", "yellow")
    out.flush()


# -- the loop ------------------------------------------------------------------------------------


def new_session_id() -> str:
    """Readable and sortable: the local start time, plus a short random tail."""
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def greet(repl: Repl, resuming: bool) -> None:
    if resuming:
        count = repl.events_in_session()
        if count:
            repl.say(f"Resuming session {repl.session_id} ({count} events)", "bold")
        else:
            repl.say(f"No session {repl.session_id} yet: starting it", "bold")
    else:
        repl.say(f"New session {repl.session_id}", "bold")
    diary = last_diary(repl.service.reader(), repl.user_id, exclude_session=repl.session_id)
    if diary:
        repl.say(f"Last time: {diary[0].entry}", "dim")
    repl.say("Type /help for commands; Ctrl-D or /exit to leave.", "dim")


def run_repl(config: Config, session: str | None = None, user: str | None = None) -> int:
    """Chat until the user leaves; returns the exit status."""
    out = Console(highlight=False, soft_wrap=True)
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    data_dir = DataDir.of(config)
    if not data_dir.memory_db.exists():
        errors.print(Text(f"No memory database in {config.data_dir}: run `hilo init` first "
                          "(or pass the right --data-dir).", style="red"))
        return 1
    if out.is_terminal:
        _log_to_file(config, data_dir.chat_log)
    try:
        service = ChatService(config, handoff=queue_handoff(config))
    except (DatabaseError, ValueError) as exc:
        errors.print(Text(str(exc), style="red"))
        return 1
    # Ctrl-C must stop a reply even when started with SIGINT ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with service:
        service.warm_vectors()
        repl = Repl(service, out, user or config.memory.user_id, session or new_session_id())
        lines = LineInput(data_dir.repl_history, out, while_idle=repl.show_task_replies)
        repl.agent = Agent(service, surface="chat", approver=ReplApprover(lines, repl.say))
        greet(repl, resuming=session is not None)
        repl.show_task_replies(away=True)
        while True:
            try:
                repl.show_task_replies()
                line = lines.read().strip()
            except EOFError:
                break
            if not line:
                continue
            try:
                if line.startswith("/"):
                    if run_command(repl, line):
                        break
                else:
                    chat_turn(repl, line)
            except KeyboardInterrupt:
                repl.say("[interrupted]", "dim")
        if repl.events_in_session():
            service.end_session(repl.user_id, repl.session_id)
            repl.say(f"Session {repl.session_id} closed; its diary entry will be written "
                     "in the background.", "dim")
    return 0


def _log_to_file(config: Config, path: Path) -> None:
    """Keep log lines out of the conversation on a terminal: they go to a file instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "a", encoding="utf-8")
    configure_logging(config.logging.level, config.logging.format, stream=stream)
