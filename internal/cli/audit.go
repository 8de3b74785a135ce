package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/units"
)

func newAuditCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read, verify, prove and export the tamper-evident audit log",
		Long: `The audit log records every decision and execution, hash-chained, in a
Merkle tree whose roots are signed (Ed25519 checkpoints in the C2SP signed-note
format). Any edit, deletion, reordering or truncation is detected by
'fluffy audit verify'. See docs/audit.md.`,
	}
	cmd.AddCommand(newAuditVerifyCmd(a), newAuditLogCmd(a), newAuditTailCmd(a), newAuditProveCmd(a),
		newAuditExportCmd(a), newAuditKeyCmd(a), newAuditAppendCmd(a), newAuditPruneCmd(a), newAuditStatsCmd(a))
	return cmd
}

// openAuditLog opens the log for writing with the configured settings,
// waiting a moment for another process that holds it.
func openAuditLog(ctx context.Context, a *App) (*audit.Log, error) {
	return a.user().OpenAudit(ctx, 3*time.Second, false)
}

func openAuditReader(ctx context.Context, a *App) (*audit.Reader, string, error) {
	db, keys, err := a.user().AuditPaths()
	if err != nil {
		return nil, "", err
	}
	r, err := audit.OpenReader(ctx, db)
	if errors.Is(err, audit.ErrNoLog) {
		return nil, "", fmt.Errorf("%w (nothing has been recorded yet)", err)
	}
	return r, keys, err
}

// verifierArg reads --key: a verifier string, or a file holding one.
func verifierArg(s string) (string, error) {
	if _, err := note.NewVerifier(s); err == nil {
		return s, nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return "", fmt.Errorf("%w: --key %q is neither a verifier key (name+hash+key) nor a readable file", errUsage, s)
	}
	v := strings.TrimSpace(string(b))
	if _, err := note.NewVerifier(v); err != nil {
		return "", fmt.Errorf("%w: --key file %s: %v", errUsage, s, err)
	}
	return v, nil
}

