-- Forgetting: a forgotten fact keeps its (category, key) row as a tombstone with a hash
-- of the value it had, never the value, so the same statement is not learned again.
ALTER TABLE facts ADD COLUMN forgotten_hash TEXT;

-- Delivery: when a scheduled task's run was shown to the person (REPL, notification).
ALTER TABLE task_runs ADD COLUMN delivered_at TEXT;
