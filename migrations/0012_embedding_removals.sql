-- Which vector rows went away, numbered as embedding_generations.removed counts them. A
-- vector index that last saw `removed` = n reads the rows numbered above n, instead of
-- listing every row of the block to find the missing ones: at 5x10^5 fact vectors that
-- pass took ~0.15 s, in the first turn after a fact was re-embedded. The newest 10,000
-- per (user, model, kind) are kept; an index further behind does the whole pass once.
CREATE TABLE embedding_removals (
    user_id    TEXT NOT NULL,
    model      TEXT NOT NULL,
    owner_kind TEXT NOT NULL,
    removed    INTEGER NOT NULL,  -- embedding_generations.removed once this row went
    row_id     INTEGER NOT NULL,  -- the embeddings.id that was deleted, replaced or changed
    PRIMARY KEY (user_id, model, owner_kind, removed)
) WITHOUT ROWID;

CREATE TRIGGER embedding_removals_bounded AFTER INSERT ON embedding_removals
BEGIN
    DELETE FROM embedding_removals
    WHERE user_id = NEW.user_id AND model = NEW.model AND owner_kind = NEW.owner_kind
      AND removed <= NEW.removed - 10000;
END;

-- The triggers of 0010 again, each now also logging the row it counts.
DROP TRIGGER embeddings_replaced;
DROP TRIGGER embeddings_removed;
DROP TRIGGER embeddings_changed;

CREATE TRIGGER embeddings_replaced BEFORE INSERT ON embeddings
WHEN EXISTS (SELECT 1 FROM embeddings WHERE owner_kind = NEW.owner_kind
             AND owner_id = NEW.owner_id AND model = NEW.model AND vector IS NOT NULL)
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    SELECT user_id, model, owner_kind, 1 FROM embeddings
    WHERE owner_kind = NEW.owner_kind AND owner_id = NEW.owner_id AND model = NEW.model
    ON CONFLICT DO UPDATE SET removed = removed + 1;
    INSERT INTO embedding_removals (user_id, model, owner_kind, removed, row_id)
    SELECT e.user_id, e.model, e.owner_kind, g.removed, e.id
    FROM embeddings AS e JOIN embedding_generations AS g USING (user_id, model, owner_kind)
    WHERE e.owner_kind = NEW.owner_kind AND e.owner_id = NEW.owner_id AND e.model = NEW.model;
END;

CREATE TRIGGER embeddings_removed AFTER DELETE ON embeddings WHEN OLD.vector IS NOT NULL
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    VALUES (OLD.user_id, OLD.model, OLD.owner_kind, 1)
    ON CONFLICT DO UPDATE SET removed = removed + 1;
    INSERT INTO embedding_removals (user_id, model, owner_kind, removed, row_id)
    SELECT user_id, model, owner_kind, removed, OLD.id FROM embedding_generations
    WHERE user_id = OLD.user_id AND model = OLD.model AND owner_kind = OLD.owner_kind;
END;

CREATE TRIGGER embeddings_changed AFTER UPDATE ON embeddings
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    VALUES (OLD.user_id, OLD.model, OLD.owner_kind, 1)
    ON CONFLICT DO UPDATE SET removed = removed + 1;
    INSERT INTO embedding_removals (user_id, model, owner_kind, removed, row_id)
    SELECT user_id, model, owner_kind, removed, OLD.id FROM embedding_generations
    WHERE user_id = OLD.user_id AND model = OLD.model AND owner_kind = OLD.owner_kind;
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    VALUES (NEW.user_id, NEW.model, NEW.owner_kind, 1)
    ON CONFLICT DO UPDATE SET removed = removed + 1;
    INSERT INTO embedding_removals (user_id, model, owner_kind, removed, row_id)
    SELECT user_id, model, owner_kind, removed, NEW.id FROM embedding_generations
    WHERE user_id = NEW.user_id AND model = NEW.model AND owner_kind = NEW.owner_kind;
END;
