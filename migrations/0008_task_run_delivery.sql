-- Delivery of scheduled task runs to the person (workers/notify.py, `hilo chat`).
--
-- A run keeps what delivery needs even after its task is gone (a one-shot is deleted
-- once it ran): the task's name and the id of its reply in the session `task:<id>`.
-- `delivered_at` (0007) is when a `hilo chat` showed the run; `notified_at` when the
-- webhook took it, `notify_error` why it did not after its retries (`hilo tasks log`).
ALTER TABLE task_runs ADD COLUMN task_name TEXT;
ALTER TABLE task_runs ADD COLUMN reply_event_id INTEGER;
ALTER TABLE task_runs ADD COLUMN notified_at TEXT;
ALTER TABLE task_runs ADD COLUMN notify_error TEXT;

-- Runs that ended before delivery existed were read in `hilo tasks log`, if at all:
-- they are not news for the next `hilo chat`.
UPDATE task_runs SET delivered_at = coalesce(finished_at, started_at, scheduled_for)
    WHERE status IN ('done', 'failed', 'cancelled') AND delivered_at IS NULL;
CREATE INDEX task_runs_undelivered ON task_runs (user_id, id)
    WHERE delivered_at IS NULL AND status IN ('done', 'failed');
