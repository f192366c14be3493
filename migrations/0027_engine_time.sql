-- What model calls cost the engine (app/model/usage.py): the engine's own time for each
-- chat turn's call, beside its token counts, and one row per learning call (distill, a
-- chunk's facts and card, compact, diary, consolidate) with its tokens, time, budget and
-- how it ended. The queue view sets learning's engine seconds per chat turn against the
-- chat's own (app/learn/engine_time.py); `hilo doctor` reads whether the learning model
-- still answers. No text of the conversation is kept here.

ALTER TABLE turn_records ADD COLUMN engine_ms REAL;      -- the engine's time for the call
ALTER TABLE turn_records ADD COLUMN engine_clock TEXT;   -- 'engine' (the server's own) or 'wall'

CREATE TABLE learning_calls (
    id               INTEGER PRIMARY KEY,
    created_at       TEXT NOT NULL,          -- when it was sent
    job              TEXT NOT NULL,          -- distill, learn, compact, diary, consolidate
    server           TEXT NOT NULL,          -- the server's URL, without user name or password
    model            TEXT NOT NULL,
    outcome          TEXT NOT NULL CHECK (outcome IN
                         ('answered', 'too_long', 'past_deadline', 'gave_way', 'failed')),
    prompt_tokens    INTEGER,                -- the server's counts, when it reported them
    cached_tokens    INTEGER,
    reply_tokens     INTEGER,
    engine_ms        REAL NOT NULL,          -- the engine's own time, else the wall time
    engine_clock     TEXT NOT NULL CHECK (engine_clock IN ('engine', 'wall')),
    wall_ms          REAL NOT NULL,
    max_tokens       INTEGER,                -- the call's budget
    deadline_seconds REAL NOT NULL,
    detail           TEXT                    -- what went wrong (redacted), for another outcome
);
CREATE INDEX learning_calls_by_time ON learning_calls (created_at);
