"""Relaying a client's chat request in its own API, and reading the reply on the side.

`relayed_chat` passes the server's frames on unchanged, as they arrive;
`translated_chat` answers an Ollama client from an OpenAI-compatible server
(app/model/translate.py). A request relayed unchanged and unread is transport.Relayed.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from app.model.replies import ReplyRecord
from app.model.stream import ChatReply
from app.model.translate import OpenAIReplyAsOllama, ollama_request_as_openai
from app.model.transport import Transport, frame_field, media_type

__all__ = ["relayed_chat", "translated_chat"]


def _lines(chunks: Iterator[bytes]) -> Iterator[list[bytes]]:
    """Complete lines (each with its newline), as many as each read brought; a last
    line without a newline comes at the end."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        cut = pending.rfind(b"\n") + 1
        if cut:
            yield pending[:cut].splitlines(keepends=True)
            pending = pending[cut:]
    if pending:
        yield [pending]


def _sse_data(line: bytes) -> bytes | None:
    """The payload of an SSE `data:` line; None for separators, comments and names."""
    return line[len(b"data:"):].strip() if line.startswith(b"data:") else None


def _with_usage(body: dict[str, Any], api: str) -> tuple[dict[str, Any], bool]:
    """The request with an OpenAI stream's usage asked for, and whether Hilo added that.

    The server's prompt count calibrates Hilo's token estimates (app/model/token_count.py):
    without it they stay a guess, and a stretch of the prompt may end long before the
    budget is really full. The usage event the client did not ask for is not passed on."""
    options = body.get("stream_options")
    if api != "openai" or not body.get("stream") or (
            isinstance(options, Mapping) and options.get("include_usage")):
        return body, False
    options = dict(options) if isinstance(options, Mapping) else {}
    return {**body, "stream_options": {**options, "include_usage": True}}, True


def _relay_reply(record: ReplyRecord, model: str) -> ChatReply:
    return ChatReply(text=record.text, model=model, prompt_eval_count=record.prompt_eval_count,
                     eval_count=record.eval_count, done_reason=record.done_reason,
                     prompt_cached_count=record.prompt_cached_count, engine=record.engine)


def relayed_chat(transport: Transport, path: str, body: dict[str, Any], api: str,
                  record: ReplyRecord, model: str,
                  sent: dict[str, Any]) -> Generator[bytes, None, ChatReply]:
    """The reply to a chat request relayed in the client's own API, passed on as it
    arrives, each frame read into `record` on the way."""
    endpoint = f"POST {path}"
    read = record.read_ollama if api == "ollama" else record.read_openai
    body, added_usage = _with_usage(body, api)
    with transport.open_response(path, body, record.text_parts, sent) as response:
        record.media_type = media_type(response)
        yield b""
        if not record.streaming:
            data = response.read()
            read(transport.decode_line(data.decode("utf-8", "replace"), endpoint))
            record.finished = True
            yield data
            return _relay_reply(record, model)
        unasked = False  # within the usage event the client did not ask for
        for lines in _lines(response.iter_bytes()):
            passed = bytearray()
            for line in lines:
                payload = line.strip() if api == "ollama" else _sse_data(line)
                if payload == b"[DONE]":
                    record.end_of_openai_stream()
                elif payload:
                    frame = transport.decode_line(payload.decode("utf-8", "replace"), endpoint)
                    if "error" in frame:
                        if passed:
                            yield bytes(passed)
                        raise transport.interrupted(record.text_parts,
                                                    f"server error: {_error_text(frame)}")
                    read(frame)
                    unasked = added_usage and not frame.get("choices") and "usage" in frame
                if unasked:
                    unasked = bool(line.strip())  # its blank separator goes with it
                    continue
                passed += line
            if passed:
                yield bytes(passed)
    if api == "openai" and not record.finished and record.done_reason:
        record.end_of_openai_stream()  # some servers close without [DONE]
    if not record.finished:
        raise transport.interrupted(record.text_parts, "the stream ended before the model finished")
    return _relay_reply(record, model)


def translated_chat(transport: Transport, path: str, body: Mapping[str, Any],
                     record: ReplyRecord, model: str,
                     sent: dict[str, Any]) -> Generator[bytes, None, ChatReply]:
    """An Ollama client's chat request, answered by an OpenAI-compatible server: the
    request and each reply frame translated (app.model.translate)."""
    endpoint = f"POST {path}"
    request = ollama_request_as_openai(body)
    as_ollama = OpenAIReplyAsOllama(model, record)
    with transport.open_response(path, request, record.text_parts, sent) as response:
        streaming = media_type(response).startswith("text/event-stream")
        record.media_type = "application/x-ndjson" if streaming else "application/json"
        yield b""
        if not streaming:
            completion = transport.decode_line(response.read().decode("utf-8", "replace"), endpoint)
            whole = as_ollama.whole(completion)
            record.finished = True
            yield _ndjson(whole)
            return _relay_reply(record, model)
        for lines in _lines(response.iter_bytes()):
            frames: list[dict[str, Any]] = []
            for line in lines:
                payload = _sse_data(line)
                if payload == b"[DONE]":
                    frames += as_ollama.end()
                elif payload:
                    frame = transport.decode_line(payload.decode("utf-8", "replace"), endpoint)
                    if "error" in frame:
                        if frames:
                            yield b"".join(_ndjson(f) for f in frames)
                        raise transport.interrupted(record.text_parts,
                                                    f"server error: {_error_text(frame)}")
                    frames += as_ollama.chunk(frame)
            if frames:
                yield b"".join(_ndjson(f) for f in frames)
    if not record.finished and record.done_reason:
        yield b"".join(_ndjson(f) for f in as_ollama.end())
    if not record.finished:
        raise transport.interrupted(record.text_parts, "the stream ended before the model finished")
    return _relay_reply(record, model)


def _ndjson(frame: Mapping[str, Any]) -> bytes:
    return json.dumps(frame, ensure_ascii=False).encode() + b"\n"


def _error_text(frame: Mapping[str, Any]) -> str:
    return str(frame_field(frame, "error", "message") or frame["error"])
