-- What each model call of a chat turn was sent, for the turn inspector (app/turn/records.py):
-- the prompt's size by layer, what was recalled and why (ids with their stream ranks),
-- and the server's own counts, cache hits included. No text: the events hold the
-- conversation, and a recalled item forgotten since must leave this record too, so the
-- inspector looks items up by id and shows what is gone as gone.

CREATE TABLE turn_records (
    id             INTEGER PRIMARY KEY,
    user_id        TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    event_id       INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,  -- the message
    reply_event_id INTEGER REFERENCES events (id) ON DELETE SET NULL,
    created_at     TEXT NOT NULL,
    model          TEXT NOT NULL,
    tokens         INTEGER NOT NULL,    -- Hilo's estimate of the prompt
    budget         INTEGER NOT NULL,
    prompt_tokens  INTEGER,             -- the server's count, when it reported one
    cached_tokens  INTEGER,             -- of those, found in its prompt cache
    reply_tokens   INTEGER,
    error          TEXT,                -- the model's failure, when there was no reply
    record_json    TEXT NOT NULL        -- layers → tokens, recalled ids with ranks, stretch
);
CREATE INDEX turn_records_by_user ON turn_records (user_id, id);
CREATE INDEX turn_records_by_event ON turn_records (event_id);
CREATE INDEX turn_records_by_reply ON turn_records (reply_event_id);
