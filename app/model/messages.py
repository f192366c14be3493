"""Ollama's and OpenAI's chat messages: reading them, and what Hilo keeps of a chat.

Hilo relays a client's chat request in the client's own API, changing only its
messages, and reads the reply on the side to store it. This module knows both shapes:
a message's text and images, its role, and a text put before or after its own. The
other concepts of a chat have modules of their own: tool calls (app/model/tool_calls.py),
the client's request (app/model/client_chat.py), a reply and the chat that got it
(app/model/replies.py). Translating between the two APIs is app/model/translate.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from app.events import InvalidEvent
from app.sanitize import clean_text

__all__ = ["Message", "ToolSpec", "APIS", "SYSTEM_ROLES", "CONVERSATION_ROLES", "message_text",
           "image_count", "quotes_retrieved_documents", "text_to_store", "is_conversation",
           "stored_role", "with_text_appended", "with_text_prepended"]

Message = Mapping[str, Any]  # {"role": "user" | "assistant" | "system" | "tool", "content": str}
# Tools offered to the model, in the chat APIs' shape (Ollama takes OpenAI's):
# {"type": "function", "function": {"name", "description", "parameters": <JSON schema>}}
ToolSpec = Mapping[str, Any]

APIS = ("ollama", "openai")
SYSTEM_ROLES = ("system", "developer")
# Roles that are the conversation itself (OpenAI's legacy "function" is a tool result).
CONVERSATION_ROLES = ("user", "assistant", "tool", "function")


# ----------------------------------------------------------------------------- messages


def message_text(message: Mapping[str, Any] | None) -> str:
    """A message's text, cleaned (lone surrogates, NUL bytes: app.sanitize.clean_text);
    of OpenAI's content parts, the text parts. A text part whose `text` is not a string
    is refused (InvalidEvent), never stored as a Python repr."""
    content = (message or {}).get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return clean_text(content)
    if isinstance(content, list):
        texts = [part.get("text", "") for part in content
                 if isinstance(part, Mapping) and part.get("type", "text") == "text"]
        if not all(isinstance(text, str) for text in texts):
            raise InvalidEvent('the "text" of a text content part must be a string')
        return clean_text("".join(texts))
    raise InvalidEvent("a message's content must be a string or a list of content parts")


def image_count(message: Mapping[str, Any]) -> int:
    """Images a message carries: Ollama's `images`, OpenAI's image_url parts."""
    count = len(message.get("images") or [])
    content = message.get("content")
    if isinstance(content, list):
        count += sum(1 for part in content
                     if isinstance(part, Mapping) and part.get("type") in ("image_url", "image"))
    return count


# Documents a client's search found, quoted into a message, recognised by the structure
# RAG templates give them (tests/fixtures/rag.py holds each form): Open WebUI's
# (DEFAULT_RAG_TEMPLATE in its config.py) wraps them in <context>, each a <source id=…> (or
# in 0.5 a <source_id> and <source_context>), in the user's message or the system message
# with RAG_SYSTEM_CONTEXT; others use <documents>/<document>, AnythingLLM "[CONTEXT n]:",
# LlamaIndex's and LangChain's templates their opening sentence. An opening tag is
# enough: a template edited, or a message cut short, may never close it.
_RETRIEVED_DOCUMENTS = re.compile(
    r"<\s*(?:context|sources?|source_id|source_context|documents?|document_content"
    r"|search_results?)\b[^<>]*>"
    r"|^\s*\[CONTEXT \d+\]:"
    r"|^\s*Context information is below\b"
    r"|\bUse the following (?:pieces of retrieved )?context\b"
    r"|\bRespond to the user query using the provided context\b",
    re.IGNORECASE | re.MULTILINE)


def quotes_retrieved_documents(message: Mapping[str, Any]) -> bool:
    """Whether the message quotes documents a client retrieved: text no person at this
    machine wrote, content from outside (app/events.py) though it came in a user's turn."""
    return _RETRIEVED_DOCUMENTS.search(message_text(message)) is not None


def text_to_store(message: Mapping[str, Any]) -> str:
    """What Hilo stores of a message: its text, and a note of the images it carried."""
    text = message_text(message)
    images = image_count(message)
    if images:
        note = f"[{images} image{'s' if images > 1 else ''} attached]"
        text = f"{text} {note}" if text else note
    return text


def is_conversation(message: Mapping[str, Any]) -> bool:
    return message.get("role") in CONVERSATION_ROLES


def stored_role(message: Mapping[str, Any]) -> str:
    role = str(message.get("role"))
    return "tool" if role == "function" else role


def with_text_appended(message: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The message with `text` after its own, whatever shape its content has."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": text}]}
    return {**message, "content": (content or "") + text}


def with_text_prepended(message: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The message with `text` before its own, whatever shape its content has."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": text}, *content]}
    return {**message, "content": text + (content or "")}
