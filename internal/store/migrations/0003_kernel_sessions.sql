-- Kernel sessions (internal/kernel): what a session needs to be resumed
-- after the kernel stopped or crashed. state is the agent conversation and
-- the results of the current turn's tool calls (JSON), saved at every turn
-- boundary and after every tool result, so a resumed session never runs a
-- tool call twice.
ALTER TABLE sessions ADD COLUMN task TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN changeset TEXT NOT NULL DEFAULT '';   -- change set directory
ALTER TABLE sessions ADD COLUMN state TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sessions ADD COLUMN stop_reason TEXT NOT NULL DEFAULT ''; -- agent reason or fault class
ALTER TABLE sessions ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0 CHECK (interrupted IN (0, 1));
