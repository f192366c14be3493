"""The one place HTTP errors are shaped.

Every error a client gets is in the shape of the API it called: OpenAI's
`{"error": {"message", "type", "param", "code"}}` under /v1, Ollama's `{"error": "..."}`
everywhere else. The whole HiloError family (app/errors.py) is mapped here, once: each
error carries its HTTP status and code, so route handlers raise domain errors (or
ApiError for what only HTTP knows) and the handlers installed here turn those, invalid
requests and unknown routes into that shape.

A model server's own error answer to a relayed chat is passed on as it wrote it — its
status and its text, in the calling API's shape — and what Hilo has to add (what to do,
that the message was kept) goes in the `X-Hilo-Hint` header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from app.datadir import DataDir
from app.db import corrupt_memory
from app.errors import HiloError, InsufficientStorage
from app.model.errors import ModelError
from app.writer import disk_full

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError

__all__ = ["DISK_FULL_RETRY_AFTER_SECONDS", "HINT_HEADER", "ApiError", "MAX_JSON_DEPTH",
           "json_too_deep", "error_body", "error_response", "in_the_shape_of", "model_failure",
           "turn_error", "header_text", "install_error_handlers", "install_validation_errors"]

# How long a client should wait before retrying after a full disk (507).
DISK_FULL_RETRY_AFTER_SECONDS = "60"


HINT_HEADER = "X-Hilo-Hint"


class ApiError(HiloError):
    """An error only HTTP knows (a malformed chat request, an unknown session), answered
    in the calling API's own shape, with `headers` on the response."""

    def __init__(self, status: int, message: str, code: str | None,
                 headers: dict[str, str] | None = None, server_document: Any = None) -> None:
        super().__init__(message)
        self.http_status, self.code, self.headers = status, code, headers
        # A model server's own error document, answered as it is to a client of its API.
        self.server_document = server_document


# A chat body nests a few levels, a tool's JSON schema a few dozen; deeper is refused
# before anything walks it (every walk of a value, json's included, is recursive).
MAX_JSON_DEPTH = 100


def json_too_deep() -> ApiError:
    return ApiError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels: "
                         "send flatter JSON", "invalid_json")


_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                       403: "permission_error", 404: "not_found_error",
                       413: "invalid_request_error",
                       422: "invalid_request_error", 429: "rate_limit_error"}


def error_body(path: str, status: int, message: str, code: str | None) -> dict:
    """OpenAI's error shape under /v1, Ollama's `{"error": "..."}` everywhere else."""
    if path.startswith("/v1/"):
        kind = _OPENAI_ERROR_TYPES.get(status, "api_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return {"error": message}


def error_response(path: str, status: int, message: str, code: str | None,
                   headers: dict[str, str] | None = None,
                   server_document: Any = None) -> JSONResponse:
    """`error_body` as a response with that status; a model server's own error document
    instead when it is in the shape of the API the client called."""
    body = (server_document if in_the_shape_of(path, server_document)
            else error_body(path, status, message, code))
    return JSONResponse(body, status_code=status, headers=headers)


def in_the_shape_of(path: str, document: Any) -> bool:
    """Whether `document` is an error in the shape of `path`'s API (error_body's)."""
    error = document.get("error") if isinstance(document, dict) else None
    if path.startswith("/v1/"):
        return isinstance(error, dict) and isinstance(error.get("message"), str)
    return isinstance(error, str)


def model_failure(exc: ModelError, kept: bool) -> ApiError:
    """A model failure during a relayed chat; `kept`: the request's new messages are
    stored. The model server's own answer as it wrote it — its document whole when it is
    in the calling API's shape, else its text with no field of Hilo's (no `code`) — and
    Hilo's hint in a header; Hilo's message when the server gave none (down, too slow,
    cut off)."""
    hint = f"{exc} (Hilo kept your message: send it again to retry)" if kept else str(exc)
    if exc.server_answer is None:
        return ApiError(exc.http_status, hint, exc.code)
    status, text = exc.server_answer
    return ApiError(status, text, None, {HINT_HEADER: header_text(hint)}, exc.server_document)


def turn_error(exc: ModelError) -> ApiError:
    """A model failure during a chat turn, whose user message is already stored."""
    return model_failure(exc, kept=True)


def header_text(text: str) -> str:
    """`text` as an HTTP header value can carry it: one line of ASCII."""
    return " ".join(text.replace("\u2014", "-").split()).encode("ascii", "replace").decode()


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            why = (error.get("ctx") or {}).get("error") or error.get("msg", "")
            return 400, f"the request body is not valid JSON: {why}", "invalid_json"
        if tuple(error.get("loc", ())) == ("body",):
            return 400, "the request body must be a JSON object", "invalid_json"
        loc = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append(f"{loc or 'body'}: {error.get('msg', 'invalid')}")
    return 422, "invalid request: " + "; ".join(problems), "invalid_request"


def install_error_handlers(app: Starlette) -> None:
    """Answer the HiloError family and unknown routes and methods in the caller's shape."""

    async def hilo_error(request: Request, exc: HiloError) -> JSONResponse:
        headers = ({"Retry-After": DISK_FULL_RETRY_AFTER_SECONDS}
                   if isinstance(exc, InsufficientStorage) else getattr(exc, "headers", None))
        return error_response(request.url.path, exc.http_status, exc.message, exc.code, headers,
                              getattr(exc, "server_document", None))

    async def full_disk(request: Request, exc: apsw.FullError) -> JSONResponse:
        # A read or a connection outside the writer (temporary files, the queue) ran out
        # of room: the same answer as a write the writer could not store.
        return await hilo_error(request, disk_full(request.app.state.config.data_dir, exc))

    async def corrupt_database(request: Request, exc: apsw.Error) -> JSONResponse:
        # Pages garbled under a running server: 503 with what to do, not a bare 500.
        memory_db = DataDir.of(request.app.state.config).memory_db
        return await hilo_error(request, corrupt_memory(memory_db, f"is damaged ({exc})"))

    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if isinstance(exc.__cause__, RecursionError):  # FastAPI could not parse the body
            failure = json_too_deep()
            return error_response(request.url.path, failure.http_status, failure.message,
                                  failure.code)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}; see /openapi.json"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see /openapi.json"
        return error_response(request.url.path, exc.status_code, message, "http_error",
                              getattr(exc, "headers", None))

    app.add_exception_handler(HiloError, hilo_error)
    app.add_exception_handler(apsw.FullError, full_disk)
    app.add_exception_handler(apsw.CorruptError, corrupt_database)
    app.add_exception_handler(apsw.NotADBError, corrupt_database)
    app.add_exception_handler(StarletteHTTPException, http_error)


def install_validation_errors(api: FastAPI) -> None:
    """Answer FastAPI's invalid requests (its routes' typed parameters) in the caller's
    shape."""
    # start-up: FastAPI is loaded only with the documented API (app/serve/documented.py)
    from fastapi.exceptions import RequestValidationError

    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message, code = _validation_message(exc)
        return error_response(request.url.path, status, message, code)

    api.add_exception_handler(RequestValidationError, invalid_request)
