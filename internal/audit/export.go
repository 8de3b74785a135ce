package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Export file names. The format is described in docs/audit.md.
const (
	ExportEntries     = "entries.jsonl"    // one canonical entry per line, ascending
	ExportCheckpoints = "checkpoints.json" // [{"size": N, "note": "<signed note>"}], ascending
	ExportAnchor      = "anchor.json"      // {"size": A, "chain": b64, "range": [b64...]}
	ExportKey         = "key.txt"          // the verifier string
	ExportFormat      = "fluffy-audit-export-v1"
)

type exportCheckpoint struct {
	Size uint64 `json:"size"`
	Note string `json:"note"`
}

type exportAnchor struct {
	Format string   `json:"format"`
	Origin string   `json:"origin"`
	Size   uint64   `json:"size"`
	Chain  []byte   `json:"chain"`
	Range  [][]byte `json:"range"`
}

// ExportResult summarizes an export.
type ExportResult struct {
	Entries     uint64
	Checkpoints int
	Anchor      uint64
}

// Export writes the log into dir (created; must be empty or absent): its
// entries, checkpoints, retention anchor and the verifier string vkey.
// Only entries covered by the newest checkpoint are exported, so every
// exported entry can be checked against a signature.
func (r *Reader) Export(ctx context.Context, dir, vkey string) (ExportResult, error) {
	var res ExportResult
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, fmt.Errorf("audit: export: %w", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return res, fmt.Errorf("audit: export: %s must be an empty directory", dir)
	}
	origin, err := r.Origin(ctx)
	if err != nil {
		return res, err
	}
	anchor, err := r.metaUint(ctx, "anchor")
	if err != nil {
		return res, err
	}
	stored, err := r.storedCheckpoints(ctx)
	if err != nil {
		return res, err
	}
	if len(stored) == 0 {
		return res, errors.New("audit: export: no checkpoint yet")
	}
	newest := stored[len(stored)-1].size
	a := exportAnchor{Format: ExportFormat, Origin: origin, Size: anchor, Chain: zeroHash, Range: [][]byte{}}
	var cps []exportCheckpoint
	for _, c := range stored {
		cps = append(cps, exportCheckpoint{Size: c.size, Note: string(c.note)})
		if c.size == anchor && anchor > 0 {
			cp, err := ParseCheckpoint(c.note, vkey)
			if err != nil {
				return res, fmt.Errorf("audit: export: anchor: %w", err)
			}
			a.Chain = cp.Chain
			for i := 0; i < len(c.rng); i += HashSize {
				a.Range = append(a.Range, c.rng[i:i+HashSize])
			}
		}
	}
	res.Checkpoints, res.Anchor = len(cps), anchor
	f, err := os.OpenFile(filepath.Join(dir, ExportEntries), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return res, fmt.Errorf("audit: export: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = r.rows(ctx, anchor+1, func(rw row) error {
		if rw.seq > newest {
			return errStop
		}
		w.Write(rw.body)
		res.Entries++
		return w.WriteByte('\n')
	})
	if err != nil && err != errStop {
		f.Close()
		return res, err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return res, fmt.Errorf("audit: export: %w", err)
	}
	if err := f.Close(); err != nil {
		return res, fmt.Errorf("audit: export: %w", err)
	}
	for name, v := range map[string]any{ExportCheckpoints: cps, ExportAnchor: a} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return res, err
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o600); err != nil {
			return res, fmt.Errorf("audit: export: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ExportKey), []byte(vkey+"\n"), 0o600); err != nil {
		return res, fmt.Errorf("audit: export: %w", err)
	}
	return res, nil
}

// ExportKeyOf returns the verifier string stored in an export.
func ExportKeyOf(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ExportKey))
	if err != nil {
		return "", fmt.Errorf("audit: export: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// VerifyExport checks an export offline, always in full. opts.Verifier
// should come from somewhere other than the export itself.
func VerifyExport(ctx context.Context, dir string, opts VerifyOptions) (Report, error) {
	src, err := loadExport(dir)
	if err != nil {
		return Report{}, err
	}
	opts.Full, opts.StateDir = true, ""
	return verify(ctx, src, opts)
}

type exportSource struct {
	anchor  exportAnchor
	cps     []storedCheckpoint
	entries [][]byte
}

func loadExport(dir string) (*exportSource, error) {
	s := &exportSource{}
	b, err := os.ReadFile(filepath.Join(dir, ExportAnchor))
	if err != nil {
		return nil, fmt.Errorf("audit: export: %w", err)
	}
	if err := decodeStrict(b, &s.anchor); err != nil {
		return nil, fmt.Errorf("audit: export: %s: %w", ExportAnchor, err)
	}
	if s.anchor.Format != ExportFormat {
		return nil, fmt.Errorf("audit: export: %s is not a %s anchor", ExportAnchor, ExportFormat)
	}
	var cps []exportCheckpoint
	if b, err = os.ReadFile(filepath.Join(dir, ExportCheckpoints)); err != nil {
		return nil, fmt.Errorf("audit: export: %w", err)
	}
	if err := decodeStrict(b, &cps); err != nil {
		return nil, fmt.Errorf("audit: export: %s: %w", ExportCheckpoints, err)
	}
	for _, c := range cps {
		sc := storedCheckpoint{size: c.Size, note: []byte(c.Note)}
		if c.Size == s.anchor.Size {
			sc.rng = bytes.Join(s.anchor.Range, nil)
		}
		s.cps = append(s.cps, sc)
	}
	if b, err = os.ReadFile(filepath.Join(dir, ExportEntries)); err != nil {
		return nil, fmt.Errorf("audit: export: %w", err)
	}
	if len(b) > 0 {
		if b[len(b)-1] != '\n' {
			return nil, fmt.Errorf("audit: export: %s does not end with a newline (truncated?)", ExportEntries)
		}
		s.entries = bytes.Split(b[:len(b)-1], []byte("\n"))
	}
	return s, nil
}

func (s *exportSource) origin(context.Context) (string, error)     { return s.anchor.Origin, nil }
func (s *exportSource) anchorSize(context.Context) (uint64, error) { return s.anchor.Size, nil }
func (s *exportSource) checkpoints(context.Context) ([]storedCheckpoint, error) {
	return s.cps, nil
}
func (s *exportSource) rows(_ context.Context, from uint64, fn func(row) error) error {
	for i, body := range s.entries {
		seq := s.anchor.Size + uint64(i) + 1
		if seq < from {
			continue
		}
		if err := fn(row{seq: seq, body: body}); err != nil {
			return err
		}
	}
	return nil
}
func (s *exportSource) row(_ context.Context, seq uint64) (row, bool, error) {
	i := seq - s.anchor.Size - 1
	if seq <= s.anchor.Size || i >= uint64(len(s.entries)) {
		return row{}, false, nil
	}
	return row{seq: seq, body: s.entries[i]}, true, nil
}

// decodeStrict decodes the JSON text b into v and refuses what
// encoding/json lets pass: duplicate members (the last would win), member
// names in another case ("Size" read as "size"), unknown or missing
// members. Every verifier then reads the same values from an export.
func decodeStrict(b []byte, v any) error {
	in, err := Canonicalize(b)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	again, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if out, err := Canonicalize(again); err != nil || !bytes.Equal(in, out) {
		return fmt.Errorf("%w: members missing, misspelt or in another case", ErrNotCanonical)
	}
	return nil
}

// b64 is used by docs and tests to print hashes.
func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
