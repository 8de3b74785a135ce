-- Plugins (docs/plugins.md): MCP servers installed or imported, by name.
-- manifest is the parsed fluffy-plugin.yaml as JSON; dir its folder;
-- digest the folder's digest as approved ("sha256:<hex>"); signer the
-- principal whose SSH signature verified, '' when unsigned; state the
-- lifecycle state and reason why; source where it came from (the path
-- installed, or the file imported). Times are Unix milliseconds.
CREATE TABLE plugins (
    name     TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    dir      TEXT NOT NULL,
    digest   TEXT NOT NULL,
    signer   TEXT NOT NULL DEFAULT '',
    state    TEXT NOT NULL,
    reason   TEXT NOT NULL DEFAULT '',
    source   TEXT NOT NULL DEFAULT '',
    created  INTEGER NOT NULL,
    updated  INTEGER NOT NULL
);

-- A plugin's tools: pinned is the tool's description as a person
-- approved it (plugin.ToolPin as JSON), NULL for a tool not approved yet;
-- offered is what the server last described when it differs from the
-- pin (NULL when it agrees): such a tool stays disabled until a person
-- approves the difference.
CREATE TABLE plugin_tools (
    plugin  TEXT NOT NULL REFERENCES plugins (name) ON DELETE CASCADE,
    name    TEXT NOT NULL,
    pinned  TEXT,
    offered TEXT,
    PRIMARY KEY (plugin, name)
);
