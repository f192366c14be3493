-- The terminal's "allow always" answers become allow rules (app/turn/tools/terminal_rules.py):
-- a rule names the command and its arguments ("git status" is exactly that, "ls *" is ls
-- with any further arguments), where a prefix covered every command starting with it.

CREATE TABLE terminal_allow_rules (
    user_id    TEXT NOT NULL,
    rule       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (user_id, rule)
) WITHOUT ROWID;

-- A stored prefix keeps covering what it named, word by word: the rule "PREFIX *".
INSERT OR IGNORE INTO terminal_allow_rules (user_id, rule, created_at)
    SELECT user_id, prefix || ' *', created_at FROM terminal_allowed_prefixes;

DROP TABLE terminal_allowed_prefixes;
