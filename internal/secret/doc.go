// Package secret owns fluffy's credentials: references that name a secret
// without holding it (secret://BACKEND/PATH, with env:VAR and file:PATH as
// aliases), the backends that resolve them (the environment, a plain
// file, an age-encrypted store, Bitwarden through the bw CLI), the broker
// that hands values out only for a declared use and keeps them in locked
// memory for a session's TTL, zeroing them at expiry and session end, the
// forms of a value that redaction looks for, the keyed fingerprint the
// audit log records instead of a value, and the placeholder swaps the
// egress proxy performs (docs/secrets.md).
//
// It is a leaf: it imports nothing of fluffy's but internal/regfile, so
// the channels, the CLI and the daemon's wiring can all resolve
// references with one syntax.
package secret
