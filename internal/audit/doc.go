// Package audit owns fluffy's tamper-evident audit log: an append-only
// record of every decision and execution, in its own SQLite database
// (audit.db), that a third party can check without fluffy's code.
//
// Each entry is encoded canonically (RFC 8785 JSON) and chained:
//
//	chain[n] = SHA-256("fluffy-audit-chain-v1\x00" || chain[n-1] || uint64be(n) || entry[n])
//
// with chain[0] = 32 zero bytes. The chain hashes are also the leaves of
// an RFC 6962 Merkle tree (github.com/transparency-dev/merkle), whose root
// is signed with Ed25519 in C2SP tlog-checkpoint notes
// (golang.org/x/mod/sumdb/note) every CheckpointEvery entries,
// CheckpointAfter, and at Close. Every write transaction also signs a head
// checkpoint, so entries added behind fluffy's back are detected, and
// then writes the newest checkpoint to keys/audit.checkpoint, outside the
// database, so truncating or replacing the database is detected too: in
// place, in two alternating slots that survive a torn write, after the
// commit and without an fsync of its own (witness.go says why that is
// safe).
// docs/audit.md specifies the format.
//
// The catalogue (catalogue.go) is the schema of what fluffy records: every
// kind it writes with its payload type, whose JSON tags are the members;
// writers pass those types, and a test keeps docs/audit.md's event
// catalogue equal to them.
//
// Writing (Log): security-relevant kinds (Kind.Synchronous) are durable
// before Append returns; the rest are buffered and written in batches.
// A full buffer makes Append write it itself (backpressure); nothing is
// dropped. Any write failure returns ErrUnavailable: callers fail closed.
// One process at a time writes (a flock beside the database).
//
// Durability of buffered entries: Append assigns the sequence number,
// chains and hashes the entry into the tree under a short lock and queues
// it; it never waits for I/O. A background goroutine writes the queue
// once FlushEntries are pending or every FlushInterval: it takes the
// queue and a snapshot of the tree under the lock, then signs the head
// (and any due checkpoint) and runs the SQLite transaction without it,
// while the next entries queue in a second buffer. A crash (kill -9,
// power loss) loses only buffered entries not yet written: normally
// fewer than FlushEntries plus what arrives during one write, and never
// more than MaxPending, because an Append that finds MaxPending entries
// unwritten (queued plus the batch in flight) waits for the write and
// writes the queue itself (backpressure). What was written always
// verifies: entries 1..n, no gap. Flush (and any synchronous entry)
// makes everything before it durable.
//
// Checking (Reader.Verify, VerifyExport, Log.VerifyAtStart): recomputes
// the chain and the tree, checks every signature, and names the first
// damaged sequence number and the kind of damage (DamageError).
//
// Retention (Log.Prune) deletes old entries behind a signed anchor
// checkpoint and records an audit.prune entry, so the remainder still
// verifies and unrecorded deletion does not: a verifier accepts a missing
// start only behind that entry, read field by field (IsPruneRecord), and
// Append refuses the audit.* kinds, which only the log itself writes.
package audit