func newAuditVerifyCmd(a *App) *cobra.Command {
	var (
		full        bool
		from        uint64
		key, export string
		checkpoints []string
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log: chain, Merkle tree, checkpoint signatures",
		Long: `Recomputes the hash chain and the Merkle tree and checks every checkpoint
signature. By default the check is incremental, from the newest checkpoint a
previous verification passed; --full checks everything. The log must also
contain the copy of the newest checkpoint kept under keys/, and every
--checkpoint FILE, so a truncated, rolled-back or replaced database is caught.

--key takes the verifier key ('fluffy audit key' prints it) or a file holding
it: keep one away from this machine to detect a database and key replaced
together. --export DIR checks an export offline instead of the database.

Exits 0 only when the log is intact; otherwise names the first damaged
sequence number and the kind of damage, and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			opts := audit.VerifyOptions{Full: full, From: from}
			for _, f := range checkpoints {
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("%w: --checkpoint: %v", errUsage, err)
				}
				opts.Trusted = append(opts.Trusted, b)
			}
			if key != "" {
				v, err := verifierArg(key)
				if err != nil {
					return err
				}
				opts.Verifier = v
			}
			var rep audit.Report
			var err error
			if export != "" {
				if opts.Verifier == "" {
					if opts.Verifier, err = audit.ExportKeyOf(export); err != nil {
						return err
					}
					fmt.Fprintln(a.Stderr, "fluffy: warning: using the key stored in the export itself; pass --key with a key kept elsewhere to rule out a forged export")
				}
				rep, err = audit.VerifyExport(ctx, export, opts)
			} else {
				r, keys, oerr := openAuditReader(ctx, a)
				if oerr != nil {
					return oerr
				}
				defer r.Close()
				if opts.Verifier == "" {
					k, kerr := audit.LoadKey(keys)
					if errors.Is(kerr, fs.ErrNotExist) {
						return fmt.Errorf("%w: the signing key is missing; pass the verifier key kept elsewhere with --key", kerr)
					}
					if kerr != nil {
						return kerr
					}
					opts.Verifier = k.Verifier
				}
				trusted, terr := audit.TrustedCheckpoints(keys)
				if terr != nil {
					return terr
				}
				opts.Trusted = append(opts.Trusted, trusted...)
				opts.StateDir = keys
				rep, err = r.Verify(ctx, opts)
			}
			if err != nil {
				var de *audit.DamageError
				if errors.As(err, &de) && asJSON {
					enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
					_ = enc.Encode(map[string]any{"ok": false, "seq": de.Seq, "damage": de.Damage, "detail": de.Detail})
				}
				return err
			}
			if asJSON {
				return json.NewEncoder(termsafe.NewJSONWriter(a.Stdout)).Encode(map[string]any{"ok": true, "origin": rep.Origin, "from": rep.From, "to": rep.To,
					"size": rep.Size, "checkpoints": rep.Checkpoints, "newest_checkpoint": rep.Newest.Size, "anchor": rep.Anchor})
			}
			checked := "no new entries to check"
			if rep.To >= rep.From {
				checked = fmt.Sprintf("entries %d..%d checked", rep.From, rep.To)
			}
			fmt.Fprintf(a.Stdout, "audit log intact: %d entries (%s), %d checkpoint signatures valid, newest checkpoint at %d\n",
				rep.Size-rep.Anchor, checked, rep.Checkpoints, rep.Newest.Size)
			if rep.Anchor > 0 {
				fmt.Fprintf(a.Stdout, "entries 1..%d were pruned behind a signed anchor\n", rep.Anchor)
			}
			for _, s := range rep.Unchecked {
				fmt.Fprintf(a.Stdout, "note: the checkpoint at size %d predates the retention anchor and was not compared\n", s)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&full, "full", false, "check every entry, not only those after the last verified checkpoint")
	f.Uint64Var(&from, "from", 0, "start checking no later than this sequence number")
	f.StringArrayVar(&checkpoints, "checkpoint", nil, "a signed checkpoint FILE kept elsewhere that the log must contain (repeatable)")
	f.StringVar(&key, "key", "", "verifier key, or a file holding it (default: the key under the data directory)")
	f.StringVar(&export, "export", "", "verify the export in DIR instead of the database")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// parseSince reads a time: RFC 3339, a date, or a duration back from now.
func parseSince(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	d, err := units.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %q is neither a time (2026-01-02, 2026-01-02T15:04:05Z) nor a duration (%s)", errUsage, s, units.DurationForms)
	}
	return time.Now().Add(-d.Std()), nil
}

// entryPrinter prints entries as a table row or a JSON line.
type entryPrinter struct {
	a      *App
	asJSON bool
}

func (p entryPrinter) print(e audit.Entry) error {
	payload, _ := e.Payload.(json.RawMessage)
	if p.asJSON {
		m := map[string]any{"seq": e.Seq, "time": e.Time.UTC().Format(audit.TimeFormat),
			"session": e.Session, "kind": e.Kind, "actor": e.Actor, "payload": payload}
		if e.Parent != "" {
			m["parent"], m["root"] = e.Parent, e.Root
		}
		if e.Trace != "" {
			m["trace"] = e.Trace
		}
		return json.NewEncoder(termsafe.NewJSONWriter(p.a.Stdout)).Encode(m)
	}
	session := e.Session
	if session == "" {
		session = "-"
	}
	if e.Parent != "" {
		// A sub-agent's entry: its place in the tree.
		session += " (sub-agent of " + e.Parent + ", root " + e.Root + ")"
	}
	// Payloads hold the model's text and file names; JSON leaves DEL, C1
	// controls and bidirectional overrides raw.
	_, err := fmt.Fprintf(p.a.Stdout, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Time.UTC().Format(time.RFC3339Nano),
		termsafe.Line(session), termsafe.Line(string(e.Kind)), termsafe.Line(e.Actor), termsafe.Line(string(payload)))
	return err
}

func newAuditLogCmd(a *App) *cobra.Command {
	var (
		session, tree, kind, since, traceID string
		asJSON                              bool
		limit                               int
	)
	cmd := &cobra.Command{
		Use:   "log",
		Short: "List audit entries, oldest first",
		Long: `Lists entries, filtered by session, kind, time and trace (the entries written
under an OpenTelemetry trace, docs/observability.md). Reading does not verify:
run 'fluffy audit verify' to know the entries are authentic.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := parseSince(since)
			if err != nil {
				return err
			}
			r, _, err := openAuditReader(cmd.Context(), a)
			if err != nil {
				return err
			}
			defer r.Close()
			p := entryPrinter{a: a, asJSON: asJSON}
			return r.Entries(cmd.Context(), audit.Filter{Session: session, Tree: tree, Kind: audit.Kind(kind), Trace: traceID, Since: t, Limit: limit}, p.print)
		},
	}
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "only this session")
	f.StringVar(&tree, "tree", "", "only this session and its sub-agents at every depth")
	f.StringVar(&kind, "kind", "", "only this kind (e.g. exec.start)")
	f.StringVar(&traceID, "trace", "", "only the entries of this trace (its id, 32 hex digits)")
	f.StringVar(&since, "since", "", "only entries at or after this time, or this long ago (2h, 7d)")
	f.IntVarP(&limit, "limit", "n", 0, "at most this many entries")
	f.BoolVar(&asJSON, "json", false, "one JSON object per line")
	return cmd
}

