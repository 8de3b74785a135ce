-- TDD machine journal (internal/tdd): one row per transition of a session's
-- test-first state machine. Rows are hash-chained per session: hash is
-- SHA-256 over the previous row's hash and this row's fields, so a replay
-- detects any edit, deletion or reordering; the event column is replayed
-- through the machine to rebuild the state after a crash.
CREATE TABLE tdd_transitions (
    session_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    at          INTEGER NOT NULL,           -- unix nanoseconds, UTC
    kind        TEXT NOT NULL,              -- event kind
    from_state  TEXT NOT NULL,
    to_state    TEXT NOT NULL,
    mode        TEXT NOT NULL,              -- mode after the transition
    event       TEXT NOT NULL,              -- canonical JSON of the event
    status_hash BLOB NOT NULL,              -- SHA-256 of the canonical status after
    prev_hash   BLOB NOT NULL,
    hash        BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Debug mode: the original content of each file declared as
-- instrumentation, restored (or the file removed, when it did not exist)
-- when debug mode ends.
CREATE TABLE tdd_instrumentation (
    session_id  TEXT NOT NULL,
    path        TEXT NOT NULL,              -- workspace-relative, slash-separated
    workspace   TEXT NOT NULL,              -- absolute root the path is relative to
    existed     INTEGER NOT NULL CHECK (existed IN (0, 1)),
    perm        INTEGER NOT NULL,           -- permission bits to restore
    content     BLOB NOT NULL,
    PRIMARY KEY (session_id, path)
) WITHOUT ROWID;
