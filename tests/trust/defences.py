"""The defences the red team's attacks test (DESIGN §9), each with a switch that turns it
off: an attack names the defences it tests (tests/trust/scenario.py's `attack`), and
with those switched off it must get what it wanted (tests/trust/test_defences.py).
An attack that cannot succeed even then tests nothing: its payload never arrived, or
its outcome is read where nothing could show.

A switch is a context manager over the lab: it patches the one place in Hilo that makes
the defence — a function, a rule table, a bubblewrap option — or, for provenance and
trust kept in rows, adds triggers to the lab's database that store every row as the
owner's (or every task as trusted) whatever wrote it. Switches are the red team's
knowledge of where each defence lives: when a defence moves, its switch moves with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

from app.datadir import DataDir
from app.db import connect

if TYPE_CHECKING:
    from tests.trust.lab import Lab

Switch = Callable[["Lab"], AbstractContextManager[None]]


@dataclass(frozen=True)
class Defence:
    name: str
    holds: str  # what it holds, in a line
    off: Switch


DEFENCES: dict[str, Defence] = {}


def defence(name: str, holds: str) -> Callable[[Callable[[Lab], Iterator[None]]], Defence]:
    """Register a defence; the decorated generator is its switch (the code before its
    `yield` turns the defence off, the code after turns it back on)."""
    def register(switch: Callable[[Lab], Iterator[None]]) -> Defence:
        found = Defence(name, holds, contextmanager(switch))
        DEFENCES[name] = found
        return found

    return register


@contextmanager
def switched_off(lab: Lab, names: tuple[str, ...]) -> Iterator[None]:
    """Every defence in `names` off, for as long as the block runs."""
    with ExitStack() as stack:
        for name in names:
            stack.enter_context(DEFENCES[name].off(lab))
        yield


@contextmanager
def _patched(*patches: tuple[str, Any]) -> Iterator[None]:
    with ExitStack() as stack:
        for target, new in patches:
            stack.enter_context(mock.patch(target, new))
        yield


@contextmanager
def _triggers(lab: Lab, statements: Mapping[str, str]) -> Iterator[None]:
    """Triggers in the lab's memory database, by name, dropped again afterwards."""
    con = connect(DataDir.of(lab.config).memory_db)
    try:
        for name, body in statements.items():
            con.execute(f"CREATE TRIGGER {name} {body}")
        yield
    finally:
        for name in statements:
            con.execute(f"DROP TRIGGER IF EXISTS {name}")
        con.close()


# -- identity -------------------------------------------------------------------------------------


@defence("token_is_its_user", "a token is its user on every route; a request naming another "
                              "user is refused")
def _token_is_its_user(lab: Lab) -> Iterator[None]:
    from app.http import callers

    def identify(config, token_user, headers):
        named = (headers.get("x-openwebui-user-id") or headers.get("x-hilo-user")
                 or token_user or config.memory.user_id)
        return callers.Caller(named, headers.get("x-hilo-session"), None, True)

    def naming(self, user: str) -> str:
        return user

    with _patched(("app.http.callers.identify", identify), ("app.serve.server.identify", identify),
                  ("app.http.callers.Caller.naming", naming)):
        yield


@defence("rows_are_the_users", "every read is filtered by its user: a session or a task id "
                               "of someone else's is not found")
def _rows_are_the_users(lab: Lab) -> Iterator[None]:
    from app import events
    from app.tasks import store

    def anyones_session(con, user_id, session_id, **kwargs):
        owner = con.execute("SELECT user_id FROM events WHERE session_id = ? ORDER BY id "
                            "LIMIT 1", (session_id,)).fetchone()
        return events.session_events(con, owner[0] if owner else user_id, session_id, **kwargs)

    def anyones_task(con, user_id, ref):
        task_id = store.task_id_of(ref)
        found = store.select_tasks(con, "WHERE t.id = ?", (task_id,)) if task_id else []
        return found[0] if found else store.get_task(con, user_id, ref)

    with _patched(("app.turn.chat.session_events", anyones_session),
                  ("app.tasks.runs.session_events", anyones_session),
                  ("app.api.memory.session_events", anyones_session),
                  ("app.api.memory.session_exists", lambda con, user_id, session_id: True),
                  ("app.tasks.runs.get_task", anyones_task)):
        yield


