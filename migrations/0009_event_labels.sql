-- Event labels: who said an event and when, in the words people ask with, indexed beside
-- its text without touching it (app/event_labels.py reads questions onto them).
--
-- calendar_words holds the words: month 1-12, weekday 0-6 (strftime('%w'): 0 is Sunday),
-- season by month (northern hemisphere), part of the day by hour (UTC, as stored).
-- Changing a row changes what the view says about existing events: a migration that
-- does must also rebuild event_labels_fts ('rebuild'), or deletes would miss rows.
CREATE TABLE calendar_words (
    kind   TEXT NOT NULL CHECK (kind IN ('month', 'weekday', 'season', 'hour')),
    number INTEGER NOT NULL,
    words  TEXT NOT NULL,
    PRIMARY KEY (kind, number)
) WITHOUT ROWID;
INSERT INTO calendar_words (kind, number, words) VALUES
    ('month', 1, 'january enero'), ('month', 2, 'february febrero'), ('month', 3, 'march marzo'),
    ('month', 4, 'april abril'), ('month', 5, 'may mayo'), ('month', 6, 'june junio'),
    ('month', 7, 'july julio'), ('month', 8, 'august agosto'), ('month', 9, 'september septiembre setiembre'),
    ('month', 10, 'october octubre'), ('month', 11, 'november noviembre'), ('month', 12, 'december diciembre'),
    ('weekday', 0, 'sunday domingo weekend'), ('weekday', 1, 'monday lunes'), ('weekday', 2, 'tuesday martes'),
    ('weekday', 3, 'wednesday miércoles'), ('weekday', 4, 'thursday jueves'), ('weekday', 5, 'friday viernes'),
    ('weekday', 6, 'saturday sábado weekend'),
    ('season', 1, 'winter invierno'), ('season', 2, 'winter invierno'), ('season', 3, 'spring primavera'),
    ('season', 4, 'spring primavera'), ('season', 5, 'spring primavera'), ('season', 6, 'summer verano'),
    ('season', 7, 'summer verano'), ('season', 8, 'summer verano'), ('season', 9, 'autumn fall otoño'),
    ('season', 10, 'autumn fall otoño'), ('season', 11, 'autumn fall otoño'), ('season', 12, 'winter invierno'),
    ('hour', 0, 'night noche'), ('hour', 1, 'night noche'), ('hour', 2, 'night noche'),
    ('hour', 3, 'night noche'), ('hour', 4, 'night noche'), ('hour', 5, 'morning mañana'),
    ('hour', 6, 'morning mañana'), ('hour', 7, 'morning mañana'), ('hour', 8, 'morning mañana'),
    ('hour', 9, 'morning mañana'), ('hour', 10, 'morning mañana'), ('hour', 11, 'morning mañana'),
    ('hour', 12, 'afternoon tarde'), ('hour', 13, 'afternoon tarde'), ('hour', 14, 'afternoon tarde'),
    ('hour', 15, 'afternoon tarde'), ('hour', 16, 'afternoon tarde'), ('hour', 17, 'afternoon tarde'),
    ('hour', 18, 'evening tarde'), ('hour', 19, 'evening tarde'), ('hour', 20, 'evening tarde'),
    ('hour', 21, 'evening night noche'), ('hour', 22, 'evening night noche'), ('hour', 23, 'evening night noche');

-- One line per event: role, year, month, day of the month, weekday, season, part of the
-- day. E.g. "user 2023 may mayo 8 monday lunes spring primavera afternoon tarde".
-- Only columns that never change after the insert feed it (role, created_at), so the
-- line FTS5 is told to delete is always the line it indexed. (|| rather than concat_ws:
-- SQLite tools older than 3.44 must still be able to delete an event.)
CREATE VIEW event_labels (id, labels) AS
SELECT e.id, e.role || ' ' || ifnull(strftime('%Y', e.created_at), '') || ' '
             || ifnull(month.words, '') || ' '
             || ifnull(CAST(strftime('%d', e.created_at) AS INTEGER), '') || ' '
             || ifnull(weekday.words, '') || ' ' || ifnull(season.words, '') || ' '
             || ifnull(hour.words, '')
FROM events e
LEFT JOIN calendar_words month
    ON month.kind = 'month' AND month.number = CAST(strftime('%m', e.created_at) AS INTEGER)
LEFT JOIN calendar_words weekday
    ON weekday.kind = 'weekday' AND weekday.number = CAST(strftime('%w', e.created_at) AS INTEGER)
LEFT JOIN calendar_words season
    ON season.kind = 'season' AND season.number = CAST(strftime('%m', e.created_at) AS INTEGER)
LEFT JOIN calendar_words hour
    ON hour.kind = 'hour' AND hour.number = CAST(strftime('%H', e.created_at) AS INTEGER);

CREATE VIRTUAL TABLE event_labels_fts USING fts5 (
    labels, content = 'event_labels', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER event_labels_insert AFTER INSERT ON events BEGIN
    INSERT INTO event_labels_fts (rowid, labels) SELECT id, labels FROM event_labels WHERE id = new.id;
END;
CREATE TRIGGER event_labels_delete BEFORE DELETE ON events BEGIN
    INSERT INTO event_labels_fts (event_labels_fts, rowid, labels)
        SELECT 'delete', id, labels FROM event_labels WHERE id = old.id;
END;
CREATE TRIGGER event_labels_unindex BEFORE UPDATE OF role, created_at ON events BEGIN
    INSERT INTO event_labels_fts (event_labels_fts, rowid, labels)
        SELECT 'delete', id, labels FROM event_labels WHERE id = old.id;
END;
CREATE TRIGGER event_labels_reindex AFTER UPDATE OF role, created_at ON events BEGIN
    INSERT INTO event_labels_fts (rowid, labels) SELECT id, labels FROM event_labels WHERE id = new.id;
END;

-- The events stored before this migration.
INSERT INTO event_labels_fts (event_labels_fts) VALUES ('rebuild');
