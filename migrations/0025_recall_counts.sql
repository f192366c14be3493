-- Recall counts (issue 41): how often a fact or card was recalled into a prompt, kept in
-- facts.access_count / context_cards.access_count and last_accessed_at. The chat writes
-- nothing more for it: each turn's record (turn_records) already lists what it recalled,
-- and the worker folds the records written since the last fold into the counts
-- (app/turn/records.py: count_recalls), in one transaction with this row.
CREATE TABLE recall_counts (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    counted_through  INTEGER NOT NULL,  -- the last turn_records id folded into the counts
    counted_at       TEXT NOT NULL
);
