"""The scripted conversation of tests/bench/localmodel.py, and the model's side of it.

Forty turns of a person working on a project with a local assistant: what they say
(some of it worth remembering: each such turn carries the fact a distillation should
find), and what the assistant answers. `model_reply` is the fake model server's
responder: the scripted answer to a chat turn, and, asked for JSON, a distillation that
follows what the user said — facts from the USER lines it was shown, a card summary, a
diary entry — so that what the workers store depends on what they read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.fake_ollama import learning_sources


@dataclass(frozen=True)
class Turn:
    user: str
    reply: str
    fact: tuple[str, str, str] | None = None  # (category, key, value) the user stated


TURNS: list[Turn] = [
    Turn("Morning! I'm picking up the billing service refactor again today.",
         "Good morning. Where did you leave it: the invoice generator or the payment webhooks?"),
    Turn("The webhooks. We moved them to a queue last week, the retries are what's left.",
         "Then the open question is the retry policy: how many attempts, and what happens to a "
         "webhook that keeps failing."),
    Turn("We agreed on five attempts with exponential backoff, then it goes to a dead-letter table.",
         "Five attempts with backoff and a dead-letter table is a sound policy; worth logging each "
         "attempt with the provider's status code.",
         ("decision", "webhook retries", "five attempts with exponential backoff, then a dead-letter table")),
    Turn("By the way, our staging database is Postgres 15 and it listens on port 5433, not 5432.",
         "Noted: staging is Postgres 15 on port 5433. Connection strings in the test config should "
         "say so explicitly.",
         ("fact", "staging database", "Postgres 15 on port 5433")),
    Turn("Can you sketch the table for the dead letters? Columns only, no SQL yet.",
         "id, webhook_id, provider, payload, last_status, attempts, first_failed_at, last_failed_at, "
         "resolved_at. An index on resolved_at for the open ones."),
    Turn("Add a reason column, free text, so support can read why it failed.",
         "Added: reason, free text, filled from the provider's last error message, truncated to 500 "
         "characters."),
    Turn("I write everything in neovim, so keep snippets short, I paste them into a split.",
         "Understood, short snippets that fit a split.",
         ("preference", "editor", "neovim, short snippets")),
    Turn("How should the worker pick up rows to retry? Polling every few seconds feels wasteful.",
         "A due_at column with an index and a query for due rows ordered by due_at, woken by "
         "LISTEN/NOTIFY when a row is inserted, with a slow poll as a safety net."),
    Turn("LISTEN/NOTIFY sounds right. Our ops team only allows Postgres extensions from the "
         "contrib package though.",
         "LISTEN/NOTIFY is core Postgres, no extension needed, so that constraint does not bite here.",
         ("fact", "postgres extensions", "ops only allows extensions from the contrib package")),
    Turn("Good. What's a sane backoff base? The payment provider rate-limits us at 20 requests per second.",
         "Start at 2 seconds and double: 2, 4, 8, 16, 32. With 20 requests per second you will not "
         "hit the limit from retries alone.",
         ("fact", "payment provider rate limit", "20 requests per second")),
    Turn("We'll go with base 2 seconds then.",
         "Base 2 seconds, doubling, five attempts: the last retry is about a minute after the first "
         "failure.",
         ("decision", "backoff base", "2 seconds, doubling")),
    Turn("Next thing: the invoice PDFs. They're generated with WeasyPrint and it's slow.",
         "WeasyPrint is slow on large tables; caching the CSS and rendering in a separate process "
         "pool usually halves the time."),
    Turn("How slow is slow? About 4 seconds per invoice with 200 line items.",
         "4 seconds for 200 lines is in the usual range for WeasyPrint; most of it is layout. A "
         "pool of workers parallelises across invoices, not within one.",
         ("fact", "invoice pdf time", "about 4 seconds per invoice with 200 line items")),
    Turn("Our batch run on the first of the month does about 12000 invoices.",
         "12000 invoices at 4 seconds is over 13 hours on one core; with 8 workers it is under two "
         "hours.",
         ("fact", "monthly invoice batch", "about 12000 invoices on the first of the month")),
    Turn("The batch box has 8 cores, so your 8 workers fits.",
         "Then 8 workers and a queue of invoice ids; keep memory in check by recycling workers every "
         "few hundred invoices.",
         ("fact", "batch machine", "8 cores")),
    Turn("Why recycle them?",
         "WeasyPrint and its font caches grow over long runs; restarting a worker after a few "
         "hundred documents keeps memory flat."),
    Turn("Fine, max 300 invoices per worker then.",
         "300 per worker: with 12000 invoices that is 40 worker lifetimes, cheap compared to the "
         "rendering.",
         ("decision", "worker recycling", "restart each pdf worker after 300 invoices")),
    Turn("Switching topics: I'm on call next week, Monday to Friday.",
         "Noted that you are on call next week, Monday to Friday. Anything to prepare?",
         ("fact", "on call", "next week, Monday to Friday")),
    Turn("Remind me what alert fires when the webhook queue backs up?",
         "You have not named one yet; a queue-depth alert above a few thousand pending webhooks "
         "for five minutes would be a good start."),
    Turn("Let's say 5000 pending for ten minutes pages the on-call.",
         "Alert: more than 5000 pending webhooks for ten minutes pages the on-call person.",
         ("decision", "webhook queue alert", "page on-call when over 5000 pending for ten minutes")),
    Turn("And a warning at 1000, only to Slack.",
         "Warning at 1000 pending to Slack, page at 5000 for ten minutes."),
    Turn("Which Slack channel? We use #billing-alerts for everything billing.",
         "Both go to #billing-alerts; the page also goes to the on-call rotation.",
         ("fact", "alert channel", "#billing-alerts")),
    Turn("Back to the dead letters. Who resolves them, support or engineering?",
         "Support first, with a button to replay; engineering only when the replay fails twice."),
    Turn("Support, with a replay button. Engineering if replay fails twice.",
         "Agreed; the replay should go through the same retry path, so it is logged like the rest.",
         ("decision", "dead letter handling", "support replays, engineering after two failed replays")),
    Turn("My manager Priya wants a short write-up by Thursday.",
         "A one-page write-up for Priya by Thursday: the policy, the table, the alerts and the open "
         "questions.",
         ("fact", "manager", "Priya, wants a write-up by Thursday")),
    Turn("Keep the write-up in plain markdown, she reads it on her phone.",
         "Plain markdown, short sections, no wide tables: fine on a phone.",
         ("preference", "write-up format", "plain markdown, readable on a phone")),
    Turn("What are the open questions, in your view?",
         "Idempotency of replays, how long dead letters are kept, and whether the provider's own "
         "retries overlap with ours."),
    Turn("The provider retries 3 times within an hour on its side.",
         "Then ours and theirs can overlap in the first hour; idempotency keys on our handler make "
         "that harmless.",
         ("fact", "provider retries", "3 times within an hour on its side")),
    Turn("We already store the provider's event id, we can dedupe on it.",
         "Deduplicating on the provider's event id with a unique index solves both the overlap and "
         "replays."),
    Turn("Dead letters are kept 90 days, legal wants that.",
         "90 days for dead letters; a nightly job can delete resolved ones older than that.",
         ("fact", "dead letter retention", "90 days, required by legal")),
    Turn("Can the nightly cleanup run in the same worker as retries?",
         "It can, as a scheduled task in the same process; it is a single indexed delete."),
    Turn("OK. I think the design is done. Let me list the tasks for the sprint.",
         "Go ahead; I will keep them in order."),
    Turn("One: the dead_letters table and migration. Two: the retry worker with LISTEN/NOTIFY.",
         "1. dead_letters table and migration. 2. retry worker with LISTEN/NOTIFY."),
    Turn("Three: the replay button for support. Four: the alerts.",
         "3. replay button for support. 4. alerts at 1000 and 5000 pending."),
    Turn("Five: the PDF worker pool with recycling at 300.",
         "5. PDF worker pool, 8 workers, each recycled after 300 invoices."),
    Turn("Estimate? I'd say two weeks for all five.",
         "Two weeks is plausible if the PDF pool is independent of the rest; it is the riskiest."),
    Turn("We start the sprint on the 14th.",
         "Sprint starts on the 14th; the write-up for Priya is due before that, on Thursday.",
         ("fact", "sprint start", "the 14th")),
    Turn("Remind me what port staging used again?",
         "Staging is Postgres 15 on port 5433."),
    Turn("Thanks. I'll start on the migration after lunch.",
         "Enjoy lunch; the migration is task one."),
    Turn("That's it for now, thanks for the help.",
         "You're welcome. Good luck with the sprint."),
]

@dataclass(frozen=True)
class FollowUp:
    """A new conversation, three seconds after the first ends, asks about a fact of the
    first: `words` must be in its first prompt, and the fact (`key`) distilled soon."""

    key: str
    question: str
    words: str


# By the fact's key; the bench asks about the latest of these its conversation reached.
FOLLOW_UPS = [
    FollowUp("webhook retries", "Quick one: how many attempts did we settle on for webhook "
             "retries?", "dead-letter table"),
    FollowUp("backoff base", "Quick one: which backoff base did we pick for the retries?",
             "2 seconds"),
    FollowUp("sprint start", "Quick one: when does our sprint start?", "the 14th"),
]


def follow_up_for(turns: list[Turn]) -> FollowUp:
    """The follow-up about the latest fact the conversation stated."""
    said = [turn.fact[1] for turn in turns if turn.fact]
    return max((f for f in FOLLOW_UPS if f.key in said), key=lambda f: said.index(f.key))

SYSTEM_PROMPT = "You are a helpful assistant for a software engineer. Answer briefly."

# What the user's memory held before the conversation: a profile, facts, a card and a
# diary entry from earlier sessions, and the events those came from.
SEED_PROFILE = {"name": "Dana", "role": "backend engineer", "team": "billing", "city": "Lisbon"}
SEED_FACTS = [
    ("fact", "billing service language", "Python 3.12 with FastAPI"),
    ("fact", "payment provider", "Adyen"),
    ("preference", "code review", "small pull requests, one change each"),
    ("decision", "webhook transport", "webhooks moved to a Redis queue"),
    ("fact", "deploy day", "deploys go out on Tuesdays and Thursdays"),
    ("solution", "flaky invoice test", "freeze time with time-machine in the invoice tests"),
]
SEED_SESSION = [
    ("user", "We need to move the payment webhooks off the request path, they time out."),
    ("assistant", "A queue between the endpoint and the handler: acknowledge fast, process later."),
    ("user", "We already run Redis for sessions, can we use that as the queue?"),
    ("assistant", "Yes, a Redis list or stream works; streams give you consumer groups and acks."),
    ("user", "Streams then. The handler is Python 3.12 with FastAPI."),
    ("assistant", "A small consumer process reading the stream with XREADGROUP fits that stack."),
    ("user", "The invoice tests were flaky around midnight, I froze time with time-machine."),
    ("assistant", "Freezing time is the right fix for date-boundary flakiness."),
]
SEED_CARD = ("Webhooks moved off the request path to a Redis stream consumed with XREADGROUP; "
             "invoice tests fixed by freezing time.", "webhooks, redis, streams, invoices, tests")
SEED_DIARY = ("Dana moved the payment webhooks to a Redis stream and fixed the flaky invoice "
              "tests; retries for failed webhooks were left for the next session.")


# -- the model's side ---------------------------------------------------------------------------

_FACTS_BY_TEXT = {turn.user: turn.fact for turn in TURNS if turn.fact}
_REPLIES = {turn.user: turn.reply for turn in TURNS}


def _schema_properties(body: dict) -> dict:
    fmt = body.get("format")
    if isinstance(fmt, dict):
        return fmt.get("properties") or {}
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return schema.get("properties") or {}


def model_reply(body: dict) -> Any:
    """The fake model: scripted chat answers; distillations that follow the USER lines."""
    props = _schema_properties(body)
    if not props:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        users = [m for m in messages if m.get("role") == "user"]
        said = users[-1].get("content") if users else ""
        return _REPLIES.get(said if isinstance(said, str) else "")
    said = learning_sources(body)  # quoted, or pointed at in the chat the call continues
    reply: dict[str, Any] = {}
    if "facts" in props:
        facts = [_FACTS_BY_TEXT[line] for line in said if line in _FACTS_BY_TEXT]
        reply["profile"] = {}
        reply["facts"] = [{"category": c, "key": k, "value": v} for c, k, v in facts]
    if "summary" in props:
        words = " ".join(said)[:240] or "the conversation went on"
        # As a grammar-constrained server writes it: within the schema's bounds.
        reply["summary"] = f"The user discussed: {words}"[:props["summary"].get("maxLength")]
        reply["keywords"] = sorted({w.lower() for w in re.findall(r"[A-Za-z]{6,}", words)})[
            :props.get("keywords", {}).get("maxItems", 6)] or ["work"]
    if "entry" in props:
        reply["entry"] = "Dana designed webhook retries, dead letters, alerts and the PDF worker pool."
    return reply or None
