"""Requests that are a client's own housekeeping, not the user speaking.

Chat front-ends ask the model for things beside the conversation: Open WebUI sends,
with every message, requests for the chat's title, its tags and follow-up questions
(the chat history quoted inside the prompt), and others for search queries and
autocompletion. Remembered, they would become things the user said. They are relayed
to the model as they are — no memory added — and stored nowhere.

A request is housekeeping when the client says so (`X-Hilo-Remember: no`), or when
one of its system messages or its last user message matches one of
`[server] housekeeping_patterns` (regular expressions; the defaults are Open WebUI's
task prompts).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping

from app.api.conversation import Conversation
from app.model.messages import SYSTEM_ROLES, message_text
from app.config import Config

REMEMBER_HEADER = "x-hilo-remember"
FORGETFUL = ("no", "false", "0", "off")


@lru_cache(maxsize=8)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


def is_housekeeping(config: Config, headers: Mapping[str, str],
                    conversation: Conversation) -> bool:
    if headers.get(REMEMBER_HEADER, "").strip().lower() in FORGETFUL:
        return True
    texts = [message_text(m) for m in conversation.messages if m.get("role") in SYSTEM_ROLES]
    users = [m for m in conversation.turns if m.get("role") == "user"]
    if users:
        texts.append(message_text(users[-1]))
    patterns = _compiled(config.server.housekeeping_patterns)
    return any(pattern.search(text) for pattern in patterns for text in texts)
