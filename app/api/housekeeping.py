"""Requests that are a client's own housekeeping, not the user speaking.

Chat front-ends ask the model for things beside the conversation: Open WebUI sends,
with every message, requests for the chat's title, its tags and follow-up questions
(the chat history quoted inside the prompt), and others for search queries and
autocompletion. Remembered, they would become things the user said. They are relayed
to the model as they are — no memory added — and stored nowhere.

A request is housekeeping when the client says so (`X-Hilo-Remember: no`); when it is
one of Open WebUI's task prompts, known by its structure rather than its wording, which
changes between releases (`is_task_prompt`); or when one of its system messages or its
last user message matches one of `[server] housekeeping_patterns` (regular expressions;
the defaults are Open WebUI's other background prompts, which have no such structure).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from app.api.conversation import Conversation
from app.config import Config
from app.model.messages import SYSTEM_ROLES, message_text

__all__ = ["REMEMBER_HEADER", "FORGETFUL", "is_task_prompt", "is_housekeeping"]

REMEMBER_HEADER = "x-hilo-remember"
FORGETFUL = ("no", "false", "0", "off")

# Open WebUI's task prompts open with a "### Task:" heading, and either quote the chat
# in a <chat_history> block or ask, under an "Output" heading, for JSON. Its RAG prompt
# opens the same way but does neither: that one is the user asking.
_TASK_HEADING = re.compile(r"\A\s*#{1,6}\s*\**\s*Task\s*\**\s*:", re.IGNORECASE)
_QUOTED_CHAT = re.compile(r"<chat_history>.*</chat_history>", re.DOTALL)
_JSON_OUTPUT = re.compile(r"^#{1,6}\s*\**\s*Output\b[^\n]*\n[^\n]*\bJSON\b",
                          re.MULTILINE | re.IGNORECASE)


def is_task_prompt(text: str) -> bool:
    """Whether a message is one of Open WebUI's task prompts (title, tags, follow-ups,
    search queries, autocompletion, image prompt), whatever their wording."""
    return bool(_TASK_HEADING.search(text)
                and (_QUOTED_CHAT.search(text) or _JSON_OUTPUT.search(text)))


@lru_cache(maxsize=8)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


def is_housekeeping(config: Config, headers: Mapping[str, str],
                    conversation: Conversation) -> bool:
    if headers.get(REMEMBER_HEADER, "").strip().lower() in FORGETFUL:
        return True
    turns = conversation.turns
    # A task prompt is the whole request; in a conversation it is something said.
    if len(turns) == 1 and turns[0].get("role") == "user" and is_task_prompt(
            message_text(turns[0])):
        return True
    texts = [message_text(m) for m in conversation.messages if m.get("role") in SYSTEM_ROLES]
    users = [m for m in turns if m.get("role") == "user"]
    if users:
        texts.append(message_text(users[-1]))
    patterns = _compiled(config.server.housekeeping_patterns)
    return any(pattern.search(text) for pattern in patterns for text in texts)
