-- The importance retrieval stream (importance >= 0.8) reads these instead of scanning
-- every row of the user's: measured by tests/bench/context.py.
CREATE INDEX facts_important ON facts (user_id, importance, updated_at, id)
    WHERE importance >= 0.8 AND superseded_at IS NULL AND deleted_at IS NULL;
CREATE INDEX cards_important ON context_cards (user_id, importance, created_at, id)
    WHERE importance >= 0.8 AND folded_into IS NULL;
CREATE INDEX events_important ON events (user_id, importance, created_at, id)
    WHERE importance >= 0.8;
