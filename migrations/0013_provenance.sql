-- Provenance (DESIGN §9 Trust): where each event came from, and whether each event and
-- memory item is, or was made from, content from outside — text no person at this
-- machine wrote: a web page, a command's output, a client's tool result, an import, or
-- what was learned or written while reading one of these. A turn whose context holds
-- any of it cannot act (terminal, web_fetch, tasks) unasked.
--
-- events.origin (app/events.py ORIGINS):
--   typed               the person's message: the REPL's input, an API request's new message
--   client              sent by a client: its history, its tool calls and results, /memory/events
--   model               the model's reply, its tool calls included
--   hilo_tool           the result of a call Hilo's agent ran with nobody approving it
--   hilo_tool_approved  the result of a call Hilo's agent ran with a person's yes, or in a
--                       trusted task's run (and a macro's call: it runs only so)
--   task                a scheduled task's prompt
--   import              brought by `hilo import`
ALTER TABLE events ADD COLUMN origin TEXT NOT NULL DEFAULT 'client'
    CHECK (origin IN ('typed', 'client', 'model', 'hilo_tool', 'hilo_tool_approved', 'task',
                      'import'));
ALTER TABLE events ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 0
    CHECK (from_outside IN (0, 1));

ALTER TABLE facts ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 0
    CHECK (from_outside IN (0, 1));
ALTER TABLE profile ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 0
    CHECK (from_outside IN (0, 1));
ALTER TABLE context_cards ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 0
    CHECK (from_outside IN (0, 1));
ALTER TABLE diary ADD COLUMN from_outside INTEGER NOT NULL DEFAULT 0
    CHECK (from_outside IN (0, 1));

-- The events stored before this migration. Whether a call was approved was not recorded:
-- their results count as unapproved, so macros are learned again only from calls made
-- since (the next learning run drops the ones learned before).
UPDATE events SET origin = CASE role WHEN 'user' THEN 'typed' WHEN 'assistant' THEN 'model'
                                     WHEN 'tool' THEN 'hilo_tool' ELSE 'task' END;
UPDATE events SET from_outside = 1 WHERE role = 'tool';
-- Memory learned from a tool's result, or summarising a chunk that holds one.
UPDATE facts SET from_outside = 1 WHERE source = 'agent' AND source_event_id IN
    (SELECT id FROM events WHERE from_outside = 1);
UPDATE profile SET from_outside = 1 WHERE source = 'agent' AND source_event_id IN
    (SELECT id FROM events WHERE from_outside = 1);
UPDATE context_cards SET from_outside = 1 WHERE id IN
    (SELECT card_id FROM events WHERE from_outside = 1 AND card_id IS NOT NULL);
WITH RECURSIVE folded (id) AS (
    SELECT id FROM context_cards WHERE from_outside = 1
    UNION SELECT c.folded_into FROM context_cards c JOIN folded ON c.id = folded.id
    WHERE c.folded_into IS NOT NULL)
UPDATE context_cards SET from_outside = 1 WHERE id IN (SELECT id FROM folded);
UPDATE diary SET from_outside = 1 WHERE EXISTS (SELECT 1 FROM events e
    WHERE e.user_id = diary.user_id AND e.session_id = diary.session_id AND e.from_outside = 1);
