-- Runs of scheduled tasks (app/tasks.py). scheduled_tasks keeps the reference columns;
-- what happens to each occurrence lives here: the claim, the attempts, the last error.
--
-- The unique index on (task_id, scheduled_for) is the claim: the worker inserts the row
-- for an occurrence in the same transaction that advances the task's next_run_at, so two
-- consumers can never run the same occurrence twice. Runs asked for by hand (`hilo tasks
-- run`) are not occurrences and stay out of it.
--
-- No foreign key to scheduled_tasks: the runs of a removed task or of a finished one-shot
-- stay as its log, and new task ids are taken above every id seen here, so the session
-- `task:<id>` of a deleted task is never reused by another.

CREATE TABLE task_runs (
    id            INTEGER PRIMARY KEY,
    user_id       TEXT NOT NULL,
    task_id       INTEGER NOT NULL,
    scheduled_for TEXT NOT NULL,        -- the occurrence (RFC 3339 UTC); for `run now`, when it was asked
    kind          TEXT NOT NULL DEFAULT 'schedule' CHECK (kind IN ('schedule', 'manual')),
    started_at    TEXT,                 -- the current or last attempt
    finished_at   TEXT,
    status        TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'retrying', 'done', 'failed', 'cancelled')),
    error         TEXT,                 -- the last failed attempt's error; NULL once an attempt succeeds
    attempts      INTEGER NOT NULL DEFAULT 0,
    retry_at      TEXT,                 -- when status = 'retrying': the next attempt's time
    session_id    TEXT NOT NULL         -- 'task:<task_id>', where the turns are stored
);
CREATE UNIQUE INDEX task_runs_one_per_occurrence ON task_runs (task_id, scheduled_for)
    WHERE kind = 'schedule';
CREATE INDEX task_runs_by_task ON task_runs (user_id, task_id, id);
CREATE INDEX task_runs_open ON task_runs (status, retry_at)
    WHERE status IN ('queued', 'running', 'retrying');
