-- Hilo's own agent (app/agent.py, app/tools/): what the user allowed the terminal tool
-- to run, and the tool chains the workers learned from stored tool events.

-- "Allow always" answers: a command whose words start with one of a user's prefixes
-- runs without asking (with [tools] terminal_allowed_prefixes from config.toml).
CREATE TABLE terminal_allowed_prefixes (
    user_id    TEXT NOT NULL,
    prefix     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (user_id, prefix)
) WITHOUT ROWID;

-- A tool call (trigger_tool, its arguments matching trigger_args_pattern, an fnmatch
-- pattern over their canonical JSON) that was regularly followed by another
-- (next_tool, next_args as JSON). confidence: the share of the trigger's calls the
-- next one followed; support: how many times it did. A macro the user removed stays
-- as a tombstone (removed_at) so the workers never learn it again.
CREATE TABLE macros (
    id                   INTEGER PRIMARY KEY,
    user_id              TEXT NOT NULL,
    trigger_tool         TEXT NOT NULL,
    trigger_args_pattern TEXT NOT NULL,
    next_tool            TEXT NOT NULL,
    next_args            TEXT NOT NULL,
    confidence           REAL NOT NULL DEFAULT 0 CHECK (confidence BETWEEN 0 AND 1),
    support              INTEGER NOT NULL DEFAULT 0,
    used_count           INTEGER NOT NULL DEFAULT 0,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL,
    removed_at           TEXT,
    UNIQUE (user_id, trigger_tool, trigger_args_pattern, next_tool, next_args)
);
CREATE INDEX macros_by_trigger ON macros (user_id, trigger_tool) WHERE removed_at IS NULL;
