-- Passkeys (WebAuthn) of the web console's principals (docs/web.md).
-- id is the credential's id as the authenticator made it; user_handle
-- the random handle the principal's passkeys were registered under (one
-- per principal); public_key the COSE key; flags the credential's flags
-- as go-webauthn packs them (backup eligibility must not change);
-- sign_count the highest counter seen (a lower one is refused). Times
-- are Unix milliseconds; last_used is 0 until the first login.
CREATE TABLE passkeys (
    id          BLOB PRIMARY KEY,
    principal   TEXT NOT NULL,
    user_handle BLOB NOT NULL,
    public_key  BLOB NOT NULL,
    flags       INTEGER NOT NULL DEFAULT 0,
    sign_count  INTEGER NOT NULL DEFAULT 0 CHECK (sign_count >= 0),
    created     INTEGER NOT NULL,
    last_used   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX passkeys_principal ON passkeys (principal);
CREATE INDEX passkeys_user_handle ON passkeys (user_handle);
