-- Forget means gone from the database files (docs/trust.md). A full-text index deletes a row
-- by writing a delete marker beside its old entries, which keep the words until a merge;
-- with 'secure-delete' the entries themselves are removed (sqlite.org/fts5.html, "The
-- secure-delete Configuration Option"). Every connection also sets PRAGMA secure_delete,
-- so the freed bytes are zeroed (app/db.py), and a forget truncates the write-ahead log
-- (app/memory/forget.py).
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO cards_fts (cards_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO facts_fts (facts_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO event_labels_fts (event_labels_fts, rank) VALUES ('secure-delete', 1);
