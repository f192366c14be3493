-- What a person's corrections change about what Hilo recalls (issue 41).
--
-- events.superseded_by: a reply a client regenerated ("Try Again"): the first event of
-- the reply that replaced it. Never recalled nor learned from again; shown on the
-- memory page as replaced. The client's history decides: a reply it goes back to is
-- current again, and the other one superseded (app/api/conversation.py).
ALTER TABLE events ADD COLUMN superseded_by INTEGER;
CREATE INDEX events_superseded ON events (user_id, id) WHERE superseded_by IS NOT NULL;

-- corrections (app/memory/corrections.py): a message, context card or diary entry that
-- said a fact the person has since corrected, deleted or forgotten, marked when they did
-- it. With category and key: the fact it stated, recalled with what the fact says now
-- (its current row, read at recall time). Without (both NULL): the fact was forgotten,
-- and the item is never recalled again (nor its key kept here).
CREATE TABLE corrections (
    id          INTEGER PRIMARY KEY,
    user_id     TEXT NOT NULL,
    owner_kind  TEXT NOT NULL CHECK (owner_kind IN ('event', 'card', 'diary')),
    owner_id    INTEGER NOT NULL,
    category    TEXT,
    key         TEXT,
    created_at  TEXT NOT NULL,
    CHECK ((category IS NULL) = (key IS NULL))
);
CREATE UNIQUE INDEX corrections_one_per_fact
    ON corrections (owner_kind, owner_id, ifnull(category, ''), ifnull(key, ''));
CREATE INDEX corrections_by_user ON corrections (user_id, owner_kind, owner_id);

-- An item deleted (forget with its sources, a rebuild's cards, a diary rewrite) takes its
-- marks with it.
CREATE TRIGGER corrections_event_gone AFTER DELETE ON events BEGIN
    DELETE FROM corrections WHERE owner_kind = 'event' AND owner_id = old.id;
END;
CREATE TRIGGER corrections_card_gone AFTER DELETE ON context_cards BEGIN
    DELETE FROM corrections WHERE owner_kind = 'card' AND owner_id = old.id;
END;
CREATE TRIGGER corrections_diary_gone AFTER DELETE ON diary BEGIN
    DELETE FROM corrections WHERE owner_kind = 'diary' AND owner_id = old.id;
END;
-- So does one rewritten (a card or diary entry summarised again, a message's text
-- redacted): what it says now was not what was corrected.
CREATE TRIGGER corrections_event_rewritten AFTER UPDATE OF content ON events BEGIN
    DELETE FROM corrections WHERE owner_kind = 'event' AND owner_id = old.id;
END;
CREATE TRIGGER corrections_card_rewritten AFTER UPDATE OF summary ON context_cards BEGIN
    DELETE FROM corrections WHERE owner_kind = 'card' AND owner_id = old.id;
END;
CREATE TRIGGER corrections_diary_rewritten AFTER UPDATE OF entry ON diary BEGIN
    DELETE FROM corrections WHERE owner_kind = 'diary' AND owner_id = old.id;
END;