func newAuditTailCmd(a *App) *cobra.Command {
	var (
		follow bool
		n      int
		asJSON bool
		every  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the newest audit entries; -f keeps printing new ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			r, _, err := openAuditReader(ctx, a)
			if err != nil {
				return err
			}
			defer r.Close()
			p := entryPrinter{a: a, asJSON: asJSON}
			var last uint64
			show := func(e audit.Entry) error { last = e.Seq; return p.print(e) }
			if err := r.Entries(ctx, audit.Filter{Limit: n, Last: true}, show); err != nil {
				return err
			}
			for follow {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(every):
				}
				if err := r.Entries(ctx, audit.Filter{After: last}, show); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing entries as they are written (until interrupted)")
	f.IntVarP(&n, "lines", "n", 10, "how many of the newest entries to print first")
	f.BoolVar(&asJSON, "json", false, "one JSON object per line")
	f.DurationVar(&every, "interval", 200*time.Millisecond, "how often -f looks for new entries")
	return cmd
}

func newAuditProveCmd(a *App) *cobra.Command {
	var cpFile, key string
	cmd := &cobra.Command{
		Use:   "prove SEQ",
		Short: "Print an inclusion proof of entry SEQ against a signed checkpoint",
		Long: `Prints the entry, its chain hash and the RFC 6962 inclusion proof that
leads from it to the root signed in a checkpoint (the newest one, or
--checkpoint FILE), as JSON. The proof is checked before it is printed;
docs/audit.md says how to check it independently.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || seq == 0 {
				return fmt.Errorf("%w: SEQ must be a sequence number (1, 2, ...), not %q", errUsage, args[0])
			}
			ctx := cmd.Context()
			r, keys, err := openAuditReader(ctx, a)
			if err != nil {
				return err
			}
			defer r.Close()
			vkey := key
			if vkey != "" {
				if vkey, err = verifierArg(key); err != nil {
					return err
				}
			} else {
				k, err := audit.LoadKey(keys)
				if err != nil {
					return err
				}
				vkey = k.Verifier
			}
			var cp *audit.Checkpoint
			if cpFile != "" {
				b, err := os.ReadFile(cpFile)
				if err != nil {
					return fmt.Errorf("%w: --checkpoint: %v", errUsage, err)
				}
				c, err := audit.ParseCheckpoint(b, vkey)
				if err != nil {
					return err
				}
				cp = &c
			}
			p, err := r.Prove(ctx, seq, vkey, cp)
			if err != nil {
				return err
			}
			b64 := base64.StdEncoding.EncodeToString
			hashes := []string{}
			for _, h := range p.Hashes {
				hashes = append(hashes, b64(h))
			}
			enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{
				"entry": string(p.Body), "leaf_index": p.LeafIndex, "chain": b64(p.Chain),
				"tree_size": p.Checkpoint.Size, "root": b64(p.Checkpoint.Root), "proof": hashes,
				"checkpoint": string(p.Checkpoint.Note),
			})
		},
	}
	cmd.Flags().StringVar(&cpFile, "checkpoint", "", "prove against this signed checkpoint FILE")
	cmd.Flags().StringVar(&key, "key", "", "verifier key, or a file holding it")
	return cmd
}

func newAuditExportCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "export DIR",
		Short: "Write the log, its checkpoints and public key into DIR for offline checking",
		Long: `Writes entries.jsonl (one canonical entry per line), checkpoints.json,
anchor.json and key.txt into DIR (created; must be empty). Entries after the
newest checkpoint are not exported. 'fluffy audit verify --export DIR' checks
the result offline; docs/audit.md describes the format for other verifiers.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			r, keys, err := openAuditReader(ctx, a)
			if err != nil {
				return err
			}
			defer r.Close()
			k, err := audit.LoadKey(keys)
			if err != nil {
				return err
			}
			res, err := r.Export(ctx, args[0], k.Verifier)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "exported %d entries and %d checkpoints to %s\n", res.Entries, res.Checkpoints, args[0])
			return nil
		},
	}
}

func newAuditKeyCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "key",
		Short: "Print the checkpoint verifier key (created on first use)",
		Long: `Prints the verifier key of the audit log's Ed25519 signing key, in the
signed-note format (name+hash+base64 key). Keep a copy away from this machine:
'fluffy audit verify --key' with it detects a database and key replaced
together.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, keys, err := a.user().AuditPaths()
			if err != nil {
				return err
			}
			k, err := audit.LoadOrCreateKey(keys)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, k.Verifier)
			return nil
		},
	}
}

func newAuditAppendCmd(a *App) *cobra.Command {
	var (
		kind, session, actor, payload string
		count                         int
	)
	cmd := &cobra.Command{
		Use:   "append",
		Short: "Record a note of yours (kind user.note, actor user)",
		Long: `Records a note in the audit log: kind user.note, actor user, the payload a
