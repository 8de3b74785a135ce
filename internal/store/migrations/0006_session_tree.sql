-- Sub-agents (docs/subagents.md): a session spawned by another session's
-- sessions.spawn. parent is the session that spawned it and root the top
-- of its tree ('' for a top-level session); depth is 0 at the top.
-- narrowing is what the child was given, JSON: its tool set, its policy
-- layers (its ancestors' and its own, each only tightening) and its
-- budget carved out of the parent's; '' for a top-level session.
ALTER TABLE sessions ADD COLUMN parent TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN root TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0);
ALTER TABLE sessions ADD COLUMN narrowing TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_parent ON sessions (parent) WHERE parent != '';
