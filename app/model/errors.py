"""The model errors: each says what failed, where, what to do, and whether a retry helps.

Every failure of a model call surfaces as a `ModelError` subclass; app/model/transport.py
maps the HTTP client's failures into them, in one place. Retrying itself is the caller's
policy, not the model wing's. When the model server answered with an error, the error
keeps that answer as the server wrote it (`server_answer`), so a front-end relaying the
call can pass it on unchanged, Hilo's explanation beside it.
"""

from __future__ import annotations

from typing import Any

from app.errors import HiloError

__all__ = ["EXCERPT_CHARS", "ModelError", "ModelUnreachable", "ModelNotFound", "ModelTimeout",
           "ModelHTTPError", "StreamInterrupted", "OverBudget", "ModelCallYielded", "ShareSpent",
           "MalformedResponse"]

# Longest slice of a server's error text worth putting in a message of Hilo's.
EXCERPT_CHARS = 300


class ModelError(HiloError):
    """A model call failed; str() says what failed, where, and what to do next.

    Over HTTP a client gets 502 (the model server failed) unless a subclass says better.
    """

    http_status = 502
    code = "model_error"
    # Whether the same call may succeed later: workers retry these, give up on the rest.
    retryable: bool = False
    # The model server's own error answer, (HTTP status, its text); None when it gave none.
    server_answer: tuple[int, str] | None = None
    # That answer's JSON document as the server wrote it, when it wrote one: relayed whole
    # to a client of the same API, so it gets the server's fields and no others.
    server_document: Any = None

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class ModelUnreachable(ModelError):
    http_status = 503
    code = "model_unreachable"
    retryable = True

    def __init__(self, url: str, provider: str, detail: str = "") -> None:
        if provider == "ollama":
            message = f"Ollama is not reachable at {url} — start it with `ollama serve`"
        else:
            message = f"the model server is not reachable at {url} — start the server"
        message += ", or point [llm] url (HILO_LLM_URL) at where it runs"
        if detail:
            message += f" ({detail})"
        super().__init__(message, url=url)
        self.provider = provider


class ModelNotFound(ModelError):
    http_status = 404
    code = "model_not_found"
    retryable = False

    def __init__(self, model: str, url: str, provider: str, setting: str = "[llm] chat_model",
                 server_message: str = "") -> None:
        if provider == "ollama":
            message = f"model {model} is not pulled — run `ollama pull {model}`"
        else:
            message = f"model {model} is not available at {url} — load it in the server, or change {setting}"
        super().__init__(message, url=url)
        self.model = model
        if server_message:
            self.server_answer = (404, server_message)


class ModelTimeout(ModelError):
    http_status = 504
    code = "model_timeout"
    retryable = True

    def __init__(self, url: str, seconds: float, phase: str = "read") -> None:
        if phase == "connect":
            message = (
                f"could not connect to {url} within {seconds:g} s — check the address, or raise "
                "[llm] connect_timeout_seconds (HILO_LLM_CONNECT_TIMEOUT_SECONDS) if the server is just slow"
            )
        else:
            message = (
                f"{url} did not answer within {seconds:g} s — the model may still be loading or be too slow "
                "for this machine; raise [llm] timeout_seconds (HILO_LLM_TIMEOUT_SECONDS) or use a smaller model"
            )
        super().__init__(message, url=url)
        self.seconds = seconds
        self.phase = phase


class ModelHTTPError(ModelError):
    def __init__(self, status: int, server_message: str, url: str, endpoint: str) -> None:
        message = f"{endpoint} at {url} failed with HTTP {status}: {server_message[:EXCERPT_CHARS]}"
        hint = _status_hint(status)
        if hint:
            message += f" — {hint}"
        super().__init__(message, url=url)
        self.status = status
        self.server_message = server_message
        self.server_answer = (status, server_message)
        # A request the model server refused is the client's to fix; its own failure,
        # or our credentials, are a bad gateway.
        if 400 <= status < 500 and status not in (401, 403):
            self.http_status, self.code = status, "model_rejected"
        # Server-side trouble and throttling pass; a bad request stays bad.
        self.retryable = status >= 500 or status in (408, 429)


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "check [llm] api_key (HILO_LLM_API_KEY)"
    if status == 404:
        return "the server has no such endpoint; check [llm] provider and [llm] url"
    if status >= 500:
        return "the model server failed; check its log, then retry"
    return ""


class StreamInterrupted(ModelError):
    retryable = True

    def __init__(self, url: str, partial_text: str, reason: str) -> None:
        super().__init__(
            f"the reply from {url} stopped after {len(partial_text)} characters, before the model finished "
            f"({reason}) — the server may have crashed or restarted; try again",
            url=url,
        )
        self.partial_text = partial_text
        self.reason = reason


class OverBudget(ModelError):
    """A learning call reached its own output limit ("tokens") or deadline ("deadline")
    and was cut (app/model/usage.py CallBudget). Not retried: at temperature 0.1 the same
    question loops the same way, and each try would cost the whole budget again."""

    http_status = 504
    code = "model_over_budget"
    retryable = False

    def __init__(self, url: str, limit: str, amount: float, partial_text: str = "") -> None:
        reached = (f"its deadline of {amount:g} s" if limit == "deadline"
                   else f"its output limit of {amount:g} tokens")
        super().__init__(
            f"a learning call to {url} reached {reached} and was cut — the model is looping "
            f"or too slow for this machine; what it was asked is learned by rule instead "
            f"(raise [llm] learning_deadline_seconds for a slow model, or use a larger one)",
            url=url)
        self.limit = limit
        self.amount = amount
        self.partial_text = partial_text


class ModelCallYielded(HiloError):
    """A background call gave way to a person: the connection was cut so the model
    server stops working on it (not a failure; the work is done later)."""


class ShareSpent(HiloError):
    """A learning call not made: learning has used its share of the chat's model server
    ([learn] engine_share); its work waits for credit (not a failure)."""


class MalformedResponse(ModelError):
    retryable = True

    def __init__(self, url: str, endpoint: str, detail: str, provider: str) -> None:
        api = "Ollama API" if provider == "ollama" else "OpenAI-compatible API"
        super().__init__(
            f"{endpoint} at {url} answered with something that is not the {api}'s JSON ({detail}) — "
            "check that [llm] url and [llm] provider name the right kind of server",
            url=url,
        )
        self.detail = detail
