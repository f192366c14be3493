"""The learn wing: what the workers learn from a conversation. Plain functions of
(writer, model, config); the queue (workers/) only schedules and retries them.

    session.py      a session's turns → profile, facts and cards, in as few model calls as it can
    distill.py      a turn → profile attributes and dated facts       (fallback: capture.py)
    compact.py      old events → context cards                        (fallback: extractive.py)
    diary_entry.py  an ended session → a diary entry                  (fallback: extractive.py)
    consolidate.py  merge duplicates, fold old cards, decay importance
    embed.py        vectors for events, facts and cards, and the re-embed backfill
    tool_chains.py  the tool chains in stored tool events → macros
    model_output.py asking the model for JSON (bounded schemas, output limits) and judging the answer
    grounding.py    what a message supports: the rule a learned item passes, and its source
    engine_time.py  what learning costs the engine, beside the chat; whether its model answers
    quoting.py      how a learning prompt shows a message: outside content quoted, never the user's
    reading.py      read-only connections beside the writer
"""
