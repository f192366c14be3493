-- Per (user, model, owner kind): how many vectors were added and removed so far, kept
-- by triggers. The vector index compares these two numbers with the ones it last saw:
-- one primary-key read per query instead of counting the user's rows. `added` moving
-- alone means new rows with higher ids (read incrementally); `removed` moving means an
-- older vector went away or changed (the index reloads that block).
CREATE TABLE embedding_generations (
    user_id    TEXT NOT NULL,
    model      TEXT NOT NULL,
    owner_kind TEXT NOT NULL,
    added      INTEGER NOT NULL DEFAULT 0,
    removed    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, model, owner_kind)
) WITHOUT ROWID;

INSERT INTO embedding_generations (user_id, model, owner_kind, added)
SELECT user_id, model, owner_kind, count(vector) FROM embeddings GROUP BY 1, 2, 3;

CREATE TRIGGER embeddings_added AFTER INSERT ON embeddings WHEN NEW.vector IS NOT NULL
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, added)
    VALUES (NEW.user_id, NEW.model, NEW.owner_kind, 1)
    ON CONFLICT DO UPDATE SET added = added + 1;
END;

-- INSERT OR REPLACE deletes the row it replaces without firing DELETE triggers (unless
-- recursive_triggers is on), so the replaced vector is counted before the insert.
CREATE TRIGGER embeddings_replaced BEFORE INSERT ON embeddings
WHEN EXISTS (SELECT 1 FROM embeddings WHERE owner_kind = NEW.owner_kind
             AND owner_id = NEW.owner_id AND model = NEW.model AND vector IS NOT NULL)
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    SELECT user_id, model, owner_kind, 1 FROM embeddings
    WHERE owner_kind = NEW.owner_kind AND owner_id = NEW.owner_id AND model = NEW.model
    ON CONFLICT DO UPDATE SET removed = removed + 1;
END;

CREATE TRIGGER embeddings_removed AFTER DELETE ON embeddings WHEN OLD.vector IS NOT NULL
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    VALUES (OLD.user_id, OLD.model, OLD.owner_kind, 1)
    ON CONFLICT DO UPDATE SET removed = removed + 1;
END;

CREATE TRIGGER embeddings_changed AFTER UPDATE ON embeddings
BEGIN
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    VALUES (OLD.user_id, OLD.model, OLD.owner_kind, 1)
    ON CONFLICT DO UPDATE SET removed = removed + 1;
    INSERT INTO embedding_generations (user_id, model, owner_kind, removed)
    VALUES (NEW.user_id, NEW.model, NEW.owner_kind, 1)
    ON CONFLICT DO UPDATE SET removed = removed + 1;
END;
