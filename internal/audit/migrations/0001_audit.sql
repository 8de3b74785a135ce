-- The audit log. Rows are only ever inserted (and, by retention, deleted
-- from the old end behind a signed anchor); never updated.
--
-- body is the entry's canonical JSON (RFC 8785), exactly the bytes the
-- chain hash covers. Queries read kind, session and time out of it with
-- json_extract, so they cannot disagree with what is hashed. (No generated
-- columns or indexes on them: SQLite would run json_extract on every
-- insert.)
CREATE TABLE entries (
    seq      INTEGER PRIMARY KEY,
    body     TEXT NOT NULL,
    hash     BLOB NOT NULL
);

-- Signed checkpoints. range holds the compact Merkle range [0, size)
-- (its node hashes concatenated), from which the tree can be extended
-- without the older leaves; its root must equal the signed root.
CREATE TABLE checkpoints (
    size     INTEGER PRIMARY KEY,
    note     TEXT NOT NULL,
    range    BLOB NOT NULL
);

-- The head: a signed checkpoint of the log's state after the newest
-- commit, replaced by every write transaction, so no entry fluffy wrote is
-- ever outside a signature (entries added behind its back are).
CREATE TABLE head (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    note  TEXT NOT NULL
);

-- origin: the log's name (the key's name); anchor: the tree size of the
-- retention anchor checkpoint (absent when nothing was pruned).
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
