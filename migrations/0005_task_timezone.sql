-- A scheduled task's own time zone (`hilo tasks add --tz Europe/Lisbon`), an IANA name.
-- NULL: the task follows [schedule] timezone, which defaults to this machine's zone; the
-- tasks made before this column keep doing so.
--
-- Numbered 0005: the runner applies whichever migrations a database has not seen, in
-- order, so a number left free for another change is no gap to it.

ALTER TABLE scheduled_tasks ADD COLUMN timezone TEXT;
