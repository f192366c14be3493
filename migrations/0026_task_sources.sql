-- A task says who added it: 'cli' (the owner at the machine, `hilo tasks add`), 'http'
-- (the API and the memory page), 'mcp' (an MCP client), 'tool' (the model, through Hilo's
-- tasks tool), 'config' (config.toml) or 'import'. Before this migration 'tool' stood for
-- the first four alike: those rows become 'unrecorded', since who added them was not
-- kept. SQLite cannot change a CHECK constraint in place: the table is rebuilt with the
-- same columns (0021's from_outside included), rows and index.

CREATE TABLE scheduled_tasks_new (
    id                INTEGER PRIMARY KEY,
    user_id           TEXT NOT NULL,
    name              TEXT NOT NULL,
    cron_expr         TEXT NOT NULL,
    original_schedule TEXT NOT NULL,
    prompt            TEXT NOT NULL,
    source            TEXT NOT NULL CHECK (source IN ('cli', 'http', 'mcp', 'tool', 'config',
                                                      'import', 'unrecorded')),
    is_oneshot        INTEGER NOT NULL DEFAULT 0,
    is_paused         INTEGER NOT NULL DEFAULT 0,
    is_trusted        INTEGER NOT NULL DEFAULT 0,
    next_run_at       TEXT,
    last_run_at       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    timezone          TEXT,
    from_outside      INTEGER NOT NULL DEFAULT 1 CHECK (from_outside IN (0, 1))
);

INSERT INTO scheduled_tasks_new (id, user_id, name, cron_expr, original_schedule, prompt, source,
                                 is_oneshot, is_paused, is_trusted, next_run_at, last_run_at,
                                 created_at, updated_at, timezone, from_outside)
    SELECT id, user_id, name, cron_expr, original_schedule, prompt,
           CASE source WHEN 'tool' THEN 'unrecorded' ELSE source END, is_oneshot,
           is_paused, is_trusted, next_run_at, last_run_at, created_at, updated_at, timezone,
           from_outside
    FROM scheduled_tasks;

DROP TABLE scheduled_tasks;
ALTER TABLE scheduled_tasks_new RENAME TO scheduled_tasks;
CREATE INDEX scheduled_tasks_due ON scheduled_tasks (next_run_at) WHERE is_paused = 0;
