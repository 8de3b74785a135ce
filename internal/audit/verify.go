package audit

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Damage names a kind of damage Verify can find.
type Damage string

// The kinds of damage.
const (
	DamageEditedEntry Damage = "edited entry" // an entry's bytes changed, its stored hash did not
	DamageEditedHash  Damage = "edited hash"  // a stored hash changed, the entry did not
	DamageEdited      Damage = "edited entry and hash"
	DamageMissing     Damage = "deleted entry"     // a sequence number is missing
	DamageReordered   Damage = "reordered entries" // an entry sits at another entry's position
	DamageTruncated   Damage = "truncated log"     // the log ends before a signed checkpoint
	DamageRewritten   Damage = "rewritten chain"   // chain consistent but not what a checkpoint signed
	DamageForeign     Damage = "foreign log"       // another log (other key) replaced this one
	DamageCheckpoint  Damage = "bad checkpoint"    // a checkpoint's signature or contents are wrong
	DamageAnchor      Damage = "bad anchor"        // the retention anchor is not as pruning leaves it
	DamageUnsigned    Damage = "unsigned entries"  // entries no checkpoint signs: added outside fluffy
)

// ErrDamaged is matched (errors.Is) by every *DamageError.
var ErrDamaged = errors.New("audit log damaged")

// DamageError reports the first damage Verify found.
type DamageError struct {
	// Seq is the first sequence number affected.
	Seq    uint64
	Damage Damage
	Detail string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("audit log damaged at seq %d: %s: %s", e.Seq, e.Damage, e.Detail)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

func damage(seq uint64, d Damage, format string, args ...any) error {
	return &DamageError{Seq: seq, Damage: d, Detail: fmt.Sprintf(format, args...)}
}

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Verifier is the note verifier string of the log's key (required).
	// Pass one kept away from the data directory to detect a replaced
	// database and key together.
	Verifier string
	// Full checks every entry from the retention anchor. Otherwise the
	// check starts at the newest checkpoint a previous verification
	// passed (and no later than From or any trusted checkpoint).
	Full bool
	// From, when not 0, makes the check start no later than entry From.
	From uint64
	// Trusted are signed checkpoints kept outside the database (the copy
	// under keys/, a file a user kept): the log must contain them.
	Trusted [][]byte
	// StateDir, when set, is where the incremental check keeps its
	// progress (the keys/ directory: outside the database, so editing the
	// database cannot make the next check skip entries). The newest
	// verified checkpoint's size is recorded there after a check passes.
	StateDir string
}

// VerifiedFile, in VerifyOptions.StateDir, holds the tree size of the
// newest checkpoint a verification passed and the retention anchor it
// saw ("SIZE ANCHOR"; an older fluffy wrote "SIZE" alone).
const VerifiedFile = "audit.verified"

// verified is what VerifiedFile records.
type verified struct {
	size uint64
	// anchor is the retention anchor whose audit.prune record that
	// verification read; anchorKnown is false for the older format.
	anchor      uint64
	anchorKnown bool
}

