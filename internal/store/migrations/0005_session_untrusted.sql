-- Provenance (docs/provenance.md): what first made a session untrusted
-- (it read data no principal wrote), '' while it has read none. Set once,
-- never cleared; policy sees it as op.session.untrusted.
ALTER TABLE sessions ADD COLUMN untrusted TEXT NOT NULL DEFAULT '';