# -- trust is granted at the machine --------------------------------------------------------------


@defence("trust_at_the_machine", "a task is trusted only when its owner says so at the machine: "
                                 "never over HTTP or MCP, by the model, or from a file")
def _trust_at_the_machine(lab: Lab) -> Iterator[None]:
    with (_patched(("app.api.tasks.refuse_trust", lambda asked: None)),
          _triggers(lab, {"redteam_every_task_trusted": (
              "AFTER INSERT ON scheduled_tasks BEGIN UPDATE scheduled_tasks SET is_trusted = 1 "
              "WHERE id = NEW.id; END")})):
        yield


@defence("task_sessions_closed", "no client writes into the session that holds a task's runs")
def _task_sessions_closed(lab: Lab) -> Iterator[None]:
    with _patched(("app.http.callers.is_task_session", lambda session_id: False)):
        yield


# -- outside content ------------------------------------------------------------------------------


@defence("outside_is_data", "a turn whose context holds content from outside acts only on a "
                            "fresh yes from the person at the terminal")
def _outside_is_data(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.agent.AgentTurn._acting", lambda self: self.ctx)):
        yield


_MEMORY_TABLES = ("facts", "profile", "context_cards", "diary")


@defence("provenance", "what came from outside, or was learned from it, is kept as outside "
                       "and read as outside in every later turn and task")
def _provenance(lab: Lab) -> Iterator[None]:
    from app import events

    prepare = events.prepare_event

    def owners(*args, **kwargs):
        return replace(prepare(*args, **kwargs), from_outside=False)

    triggers = {f"redteam_{table}_{when}_owners": (
        f"AFTER {when.upper()} ON {table} WHEN NEW.from_outside != 0 BEGIN "
        f"UPDATE {table} SET from_outside = 0 WHERE rowid = NEW.rowid; END")
        for table in _MEMORY_TABLES for when in ("insert", "update")}
    with (_patched(("app.events.prepare_event", owners),
                   ("app.api.conversation.prepare_event", owners),
                   ("app.ops.transfer.importer.prepare_event", owners),
                   ("app.tasks.store.ScheduledTask.prompt_from_outside",
                    property(lambda task: False))),
          _triggers(lab, triggers)):
        yield


# -- macros ---------------------------------------------------------------------------------------


class _AnyOrigin(str):
    """Equal to every origin: any tool result teaches."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


@defence("macros_from_approved_calls", "macros learn only from calls a person approved or a "
                                       "trusted task ran")
def _macros_from_approved_calls(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.macros.TEACHING_ORIGIN", _AnyOrigin("any"))):
        yield


# -- the terminal ---------------------------------------------------------------------------------


@defence("terminal_option_refusals", "options that run another command, write where the rule "
                                     "did not say or load code are covered by no rule")
def _terminal_option_refusals(lab: Lab) -> Iterator[None]:
    with mock.patch.dict("app.turn.tools.terminal_rules._CHECKS", clear=True):
        yield


@defence("terminal_paths_in_workdir", "a path outside the working folder is covered by no rule")
def _terminal_paths_in_workdir(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.tools.terminal_rules._FILE_PROGRAMS", frozenset())):
        yield


@defence("terminal_shell_characters", "a command with shell characters is covered by no rule")
def _terminal_shell_characters(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.tools.terminal.has_metacharacters", lambda command: False),
                  ("app.turn.tools.terminal_rules.has_metacharacters", lambda command: False)):
        yield


@defence("allow_always_is_exact", "\"allow always\" stores exactly the command approved")
def _allow_always_is_exact(lab: Lab) -> Iterator[None]:
    def whole_program(command: str, workdir: Path) -> str | None:
        return f"{command.split()[0]} *"

    with _patched(("app.turn.tools.terminal.rule_to_store", whole_program)):
        yield


def _without_sandbox_options(*dropped: str) -> AbstractContextManager[None]:
    """bubblewrap run without `dropped` (an option alone, or an option and its values,
    `*` standing for any one)."""
    from app.turn.tools.terminal_sandbox import Sandbox

    argv = Sandbox.argv

    def same(spec: list[str], words: list[str]) -> bool:
        return len(words) == len(spec) and all(s in ("*", w) for s, w in zip(spec, words,
                                                                              strict=True))

    def fewer(self, *args, **kwargs):
        words = argv(self, *args, **kwargs)
        split = words.index("--", words.index(self.bwrap))  # bwrap's own, after prlimit's
        options, kept, index = words[:split], [], 0
        while index < len(options):
            width = next((len(d.split()) for d in dropped
                          if same(d.split(), options[index:index + len(d.split())])), 0)
            if width:
                index += width
            else:
                kept.append(options[index])
                index += 1
        return [*kept, *words[split:]]

    return _patched(("app.turn.tools.terminal_sandbox.Sandbox.argv", fewer))


@defence("sandbox_network", "a command has no network (bubblewrap's --unshare-net)")
def _sandbox_network(lab: Lab) -> Iterator[None]:
    with _without_sandbox_options("--unshare-net"):
        yield


@defence("sandbox_processes", "a command sees and reaches its own processes only (its own "
                              "pid and user namespaces and /proc, no capabilities)")
def _sandbox_processes(lab: Lab) -> Iterator[None]:
    # Each of these alone keeps another process's environment out of reach (as root, the
    # missing capabilities; for anyone, the user namespace): off, all of them.
    with _without_sandbox_options("--unshare-pid", "--proc /proc", "--unshare-user-try",
                                  "--cap-drop ALL"):
        yield


@defence("sandbox_unix_sockets", "a command opens no Unix socket, even one in its working "
                                 "folder (the seccomp filter bwrap loads)")
def _sandbox_unix_sockets(lab: Lab) -> Iterator[None]:
    with _without_sandbox_options("--seccomp *"):
        yield


@defence("sandbox_memory_cap", "a command's memory is capped (prlimit --as)")
def _sandbox_memory_cap(lab: Lab) -> Iterator[None]:
    from app.turn.tools.terminal_sandbox import Sandbox

    argv = Sandbox.argv

    def without_limits(self, *args, **kwargs):
        words = argv(self, *args, **kwargs)
        return words[words.index(self.bwrap):]

    with _patched(("app.turn.tools.terminal_sandbox.Sandbox.argv", without_limits)):
        yield


@defence("own_working_folder", "commands run in a folder of Hilo's own by default, never the "
                               "home directory")
def _own_working_folder(lab: Lab) -> Iterator[None]:
    def home_by_default(config, user_id):
        return Path(config.tools.terminal_workdir or "~").expanduser().resolve()

    with _patched(("app.turn.tools.terminal.working_directory", home_by_default)):
        yield


@defence("clean_environment", "a command's environment holds no secret: only the base "
                              "variables and those the owner lists")
def _clean_environment(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.tools.terminal.scrubbed_environment",
                   lambda environ, passed=(): dict(environ))):
        yield


# -- the web --------------------------------------------------------------------------------------


@defence("fetch_checks_addresses", "web_fetch reads a private or loopback address only from a "
                                   "host listed by that address")
def _fetch_checks_addresses(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.tools.web.private_kind", lambda address: None)):
        yield


@defence("fetch_deadline", "web_fetch has one deadline over the whole exchange, headers "
                           "included")
def _fetch_deadline(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.tools.web._Watchdog.trace", lambda self, event, info: None)):
        yield


# -- requests -------------------------------------------------------------------------------------


@defence("finite_json", "a request's JSON holds finite numbers only: NaN, Infinity and 1e999 "
                        "are a 400")
def _finite_json(lab: Lab) -> Iterator[None]:
    import json

    with _patched(("app.http.callers.load_json", json.loads),
                  ("app.http.deps.load_json", json.loads)):
        yield


@defence("token_guessing_limit", "wrong tokens from one address are held back after a burst")
def _token_guessing_limit(lab: Lab) -> Iterator[None]:
    with _patched(("app.http.gate.WrongTokens.wait", lambda self, address: 0.0)):
        yield


@defence("huge_message_cost", "a message costs the time of what is kept of it")
def _huge_message_cost(lab: Lab) -> Iterator[None]:
    with _patched(("app.turn.chat.ChatService.kept", lambda self, text: text)):
        yield


# -- what is kept ---------------------------------------------------------------------------------


@defence("secrets_redacted", "a secret is redacted before anything is kept: events, the queue")
def _secrets_redacted(lab: Lab) -> Iterator[None]:
    from app.sanitize import Redacted

    def kept(text, *, echoes_of=()):
        return Redacted(text, ())

    def as_is(value, *, echoes_of=()):
        return value

    with _patched(("app.sanitize.redact_secrets", kept), ("app.sanitize.redact_json", as_is),
                  ("app.events.redact_secrets", kept), ("app.events.redact_json", as_is)):
        yield


# -- provenance of layers, retrieved documents, forgetting (issue 40) -------------------------------


@defence("imported_memory_md_waits", "an imported MEMORY.md waits beside the owner's, unread, "
                                     "until the owner accepts it at the machine")
def _imported_memory_md_waits(lab: Lab) -> Iterator[None]:
    from app.ops.transfer import memory_md

    def installed(config, text):
        memory_md.write_bootstrap(DataDir.of(config).bootstrap, text)
        return "pending", DataDir.of(config).bootstrap

    with _patched(("app.ops.transfer.importer.keep_imported_memory_md", installed)):
        yield


@defence("retrieved_documents_by_structure", "a message quoting documents a client retrieved "
                                             "is outside in every form RAG templates give it")
def _retrieved_documents_by_structure(lab: Lab) -> Iterator[None]:
    import re

    # What was recognised before: an exact, closed <context>…</context> block.
    with _patched(("app.model.messages._RETRIEVED_DOCUMENTS",
                   re.compile(r"<context>.*?</context>", re.DOTALL))):
        yield


@defence("outside_content_quoted", "learning and later chats show outside content quoted, never "
                                   "as the user's words")
def _outside_content_quoted(lab: Lab) -> Iterator[None]:
    from app.turn.quotes import PastEvent

    def as_said(label, role, text, from_outside):
        return f"{label}: {text}"

    def line(event: PastEvent, content: str) -> str:
        return f"- [{event.created_at[:10]}] {event.role}: {content}"

    with _patched(*((f"app.learn.{module}.learning_line", as_said)
                    for module in ("distill", "compact", "diary_entry")),
                  ("app.turn.quotes._line", line)):
        yield


@defence("reply_matching", "a client's copy of a stored reply, a few edits away, is that reply "
                           "with its provenance, never the client's own")
def _reply_matching(lab: Lab) -> Iterator[None]:
    with _patched(("app.api.conversation.near_copy", lambda stored, said: False)):
        yield


@defence("secure_delete", "what is deleted is overwritten (PRAGMA secure_delete), never left in "
                          "the database file's free pages")
def _secure_delete(lab: Lab) -> Iterator[None]:
    from app import db

    configure = db._configure

    def insecure(con):
        configure(con)
        con.execute("PRAGMA secure_delete = OFF")

    writer = lab.service.writer
    writer.submit(lambda con: con.execute("PRAGMA secure_delete = OFF"))
    try:
        with _patched(("app.db._configure", insecure)):
            yield
    finally:
        writer.submit(lambda con: con.execute("PRAGMA secure_delete = ON"))


@defence("index_secure_delete", "a deleted row's words leave the full-text indexes' own data "
                                "(FTS5 secure-delete)")
def _index_secure_delete(lab: Lab) -> Iterator[None]:
    con = connect(DataDir.of(lab.config).memory_db)
    tables = ("events_fts", "cards_fts", "facts_fts", "event_labels_fts")
    try:
        for table in tables:
            con.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('secure-delete', 0)")
        yield
    finally:
        for table in tables:
            con.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('secure-delete', 1)")
        con.close()


@defence("forget_truncates_the_log", "a forget ends with the write-ahead log checkpointed and "
                                     "truncated")
def _forget_truncates_the_log(lab: Lab) -> Iterator[None]:
    with _patched(("app.memory.forget.checkpoint_wal", lambda path: True)):
        yield


@defence("forget_takes_the_replies", "forgetting with the sources takes the assistant's replies "
                                     "that repeat them")
def _forget_takes_the_replies(lab: Lab) -> Iterator[None]:
    with _patched(("app.memory.forget.replies_to", lambda con, user_id, event_ids: [])):
        yield


@defence("forgotten_key_hashed", "a forgotten fact keeps a hash of its key, not the key")
def _forgotten_key_hashed(lab: Lab) -> Iterator[None]:
    with _patched(("app.memory.forget.forgotten_key", lambda key: key)):
        yield
