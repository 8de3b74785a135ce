-- The memory index: derived from the memory files, rebuildable at any time.
CREATE TABLE files (
	path  TEXT PRIMARY KEY,
	hash  TEXT NOT NULL,
	size  INTEGER NOT NULL,
	-- the file's words as the local model counts them
	tokens INTEGER NOT NULL DEFAULT 0,
	day   TEXT NOT NULL DEFAULT ''
);
CREATE TABLE chunks (
	id         INTEGER PRIMARY KEY,
	path       TEXT NOT NULL REFERENCES files(path) ON DELETE CASCADE,
	heading    TEXT NOT NULL,
	start_line INTEGER NOT NULL,
	end_line   INTEGER NOT NULL,
	text       TEXT NOT NULL,
	hash       TEXT NOT NULL
);
CREATE INDEX chunks_path ON chunks(path);
-- rowid is chunks.id; kept in step by the indexer.
CREATE VIRTUAL TABLE chunks_fts USING fts5(heading, text, tokenize = 'porter unicode61');
-- Vectors are cached by the chunk text's hash and the model that made them.
CREATE TABLE vectors (
	hash  TEXT NOT NULL,
	model TEXT NOT NULL,
	vec   BLOB NOT NULL,
	PRIMARY KEY (hash, model)
);
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
