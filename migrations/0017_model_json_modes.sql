-- How each model server and model takes a request for JSON (app/model/json_modes.py): the
-- first way down the ladder (a JSON schema, any JSON object, the schema in the question)
-- that the server did not refuse, learned from its refusals once and kept here.

CREATE TABLE model_json_modes (
    server     TEXT NOT NULL,  -- the server's URL, without any user name or password
    model      TEXT NOT NULL,
    mode       TEXT NOT NULL CHECK (mode IN ('schema', 'object', 'instruction')),
    reason     TEXT NOT NULL,  -- the server's refusal of the way above
    learned_at TEXT NOT NULL,
    PRIMARY KEY (server, model)
) WITHOUT ROWID;
