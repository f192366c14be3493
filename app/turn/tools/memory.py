"""Memory tools: the model remembers, recalls, forgets and reads the profile through the
same library calls as the user's own edits (app/memory, app/recall). What it writes while
reading content from outside is marked so, like what the workers learn."""

from __future__ import annotations

import json
from typing import Any

from app.memory import CATEGORIES, is_outside, list_profile, remember_fact, set_profile
from app.memory.forget import forget as forget_for_good
from app.recall.fusion import search_memory
from app.turn.tools.registry import Tool, ToolContext, ToolFailed, ToolResult, schema

__all__ = ["RECALL_LIMIT", "remember", "recall", "forget", "profile", "TOOLS"]

RECALL_LIMIT = 5


def remember(ctx: ToolContext, args: dict[str, Any]) -> str:
    category, key, value = args.get("category") or "fact", args["key"], args["value"]
    edited = ctx.service.edit(lambda con: remember_fact(
        con, ctx.user_id, category, key, value,
        similarity=ctx.config.memory.dedupe_similarity,
        from_outside=is_outside("hilo", reading=ctx.outside_content)))
    if edited.fact is None:
        return f"not remembered ({edited.action}): the user asked to forget this before"
    fact = edited.fact
    return f"{edited.action}: fact #{fact.id} ({fact.category}) {fact.key}: {fact.value}"


def recall(ctx: ToolContext, args: dict[str, Any]) -> str | ToolResult:
    limit = min(max(int(args.get("limit") or RECALL_LIMIT), 1), 50)
    hits = search_memory(ctx.service.reader(), ctx.user_id, args["query"], limit,
                         recall=ctx.service.recall, embedder=ctx.service.query_embedder)
    if not hits:
        return f"nothing in memory matches {args['query']!r}"
    text = "\n".join(json.dumps(hit.to_dict(bool(args.get("explain"))), ensure_ascii=False)
                     for hit in hits)
    return ToolResult(text, ok=True, from_outside=any(hit.from_outside for hit in hits))


def forget(ctx: ToolContext, args: dict[str, Any]) -> str:
    fact_id = args["fact_id"]
    ctx.fresh_approval(f"forget fact #{fact_id}")  # a page must not erase what the user said
    gone = forget_for_good(ctx.service.writer, ctx.user_id, fact_id, worker="user")
    if gone is None:
        raise ToolFailed(f"there is no current fact #{fact_id}: recall shows the facts' ids")
    # Stored as the call's result: what was forgotten is not named again.
    return f"forgot fact #{fact_id} ({gone.category}) and {gone.versions} version(s) of it"


def profile(ctx: ToolContext, args: dict[str, Any]) -> str | ToolResult:
    key, value = args.get("key"), args.get("value")
    if (key is None) != (value is None):
        raise ToolFailed("to set a profile key give both key and value; give neither to read")
    if key is not None:
        action = ctx.service.edit(lambda con: set_profile(
            con, ctx.user_id, key, value, source="user", worker="user",
            from_outside=is_outside("hilo", reading=ctx.outside_content)))
        return f"{action}: {key.strip().casefold()}: {value.strip()}"
    entries = list_profile(ctx.service.reader(), ctx.user_id)
    return ToolResult("\n".join(f"{e.key}: {e.value}" for e in entries) or "the profile is empty",
                      ok=True, from_outside=any(e.from_outside for e in entries))


TOOLS = (
    Tool("remember",
         "Store a fact about the user for later conversations (one current fact per "
         "category and key; a new value replaces the old one, kept as history). Use when "
         "the user states something worth keeping. Example: "
         '{"key": "editor", "value": "Uses Helix, not Vim", "category": "preference"}',
         schema({"key": {"type": "string", "description": "a short name for what it is about"},
                 "value": {"type": "string", "description": "the fact, in a sentence"},
                 "category": {"type": "string", "enum": list(CATEGORIES)}},
                required=("key", "value")),
         remember),
    Tool("recall",
         "Search the memory (facts, summaries of earlier conversation, past messages) for "
         "words or meaning. Each hit has kind, id, text and date; explain=true adds each "
         'hit\'s rank per retrieval stream. Example: {"query": "project deadline"}',
         schema({"query": {"type": "string"},
                 "limit": {"type": "integer", "description": f"hits, default {RECALL_LIMIT}"},
                 "explain": {"type": "boolean"}}, required=("query",)),
         recall),
    Tool("forget",
         "Forget a fact for good (its value, history and vectors), by the id recall gives. "
         'Only when the user asks. Example: {"fact_id": 12}',
         schema({"fact_id": {"type": "integer"}}, required=("fact_id",)),
         forget),
    Tool("profile",
         "Read the user's profile (name, city, language, ...), or set one key with key and "
         'value. Examples: {} to read; {"key": "city", "value": "Lisbon"} to set',
         schema({"key": {"type": "string"}, "value": {"type": "string"}}),
         profile),
)
