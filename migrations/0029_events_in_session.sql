-- Each message's neighbours in its session (issue 42): the session stream reads the two
-- messages before and after each of the ~70 a turn's question matches
-- (app/recall/streams.py: session_neighbours). events_by_session holds `compacted`
-- before `id`, so each side took a seek per value of it; here one seek a side, compacted
-- or not.
CREATE INDEX events_in_session ON events (user_id, session_id, id);
