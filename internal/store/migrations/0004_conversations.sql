-- The assistant daemon (fluffy serve): which session each conversation
-- (channel + room + principal) is, so a conversation resumes its session
-- after a restart, and the messages delivered but not yet handed to their
-- session, so none is lost when the daemon stops or dies.
CREATE TABLE conversations (
    channel     TEXT NOT NULL,
    room        TEXT NOT NULL,
    principal   TEXT NOT NULL,
    session     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    created_at  INTEGER NOT NULL,           -- unix nanoseconds, UTC
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (channel, room, principal)
);
CREATE INDEX conversations_session ON conversations (session);

CREATE TABLE inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    channel     TEXT NOT NULL,
    room        TEXT NOT NULL,
    principal   TEXT NOT NULL,
    message     TEXT NOT NULL,              -- '' runs the session's task
    created_at  INTEGER NOT NULL
);
