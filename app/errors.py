"""One family for every failure Hilo explains to a person.

A `HiloError`'s str() is the one line a person reads: what failed, where, and what to
do. The class says how each front-end reports it — an exit status on the command line,
an HTTP status and a machine-readable code over HTTP — so each front-end maps the whole
family in one place (the CLI's entry point; the HTTP front-end's error handlers), as
httpx maps transport errors once. Anything outside the family is a bug: the CLI keeps
its traceback, the HTTP front-end logs it and answers 500 in the API's error shape.

The kinds below are the branches; each module defines its own errors under the branch
that says how a caller should react (`InvalidEvent(InvalidInput)`, `DiskFull` under
`InsufficientStorage`, …), and keeps `ValueError`/`LookupError` bases where callers
already rely on them. The whole family, with the module that defines each (a class with
two parents stands under both; tests/test_errors.py keeps this tree true):

    HiloError                     app.errors
        Conflict                  app.errors
            AlreadyRunning        app.ops.backup
        InvalidInput              app.errors
            AccessError           app.access
            InvalidEvent          app.events
            InvalidMemory         app.memory.validation
            InvalidRule           app.turn.tools.terminal_rules
            MalformedRequest      app.cli.queue
            ScheduleError         app.tasks.grammar
            SkippedFile           app.ops.transfer.files
            TaskError             app.tasks.store
                TaskNotFound      app.tasks.store
            TransferError         app.ops.transfer.records
        Misconfigured             app.errors
            BindRefused           app.serve.server
            ConfigError           app.config
            NoJobRunner           workers.jobs
            QueueNotConfigured    workers.queue
        NotFound                  app.errors
            FactNotFound          app.memory.edits
            MacroNotFound         app.turn.macros
            TaskNotFound          app.tasks.store
        Unavailable               app.errors
            EmbedderUnavailable   app.errors
            InsufficientStorage   app.errors
                DiskFull          app.writer
            CommitFailed          app.writer
                DiskFull          app.writer
            DatabaseError         app.db
                CorruptDatabase   app.db
                    CorruptQueue  workers.queue
                SchemaTooNew      app.db
            EmbedFailed           app.learn.embed
            NotifyFailed          workers.notify
            QueueError            workers.inspection
                QueueUnavailable  workers.inspection
            UnknownMachine        app.turn.tools.terminal_sandbox
            WriterClosed          app.writer
        ApiError                  app.http.errors
        BackupError               app.ops.backup
            AlreadyRunning        app.ops.backup
        CommandError              app.cli.common
        InvalidOutput             app.learn.model_output
        JobDegraded               workers.retry
        ModelCallYielded          app.model.errors
        ModelError                app.model.errors
            MalformedResponse     app.model.errors
            ModelHTTPError        app.model.errors
            ModelNotFound         app.model.errors
            ModelTimeout          app.model.errors
            ModelUnreachable      app.model.errors
            OverBudget            app.model.errors
            StreamInterrupted     app.model.errors
        ShareSpent                app.model.errors
        ToolFailed                app.turn.tools.registry
"""

from __future__ import annotations

__all__ = ["HiloError", "InvalidInput", "NotFound", "Conflict", "Unavailable",
           "EmbedderUnavailable", "InsufficientStorage", "Misconfigured"]


class HiloError(Exception):
    """A failure with a one-line message a person can act on."""

    exit_code: int = 1
    http_status: int = 500
    code: str = "hilo_error"

    @property
    def message(self) -> str:
        return str(self)


class InvalidInput(HiloError):
    """What the caller sent cannot be used as it is; sending it again will not help."""

    http_status = 400
    code = "invalid_request"


class NotFound(HiloError, LookupError):
    """The thing asked for does not exist (for this user)."""

    http_status = 404
    code = "not_found"


class Conflict(HiloError):
    """The request clashes with the current state (a running worker, an existing file)."""

    http_status = 409
    code = "conflict"


class Unavailable(HiloError):
    """Something Hilo depends on cannot be used right now; the same call may work later."""

    http_status = 503
    code = "unavailable"


class EmbedderUnavailable(Unavailable):
    """The configured embedder cannot run here; str() says what to install or change."""


class InsufficientStorage(Unavailable):
    """The disk is full; nothing was stored."""

    http_status = 507
    code = "insufficient_storage"


class Misconfigured(HiloError):
    """A setting Hilo cannot run with; the program stops (exit status 2)."""

    exit_code = 2
    http_status = 500
    code = "configuration_error"
