-- Every layer of Hilo's memory (DESIGN §2). Every row carries user_id and every query
-- filters on it. Times are RFC 3339 UTC text ("2026-11-30T14:44:28.123456Z"), so they
-- sort as text and read well in any SQLite tool.

CREATE TABLE sessions (
    user_id       TEXT NOT NULL,
    id            TEXT NOT NULL,
    title         TEXT,
    started_at    TEXT NOT NULL,
    last_event_at TEXT NOT NULL,
    ended_at      TEXT,
    PRIMARY KEY (user_id, id)
) WITHOUT ROWID;

-- Layer 1: the raw conversation, the source of truth.
CREATE TABLE events (
    id              INTEGER PRIMARY KEY,
    uuid            TEXT NOT NULL UNIQUE,
    user_id         TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content         TEXT NOT NULL,
    original_length INTEGER,            -- set when content was truncated to the size cap
    tool_call_id    TEXT,
    tool_name       TEXT,
    tool_calls_json TEXT,
    created_at      TEXT NOT NULL,
    importance      REAL NOT NULL CHECK (importance BETWEEN 0 AND 1),
    compacted       INTEGER NOT NULL DEFAULT 0 CHECK (compacted IN (0, 1)),
    card_id         INTEGER REFERENCES context_cards (id) ON DELETE SET NULL,
    distilled_at    TEXT,
    consolidated_at TEXT,
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id)
);
CREATE INDEX events_by_session ON events (user_id, session_id, compacted, id);
CREATE INDEX events_by_user_time ON events (user_id, created_at);
CREATE INDEX events_undistilled ON events (user_id, id) WHERE distilled_at IS NULL;