JSON object of your choice. Every other kind and actor is fluffy's own
(exec.*, gate.*, approval.*, audit.*, ...): this command refuses them, so a
note can never pass for a record fluffy wrote.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// An allow-list, not a list of reserved kinds: any kind fluffy
			// writes, today or later, stays out of reach of this command.
			if kind != string(audit.KindUserNote) {
				return fmt.Errorf("%w: --kind %q is not allowed: 'fluffy audit append' records only --kind %s; the other kinds are written by fluffy itself", errUsage, kind, audit.KindUserNote)
			}
			if actor != audit.ActorUser {
				return fmt.Errorf("%w: --actor %q is not allowed: 'fluffy audit append' records only --actor %s; the other actors are fluffy's", errUsage, actor, audit.ActorUser)
			}
			if count < 1 {
				return fmt.Errorf("%w: --count must be at least 1", errUsage)
			}
			ctx := cmd.Context()
			l, err := openAuditLog(ctx, a)
			if err != nil {
				return err
			}
			var last uint64
			for i := 0; i < count; i++ {
				if last, err = l.Append(ctx, audit.Entry{Kind: audit.KindUserNote, Session: session, Actor: audit.ActorUser, Payload: json.RawMessage(payload)}); err != nil {
					l.Close()
					return err
				}
			}
			if err := l.Close(); err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, last)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", string(audit.KindUserNote), "entry kind (only "+string(audit.KindUserNote)+")")
	f.StringVar(&session, "session", "", "session id")
	f.StringVar(&actor, "actor", audit.ActorUser, "who records it (only "+audit.ActorUser+")")
	f.StringVar(&payload, "payload", "{}", "a JSON object")
	f.IntVar(&count, "count", 1, "record it this many times")
	return cmd
}

func newAuditPruneCmd(a *App) *cobra.Command {
	var before string
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete entries older than audit.retention_days, behind a signed anchor",
		Long: `Deletes old entries (before --before, or older than audit.retention_days).
A signed checkpoint at the cut lets what remains verify on its own, and the
pruning is itself recorded as an audit.prune entry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			var cut time.Time
			switch {
			case before != "":
				if cut, err = parseSince(before); err != nil {
					return err
				}
			case l.Config.Audit.RetentionDays > 0:
				cut = time.Now().AddDate(0, 0, -l.Config.Audit.RetentionDays)
			default:
				return fmt.Errorf("%w: audit.retention_days is 0 (keep everything); pass --before to prune anyway", errUsage)
			}
			ctx := cmd.Context()
			lg, err := openAuditLog(ctx, a)
			if err != nil {
				return err
			}
			res, err := lg.Prune(ctx, cut)
			if cerr := lg.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if res.Seq == 0 {
				fmt.Fprintln(a.Stdout, "nothing to prune")
				return nil
			}
			fmt.Fprintf(a.Stdout, "pruned %d entries; the log now starts after the anchor at %d (recorded as entry %d)\n", res.Deleted, res.Anchor, res.Seq)
			return nil
		},
	}
	cmd.Flags().StringVar(&before, "before", "", "prune entries before this time, or older than this duration (30d)")
	return cmd
}

func newAuditStatsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the log's size, entries, newest checkpoint and disk warnings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			db, keys, err := a.user().AuditPaths()
			if err != nil {
				return err
			}
			s, err := audit.ReadStats(cmd.Context(), db, keys)
			if err != nil {
				return err
			}
			warnings := s.Warnings(int64(l.Config.Audit.WarnSize), 0)
			if asJSON {
				return json.NewEncoder(termsafe.NewJSONWriter(a.Stdout)).Encode(map[string]any{"path": s.Path, "bytes": s.Bytes, "entries": s.Entries, "first": s.First, "last": s.Last,
					"anchor": s.Anchor, "checkpoint": s.Checkpoint, "free_bytes": s.FreeBytes, "warnings": warnings})
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "path\t%s\n", s.Path)
			fmt.Fprintf(tw, "size\t%s\n", units.Size(s.Bytes).Approx())
			fmt.Fprintf(tw, "entries\t%d (%d..%d)\n", s.Entries, s.First, s.Last)
			fmt.Fprintf(tw, "newest checkpoint\t%d\n", s.Checkpoint)
			fmt.Fprintf(tw, "free disk\t%s\n", units.Size(s.FreeBytes).Approx())
			tw.Flush()
			for _, w := range warnings {
				fmt.Fprintln(a.Stdout, "WARN", w)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
