-- Per-user API tokens (app/access.py). A token is shown once, when it is made; only its
-- SHA-256 is kept, so a copy of the database does not let anyone in. `prefix` (the
-- token's first characters) tells tokens apart in `hilo token list`. A revoked token is
-- kept, with revoked_at, as the record of who could get in and until when.

CREATE TABLE access_tokens (
    id           INTEGER PRIMARY KEY,
    user_id      TEXT NOT NULL,
    name         TEXT NOT NULL DEFAULT '',
    token_sha256 TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    revoked_at   TEXT
);
CREATE INDEX access_tokens_by_user ON access_tokens (user_id, id);
