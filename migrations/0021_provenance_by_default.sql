-- Provenance by default (docs/trust.md, app/memory/provenance.py): a row is the owner's only
-- when a write says so; one that states nothing is content from outside.
--
-- 1. The from_outside columns of events, facts, profile, context_cards and diary default
--    to 1. SQLite changes a column's default in place by editing the table's definition
--    in sqlite_schema (sqlite.org/lang_altertable.html, "Making Other Kinds Of Table
--    Schema Changes": a default is not stored in the rows); RESET reloads the schema for
--    this connection, and the table made and dropped after it bumps the schema cookie so
--    every other connection reloads it too. A row stored before its table gained the
--    column holds no value for it and reads the default, so those rows are written out
--    first with the value they read now. (Every event was rewritten by 0013, and every
--    event since states its own.)
UPDATE facts SET from_outside = from_outside WHERE from_outside = 0;
UPDATE profile SET from_outside = from_outside WHERE from_outside = 0;
UPDATE context_cards SET from_outside = from_outside WHERE from_outside = 0;
UPDATE diary SET from_outside = from_outside WHERE from_outside = 0;
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
    SET sql = replace(sql, 'from_outside INTEGER NOT NULL DEFAULT 0',
                      'from_outside INTEGER NOT NULL DEFAULT 1')
    WHERE type = 'table' AND name IN ('events', 'facts', 'profile', 'context_cards', 'diary');
PRAGMA writable_schema = RESET;
CREATE TABLE _provenance_schema_bump (x);
DROP TABLE _provenance_schema_bump;

-- 2. A client's history is not the person typing (origin 'client'): content from outside.
UPDATE events SET from_outside = 1 WHERE origin IN ('client', 'import') AND from_outside = 0;

-- 3. A session says whether it holds content from outside (any of its events), so the
--    diary and learning read it in one row. Kept by app/events.py as events are stored.
ALTER TABLE sessions ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 1
    CHECK (from_outside IN (0, 1));
UPDATE sessions SET from_outside = EXISTS (SELECT 1 FROM events e WHERE e.user_id = sessions.user_id
                                          AND e.session_id = sessions.id AND e.from_outside = 1);

-- 4. A scheduled task says whether its prompt is the owner's (added at the machine, in
--    config.toml, or by Hilo's agent from the owner's words) or from outside (the HTTP
--    API, MCP, an import, an agent reading outside content); trusting it at the machine
--    makes it the owner's. Tasks stored before: only an import's was known to be outside.
ALTER TABLE scheduled_tasks ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 1
    CHECK (from_outside IN (0, 1));
UPDATE scheduled_tasks SET from_outside = (source = 'import');
