-- Sessions: one row per agent session, coding or assistant.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    created_at  INTEGER NOT NULL,           -- unix nanoseconds, UTC
    updated_at  INTEGER NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('coding', 'assistant')),
    workspace   TEXT NOT NULL,              -- absolute path; '' for none
    model       TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('running', 'paused', 'closed', 'failed'))
);
CREATE INDEX sessions_status ON sessions (status);

-- Small key/value facts about this installation (first start, last
-- verified audit checkpoint, ...), each owned by the package that writes it.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