-- Layer 2: compressed chunks of older conversation.
CREATE TABLE context_cards (
    id               INTEGER PRIMARY KEY,
    user_id          TEXT NOT NULL,
    session_id       TEXT,              -- NULL for cards folded across sessions
    summary          TEXT NOT NULL,
    keywords         TEXT NOT NULL DEFAULT '',
    first_event_id   INTEGER,
    last_event_id    INTEGER,
    event_count      INTEGER NOT NULL DEFAULT 0,
    level            INTEGER NOT NULL DEFAULT 0,  -- 0: a chunk of events; 1+: folded cards
    folded_into      INTEGER REFERENCES context_cards (id) ON DELETE SET NULL,
    is_extractive    INTEGER NOT NULL DEFAULT 0,  -- written without the model; re-summarise later
    importance       REAL NOT NULL DEFAULT 0.5,
    access_count     INTEGER NOT NULL DEFAULT 0,
    last_accessed_at TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
-- One chunk never yields two cards.
CREATE UNIQUE INDEX cards_one_per_chunk ON context_cards (user_id, session_id, first_event_id)
    WHERE level = 0;
CREATE INDEX cards_by_user_time ON context_cards (user_id, created_at);

-- Layer 3: permanent attributes of the user.
CREATE TABLE profile (
    user_id         TEXT NOT NULL,
    key             TEXT NOT NULL,
    value           TEXT NOT NULL,
    source          TEXT NOT NULL CHECK (source IN ('agent', 'user')),
    source_event_id INTEGER REFERENCES events (id) ON DELETE SET NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    deleted_at      TEXT,               -- tombstone: the user deleted it; workers never re-create it
    PRIMARY KEY (user_id, key)
);

-- Layer 4: dated facts. One current row per (user, category, key); a changed value
-- supersedes the old row, which is kept.
CREATE TABLE facts (
    id               INTEGER PRIMARY KEY,
    user_id          TEXT NOT NULL,
    category         TEXT NOT NULL
        CHECK (category IN ('fact', 'decision', 'solution', 'preference', 'conversation')),
    key              TEXT NOT NULL,
    value            TEXT NOT NULL,
    source           TEXT NOT NULL CHECK (source IN ('agent', 'user')),
    source_event_id  INTEGER REFERENCES events (id) ON DELETE SET NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    superseded_at    TEXT,
    superseded_by    INTEGER REFERENCES facts (id) ON DELETE SET NULL,
    deleted_at       TEXT,              -- tombstone, stays current so the key stays taken
    importance       REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    access_count     INTEGER NOT NULL DEFAULT 0,
    last_accessed_at TEXT
);
CREATE UNIQUE INDEX facts_current_key ON facts (user_id, category, key)
    WHERE superseded_at IS NULL;
CREATE INDEX facts_by_user_time ON facts (user_id, updated_at);

-- Layer 5: one entry per ended session.
CREATE TABLE diary (
    id            INTEGER PRIMARY KEY,
    user_id       TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    entry         TEXT NOT NULL,
    is_extractive INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    UNIQUE (user_id, session_id)
);
CREATE INDEX diary_by_user_time ON diary (user_id, created_at);

-- Vectors: a retrieval stream, never text. Only vectors of the same model are compared.
CREATE TABLE embeddings (
    id         INTEGER PRIMARY KEY,
    user_id    TEXT NOT NULL,
    owner_kind TEXT NOT NULL CHECK (owner_kind IN ('event', 'fact', 'card')),
    owner_id   INTEGER NOT NULL,
    model      TEXT NOT NULL,
    dim        INTEGER NOT NULL,
    vector     BLOB,                    -- dim float32 values, little-endian; NULL on error
    error      TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (owner_kind, owner_id, model)
);
CREATE INDEX embeddings_by_user_model ON embeddings (user_id, model, owner_kind);

-- Schedules. The columns of the reference system, plus user_id like every row here.
CREATE TABLE scheduled_tasks (
    id                INTEGER PRIMARY KEY,
    user_id           TEXT NOT NULL,
    name              TEXT NOT NULL,
    cron_expr         TEXT NOT NULL,
    original_schedule TEXT NOT NULL,
    prompt            TEXT NOT NULL,
    source            TEXT NOT NULL CHECK (source IN ('tool', 'config')),
    is_oneshot        INTEGER NOT NULL DEFAULT 0,
    is_paused         INTEGER NOT NULL DEFAULT 0,
    is_trusted        INTEGER NOT NULL DEFAULT 0,
    next_run_at       TEXT,
    last_run_at       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE INDEX scheduled_tasks_due ON scheduled_tasks (next_run_at) WHERE is_paused = 0;

-- Provenance of every profile, fact, card and diary change: "why do you know that?",
-- as_of queries and undo.
CREATE TABLE memory_log (
    id              INTEGER PRIMARY KEY,
    user_id         TEXT NOT NULL,
    owner_kind      TEXT NOT NULL CHECK (owner_kind IN ('profile', 'fact', 'card', 'diary')),
    owner_id        TEXT NOT NULL,      -- profile key, or the row id as text
    action          TEXT NOT NULL
        CHECK (action IN ('insert', 'update', 'supersede', 'delete', 'restore')),
    old_value       TEXT,
    new_value       TEXT,
    source_event_id INTEGER,
    worker          TEXT NOT NULL,      -- 'user', 'distill', 'compact', 'consolidate', ...
    created_at      TEXT NOT NULL
);
CREATE INDEX memory_log_by_owner ON memory_log (user_id, owner_kind, owner_id, created_at);

-- Full text: external-content FTS5 tables kept in sync by triggers. remove_diacritics 2
-- lets "cafe" find "café" for Spanish and English users; porter stems English.
CREATE VIRTUAL TABLE events_fts USING fts5 (
    content, content = 'events', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER events_fts_insert AFTER INSERT ON events BEGIN
    INSERT INTO events_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER events_fts_delete AFTER DELETE ON events BEGIN
    INSERT INTO events_fts (events_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER events_fts_update AFTER UPDATE OF content ON events BEGIN
    INSERT INTO events_fts (events_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO events_fts (rowid, content) VALUES (new.id, new.content);
END;

CREATE VIRTUAL TABLE cards_fts USING fts5 (
    summary, keywords, content = 'context_cards', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER cards_fts_insert AFTER INSERT ON context_cards BEGIN
    INSERT INTO cards_fts (rowid, summary, keywords) VALUES (new.id, new.summary, new.keywords);
END;
CREATE TRIGGER cards_fts_delete AFTER DELETE ON context_cards BEGIN
    INSERT INTO cards_fts (cards_fts, rowid, summary, keywords)
        VALUES ('delete', old.id, old.summary, old.keywords);
END;
CREATE TRIGGER cards_fts_update AFTER UPDATE OF summary, keywords ON context_cards BEGIN
    INSERT INTO cards_fts (cards_fts, rowid, summary, keywords)
        VALUES ('delete', old.id, old.summary, old.keywords);
    INSERT INTO cards_fts (rowid, summary, keywords) VALUES (new.id, new.summary, new.keywords);
END;

CREATE VIRTUAL TABLE facts_fts USING fts5 (
    key, value, content = 'facts', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER facts_fts_insert AFTER INSERT ON facts BEGIN
    INSERT INTO facts_fts (rowid, key, value) VALUES (new.id, new.key, new.value);
END;
CREATE TRIGGER facts_fts_delete AFTER DELETE ON facts BEGIN
    INSERT INTO facts_fts (facts_fts, rowid, key, value) VALUES ('delete', old.id, old.key, old.value);
END;
CREATE TRIGGER facts_fts_update AFTER UPDATE OF key, value ON facts BEGIN
    INSERT INTO facts_fts (facts_fts, rowid, key, value) VALUES ('delete', old.id, old.key, old.value);
    INSERT INTO facts_fts (rowid, key, value) VALUES (new.id, new.key, new.value);
END;