func readVerified(dir string) (verified, error) {
	var v verified
	if dir == "" {
		return v, nil
	}
	name := filepath.Join(dir, VerifiedFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return v, nil
	}
	if err != nil {
		return v, fmt.Errorf("audit: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || len(fields) > 2 {
		return v, fmt.Errorf("audit: %s: want \"SIZE ANCHOR\", got %q", name, b)
	}
	if v.size, err = strconv.ParseUint(fields[0], 10, 64); err != nil {
		return v, fmt.Errorf("audit: %s: %w", name, err)
	}
	if len(fields) == 2 {
		if v.anchor, err = strconv.ParseUint(fields[1], 10, 64); err != nil {
			return v, fmt.Errorf("audit: %s: %w", name, err)
		}
		v.anchorKnown = true
	}
	return v, nil
}

// Report describes a verification that passed.
type Report struct {
	Origin string
	// From and To are the first and last entries checked (From > To when
	// there was nothing new to check).
	From, To uint64
	// Size is the log's size (its newest entry).
	Size uint64
	// Checkpoints is how many checkpoint signatures were verified.
	Checkpoints int
	// Newest is the newest signed checkpoint (Size 0 when none).
	Newest Checkpoint
	// Anchor is the retention anchor (0 when nothing was pruned).
	Anchor uint64
	// Unchecked lists trusted checkpoints that predate what remains of the
	// log (pruned since), which could not be compared.
	Unchecked []uint64
}

// source is what verification reads: a database or an export.
type source interface {
	origin(ctx context.Context) (string, error)
	anchorSize(ctx context.Context) (uint64, error)
	checkpoints(ctx context.Context) ([]storedCheckpoint, error)
	// rows calls fn for entries with seq >= from in order; row.hash is
	// nil when the source does not store hashes.
	rows(ctx context.Context, from uint64, fn func(row) error) error
	// row returns entry seq, if present.
	row(ctx context.Context, seq uint64) (row, bool, error)
}

// Verify checks the log read by r. It returns a *DamageError naming the
// first damaged sequence number and the kind of damage, or another error
// when the log could not be read.
func (r *Reader) Verify(ctx context.Context, opts VerifyOptions) (Report, error) {
	// One snapshot for the whole check. A writer (another process, or
	// this one's flusher) commits entries together with the head that
	// signs them; read in several snapshots, the checkpoints could come
	// from before a commit and the entries from after it, and a live
	// log would look as if entries had been added outside fluffy. A
	// deferred BEGIN on one connection takes no write lock (the
	// database's own transactions are BEGIN IMMEDIATE): writers go on,
	// the check reads what was committed when it started.
	c, ok := r.db.(interface {
		Conn(ctx context.Context) (*sql.Conn, error)
	})
	if !ok {
		return verify(ctx, dbSource{r}, opts)
	}
	conn, err := c.Conn(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("audit: verify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return Report{}, fmt.Errorf("audit: verify: begin a read: %w", err)
	}
	// The read ends with the check, whatever the context says.
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()
	return verify(ctx, dbSource{&Reader{db: snapshot{conn}, path: r.path}}, opts)
}

// snapshot is one connection inside a read transaction, as a Reader's
// database: closing it is the caller's (Verify's) business.
type snapshot struct{ *sql.Conn }

func (snapshot) Close() error { return nil }

func verify(ctx context.Context, src source, opts VerifyOptions) (Report, error) {
	var rep Report
	v, err := note.NewVerifier(opts.Verifier)
	if err != nil {
		return rep, fmt.Errorf("audit: verifier key %q: %w", opts.Verifier, err)
	}
	if rep.Origin, err = src.origin(ctx); err != nil {
		return rep, err
	}
	if rep.Anchor, err = src.anchorSize(ctx); err != nil {
		return rep, err
	}
	if rep.Origin == "" {
		// A database without an origin was never written by a Log (or was
		// recreated, e.g. after losing its WAL): it must be empty, and the
		// trusted checkpoints below decide whether that is damage.
		rep.Origin = v.Name()
	}
	if rep.Origin != v.Name() {
		return rep, damage(rep.Anchor+1, DamageForeign, "the log is %q but the key is %q: the database (or the key) was replaced", rep.Origin, v.Name())
	}

	// Every stored checkpoint must carry a valid signature.
	stored, err := src.checkpoints(ctx)
	if err != nil {
		return rep, err
	}
	cps := map[uint64]Checkpoint{}
	ranges := map[uint64][]byte{}
	var sizes []uint64
	for _, sc := range stored {
		cp, err := ParseCheckpoint(sc.note, opts.Verifier)
		if err != nil {
			return rep, damage(sc.size, DamageCheckpoint, "checkpoint at size %d: %v", sc.size, err)
		}
		if cp.Size != sc.size {
			return rep, damage(sc.size, DamageCheckpoint, "checkpoint stored at size %d says size %d", sc.size, cp.Size)
		}
		cps[cp.Size], ranges[cp.Size] = cp, sc.rng
		sizes = append(sizes, cp.Size)
		rep.Checkpoints++
		rep.Newest = cp
	}
	// Checkpoints kept outside the database.
	trusted, minTrusted, err := trustedCheckpoints(opts, v.Name(), &rep)
	if err != nil {
		return rep, err
	}
	if rep.Anchor > 0 {
		if _, ok := cps[rep.Anchor]; !ok {
			return rep, damage(rep.Anchor+1, DamageAnchor, "retention anchor at size %d has no signed checkpoint", rep.Anchor)
		}
	}

	// Where to start.
	start := rep.Anchor
	if !opts.Full {
		ver, err := readVerified(opts.StateDir)
		if err != nil {
			return rep, err
		}
		limit := ver.size
		if rep.Anchor > 0 && (!ver.anchorKnown || ver.anchor != rep.Anchor) {
			// No passing verification read this anchor's audit.prune
			// record: start at the anchor, so the walk must find it.
			// Otherwise deleting the start of the log and naming a new
			// anchor would pass every incremental check.
			limit = 0
		}
		if opts.From > 0 {
			limit = min(limit, opts.From-1)
		}
		limit = min(limit, minTrusted)
		for _, s := range sizes {
			if s >= rep.Anchor && s <= limit && ranges[s] != nil {
				start = s
			}
		}
	}
	chain, rng := zeroHash, rangeFactory.NewEmptyRange(0)
	if start > 0 {
		cp := cps[start]
		if rng, err = newRange(start, ranges[start]); err != nil {
			return rep, damage(start, DamageCheckpoint, "checkpoint at size %d: %v", start, err)
		}
		if !bytes.Equal(rootOf(rng), cp.Root) {
			return rep, damage(start, DamageCheckpoint, "checkpoint at size %d: stored compact range does not give the signed root", start)
		}
		chain = cp.Chain
	}
	if tc, ok := trusted[start]; ok && start > 0 && (!bytes.Equal(tc.Root, cps[start].Root) || !bytes.Equal(tc.Chain, cps[start].Chain)) {
		// The walk compares the entries after start only: a checkpoint
		// kept outside at start itself is compared here.
		return rep, damage(start, DamageRewritten, "the checkpoint at size %d differs from the one kept outside the database (two signed states of one size: the log was rebuilt)", start)
	}

	// Walk the entries.
	rep.From = start + 1
	next := start + 1
	lastGood := start // size of the last checkpoint that matched
	// Starting after the anchor means a verification that started at it
	// found its prune record (above).
	pruneSeen := rep.Anchor == 0 || start > rep.Anchor
	checkAt := func(size uint64, cp Checkpoint, what string) error {
		if !bytes.Equal(rootOf(rng), cp.Root) || !bytes.Equal(chain, cp.Chain) {
			return damage(lastGood+1, DamageRewritten, "entries %d..%d do not match the %s at size %d (the chain was recomputed after an edit, or entries were reordered)", lastGood+1, size, what, size)
		}
		lastGood = size
		return nil
	}
	ch := newChainer()
	err = src.rows(ctx, next, func(rw row) error {
		if rw.seq != next {
			if rw.seq < next {
				return damage(rw.seq, DamageReordered, "entry %d appears after entry %d", rw.seq, next-1)
			}
			if rw.seq == next+1 {
				return damage(next, DamageMissing, "entry %d is missing (the log jumps from %d to %d)", next, next-1, rw.seq)
			}
			return damage(next, DamageMissing, "entries %d..%d are missing", next, rw.seq-1)
		}
		h := ch.sum(chain, rw.seq, rw.body)
		if rw.hash != nil && !bytes.Equal(h, rw.hash) {
			return classify(ctx, src, rw, h, cps)
		}
		if rw.hash == nil {
			// No stored hash to compare (an export): check the entry's
			// own sequence number to name reordering precisely.
			if e, err := ParseEntry(rw.body); err != nil {
				return damage(rw.seq, DamageEditedEntry, "entry %d is not in canonical form: %v", rw.seq, err)
			} else if e.Seq != rw.seq {
				return damage(rw.seq, DamageReordered, "position %d holds entry %d", rw.seq, e.Seq)
			}
		}
		chain = h
		if err := rng.Append(leafHash(h), nil); err != nil {
			return err
		}
		if !pruneSeen && IsPruneRecord(rw.body, cps[rep.Anchor]) {
			pruneSeen = true
		}
		if cp, ok := cps[rw.seq]; ok {
			if err := checkAt(rw.seq, cp, "signed checkpoint"); err != nil {
				return err
			}
		}
		if cp, ok := trusted[rw.seq]; ok {
			if err := checkAt(rw.seq, cp, "checkpoint kept outside the database"); err != nil {
				return err
			}
		}
		next++
		return nil
	})
	if err != nil {
		return rep, err
	}
	last := next - 1
	rep.To, rep.Size = last, last
	for _, s := range sizes {
		if s > last {
			return rep, damage(last+1, DamageTruncated, "the log ends at %d but a signed checkpoint covers %d entries (%d..%d deleted or lost)", last, s, last+1, s)
		}
	}
	for s := range trusted {
		if s > last {
			return rep, damage(last+1, DamageTruncated, "the log ends at %d but the checkpoint kept outside the database covers %d entries (%d..%d deleted or lost, or an older copy of the database was put back)", last, s, last+1, s)
		}
	}
	newest := max(rep.Newest.Size, rep.Anchor)
	for s := range trusted {
		newest = max(newest, s)
	}
	if last > newest {
		return rep, damage(newest+1, DamageUnsigned, "entries %d..%d are covered by no signed checkpoint (fluffy signs every write): they were added outside fluffy", newest+1, last)
	}
	if !pruneSeen {
		return rep, damage(rep.Anchor+1, DamageAnchor, "entries 1..%d are missing and no %s entry written by fluffy (actor %q) records a pruning at %d: they were deleted without pruning, or an export was cut", rep.Anchor, KindAuditPrune, ActorKernel, rep.Anchor)
	}
	if opts.StateDir != "" && rep.Newest.Size > 0 {
		state := fmt.Sprintf("%d %d\n", rep.Newest.Size, rep.Anchor)
		if err := writeFileAtomic(filepath.Join(opts.StateDir, VerifiedFile), []byte(state), 0o600); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// trustedCheckpoints reads the checkpoints kept outside the database
// (opts.Trusted: bare notes, or the checkpoint file under keys/), each
// verified with the key named name. It counts them in rep, lists those
// older than the anchor in rep.Unchecked, and returns the others by size
// with the smallest size (the incremental walk must start at or before
// it).
func trustedCheckpoints(opts VerifyOptions, name string, rep *Report) (map[uint64]Checkpoint, uint64, error) {
	trusted := map[uint64]Checkpoint{}
	minTrusted := uint64(1<<64 - 1)
	var trustedNotes [][]byte
	for _, msg := range opts.Trusted {
		if !isWitnessFile(msg) {
			trustedNotes = append(trustedNotes, msg)
			continue
		}
		// The checkpoint file under keys/ (or a copy): its newest intact
		// slot (the other holds an older state). A torn slot (a crash
		// during its write) is skipped; a file with none intact is
		// damage; an intact slot that does not verify is caught below.
		notes, damaged := witnessSlots(msg)
		if len(notes) == 0 {
			return nil, 0, damage(rep.Anchor+1, DamageCheckpoint, "a checkpoint file kept outside the database has no intact checkpoint (%d damaged slots): it was edited or the disk failed", damaged)
		}
		newest, newestSize := notes[0].note, uint64(0)
		for _, n := range notes {
			if _, err := ParseCheckpoint(n.note, opts.Verifier); err != nil {
				newest = n.note // reported below
				break
			}
			if size, _ := noteSize(n.note); size >= newestSize {
				newest, newestSize = n.note, size
			}
		}
		trustedNotes = append(trustedNotes, newest)
	}
	for _, msg := range trustedNotes {
		cp, err := ParseCheckpoint(msg, opts.Verifier)
		if err != nil {
			origin := checkpointOrigin(msg)
			if origin != name {
				return nil, 0, damage(rep.Anchor+1, DamageForeign, "a checkpoint kept outside the database is from log %q, the key is %q", origin, name)
			}
			return nil, 0, damage(rep.Anchor+1, DamageForeign, "a checkpoint kept outside the database does not verify with the key: %v", err)
		}
		rep.Checkpoints++
		if cp.Size < rep.Anchor {
			rep.Unchecked = append(rep.Unchecked, cp.Size)
			continue
		}
		trusted[cp.Size] = cp
		minTrusted = min(minTrusted, cp.Size)
	}
	return trusted, minTrusted, nil
}

// pruneRecordStart is how the canonical bytes of a prune record begin.
const pruneRecordStart = `{"actor":"` + ActorKernel + `","kind":"` + string(KindAuditPrune) + `",`

// IsPruneRecord reports whether body (an entry's canonical bytes) is the
// record Log.Prune writes for the retention anchor cp: an entry whose own
// kind member is audit.prune, whose actor is fluffy's (ActorKernel),
// outside any session, and whose payload's top-level anchor, root and
// chain are exactly cp's size, root and chain hash. The entry is parsed
// strictly, members matched by their exact names: text that merely
// contains "kind":"audit.prune" somewhere (a nested payload) is not a
// prune record.
func IsPruneRecord(body []byte, cp Checkpoint) bool {
	// A canonical entry's members are sorted, so the record starts with
	// exactly these bytes (a quote inside a string is escaped, so no other
	// actor or kind gives them). This only spares a full parse of every
	// other entry; the parse below decides.
	if cp.Size == 0 || !strings.HasPrefix(string(body), pruneRecordStart) {
		return false
	}
	e, err := ParseEntry(body)
	if err != nil || e.Kind != KindAuditPrune || e.Actor != ActorKernel || e.Session != "" {
		return false
	}
	// ParseEntry leaves the payload a canonical JSON object: no duplicate
	// members, strings in one spelling. A map keeps exact member names
	// (a struct would also match "Anchor" or "ANCHOR").
	var p map[string]json.RawMessage
	if json.Unmarshal(e.Payload.(json.RawMessage), &p) != nil {
		return false
	}
	return string(p["anchor"]) == strconv.FormatUint(cp.Size, 10) &&
		string(p["root"]) == `"`+b64(cp.Root)+`"` &&
		string(p["chain"]) == `"`+b64(cp.Chain)+`"`
}

// classify names the damage at rw, whose recomputed chain hash h differs
// from the stored one, by looking at the entry's own sequence number and
// at which of the two hashes the next entry (or a checkpoint) continues.
func classify(ctx context.Context, src source, rw row, h []byte, cps map[uint64]Checkpoint) error {
	e, perr := ParseEntry(rw.body)
	if perr == nil && e.Seq != rw.seq {
		return damage(rw.seq, DamageReordered, "position %d holds entry %d", rw.seq, e.Seq)
	}
	nx, ok, err := src.row(ctx, rw.seq+1)
	if err != nil {
		return err
	}
	var contStored, contComputed bool
	if ok && nx.hash != nil {
		contStored = bytes.Equal(chainHash(rw.hash, nx.seq, nx.body), nx.hash)
		contComputed = bytes.Equal(chainHash(h, nx.seq, nx.body), nx.hash)
	} else if cp, ok := cps[rw.seq]; ok {
		contStored, contComputed = bytes.Equal(cp.Chain, rw.hash), bytes.Equal(cp.Chain, h)
	}
	switch {
	case contComputed:
		return damage(rw.seq, DamageEditedHash, "the stored hash of entry %d was changed; the entry itself is intact", rw.seq)
	case contStored:
		detail := "the entry's bytes were changed after it was hashed"
		if perr != nil {
			detail += " (" + perr.Error() + ")"
		}
		return damage(rw.seq, DamageEditedEntry, "entry %d: %s", rw.seq, detail)
	default:
		return damage(rw.seq, DamageEdited, "entry %d and its stored hash both differ from what the chain gives", rw.seq)
	}
}

// dbSource reads a database.
type dbSource struct{ r *Reader }

func (s dbSource) origin(ctx context.Context) (string, error) { return s.r.Origin(ctx) }
func (s dbSource) anchorSize(ctx context.Context) (uint64, error) {
	return s.r.metaUint(ctx, "anchor")
}
func (s dbSource) checkpoints(ctx context.Context) ([]storedCheckpoint, error) {
	return s.r.storedCheckpoints(ctx)
}
func (s dbSource) rows(ctx context.Context, from uint64, fn func(row) error) error {
	return s.r.rowsPrefetch(ctx, from, fn)
}
func (s dbSource) row(ctx context.Context, seq uint64) (row, bool, error) {
	var rw row
	var body string
	err := s.r.db.QueryRowContext(ctx, `SELECT body, hash FROM entries WHERE seq = ?`, int64(seq)).Scan(&body, &rw.hash)
	if err != nil {
		return rw, false, nil //nolint:nilerr // absent or unreadable: classify without it
	}
	rw.seq, rw.body = seq, []byte(body)
	return rw, true, nil
}
