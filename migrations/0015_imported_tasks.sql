-- A task that came in an import says so (source 'import'): its prompt is text no person at
-- this machine wrote, so its runs read it as content from outside until the owner trusts
-- the task (`hilo tasks trust ID`). SQLite cannot change a CHECK constraint in place: the
-- table is rebuilt with the same columns, rows and index.

CREATE TABLE scheduled_tasks_new (
    id                INTEGER PRIMARY KEY,
    user_id           TEXT NOT NULL,
    name              TEXT NOT NULL,
    cron_expr         TEXT NOT NULL,
    original_schedule TEXT NOT NULL,
    prompt            TEXT NOT NULL,
    source            TEXT NOT NULL CHECK (source IN ('tool', 'config', 'import')),
    is_oneshot        INTEGER NOT NULL DEFAULT 0,
    is_paused         INTEGER NOT NULL DEFAULT 0,
    is_trusted        INTEGER NOT NULL DEFAULT 0,
    next_run_at       TEXT,
    last_run_at       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    timezone          TEXT
);

INSERT INTO scheduled_tasks_new (id, user_id, name, cron_expr, original_schedule, prompt, source,
                                 is_oneshot, is_paused, is_trusted, next_run_at, last_run_at,
                                 created_at, updated_at, timezone)
    SELECT id, user_id, name, cron_expr, original_schedule, prompt, source, is_oneshot,
           is_paused, is_trusted, next_run_at, last_run_at, created_at, updated_at, timezone
    FROM scheduled_tasks;

DROP TABLE scheduled_tasks;
ALTER TABLE scheduled_tasks_new RENAME TO scheduled_tasks;
CREATE INDEX scheduled_tasks_due ON scheduled_tasks (next_run_at) WHERE is_paused = 0;
