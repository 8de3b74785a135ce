package skill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
)

// Errors callers branch on.
var (
	// ErrNotInstalled: no installed skill has that name (it may still be
	// an assistant, user or project skill the person wrote: those have no
	// pin and no grant record).
	ErrNotInstalled = errors.New("skill: not installed")
	// ErrExists: an installed skill or a folder of that name is there.
	ErrExists = errors.New("skill: already installed")
	// ErrTampered: an installed skill's files no longer match its pin
	// (*TamperedError says which).
	ErrTampered = errors.New("skill: files do not match the pinned digest")
	// ErrFindings: the scanner flagged the skill and the person did not
	// insist (*FindingsError lists the findings).
	ErrFindings = errors.New("skill: the scanner flagged the skill")
	// ErrSignature: the folder carries a signature that does not verify
	// against the allowed signers (*SignatureError says why).
	ErrSignature = errors.New("skill: signature not verified")
	// ErrNotInstallable: the folder is not a skill fluffy can install
	// (no SKILL.md, a bad name, a manifest that does not parse).
	ErrNotInstallable = errors.New("skill: not installable")
	// ErrChangedSinceReview: the folder changed between the review the
	// person saw and the re-pin or grant they confirmed.
	ErrChangedSinceReview = errors.New("skill: changed since it was reviewed")
)

// TamperedError is ErrTampered with the paths that differ from the
// pinned copy.
type TamperedError struct {
	Name          string
	Pinned, Found string // digests
	// Changed are the paths added, removed or modified ("" when the
	// folder could not be listed at all: Err says why).
	Changed []string
	Err     error
}

func (e *TamperedError) Error() string {
	s := fmt.Sprintf("skill %s: its files do not match the pinned digest %s", e.Name, e.Pinned)
	if len(e.Changed) > 0 {
		s += " (changed: " + strings.Join(e.Changed, ", ") + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s + "; review with 'fluffy skill pin " + e.Name + "'"
}

func (e *TamperedError) Is(target error) bool { return target == ErrTampered }
func (e *TamperedError) Unwrap() error        { return e.Err }

// FindingsError is ErrFindings with the findings.
type FindingsError struct{ Findings []Finding }

func (e *FindingsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the scanner flagged %d thing(s) supply-chain attacks on skill registries use:", len(e.Findings))
	for _, f := range e.Findings {
		b.WriteString("\n  " + f.String())
	}
	return b.String()
}

func (e *FindingsError) Is(target error) bool { return target == ErrFindings }

// SignatureError is ErrSignature with the reason.
type SignatureError struct{ Why string }

func (e *SignatureError) Error() string {
	return "the skill's signature (" + SignatureFile + ") is not verified: " + e.Why
}
func (e *SignatureError) Is(target error) bool { return target == ErrSignature }

// Record is what fluffy keeps about an installed skill, apart from its
// folder (which the person's own tools can write): where it came from,
// its pin and what the person granted it.
type Record struct {
	Name string `json:"name"`
	// Source is the path or URL it was installed from; Commit the
	// commit a clone checked out.
	Source string `json:"source"`
	Commit string `json:"commit,omitempty"`
	// Digest is the pin (see Digest).
	Digest string `json:"digest"`
	// Signer is the allowed-signers principal whose signature verified
	// over the digest at install, "" for none.
	Signer    string    `json:"signer,omitempty"`
	Installed time.Time `json:"installed"`
	Pinned    time.Time `json:"pinned"`
	// Insisted are the findings the person installed or re-pinned past.
	Insisted []Finding `json:"insisted,omitempty"`
	// Grant is what the person granted; nil: nothing, the default.
	Grant *Grant `json:"grant,omitempty"`
}

// Grant is what a person granted an installed skill of what its
// manifest asks. Runs get the part of it the manifest still asks for.
type Grant struct {
	Network     []string     `json:"network,omitempty"`
	Credentials []Credential `json:"credentials,omitempty"`
	// Digest is the pin the person saw the asks under.
	Digest string    `json:"digest"`
	At     time.Time `json:"at"`
}

// Installed keeps the skills installed from elsewhere: their folders
// under SkillsDir and their records (pins, grants, pinned copies) under
// StateDir. Its methods take a lock file under StateDir, so two fluffy
// processes never interleave an install, a grant or a re-pin.
type Installed struct {
	// SkillsDir is where installed skills live:
	// $XDG_CONFIG_HOME/fluffy/skills. Required.
	SkillsDir string
	// StateDir holds the records: <data dir>/skills. Required.
	StateDir string
	// AllowedSigners is an ssh allowed-signers file signatures are
	// verified against; "" when the person has none (then a signed skill
	// is refused unless they insist).
	AllowedSigners string
	// Git and SSHKeygen are the programs run ("git", "ssh-keygen" when
	// empty, looked up in PATH).
	Git, SSHKeygen string
	// MaxFiles and MaxBytes bound what an install copies (entries, and
	// the files' bytes together); DefaultMaxFiles and DefaultMaxBytes
	// when zero.
	MaxFiles int
	MaxBytes int64
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (i *Installed) now() time.Time {
	if i.Now != nil {
		return i.Now()
	}
	return time.Now()
}

func (i *Installed) lock(ctx context.Context) (*lockfile.Lock, error) {
	if i.SkillsDir == "" || i.StateDir == "" {
		return nil, errors.New("skill: Installed needs SkillsDir and StateDir")
	}
	for _, d := range []string{i.StateDir, filepath.Join(i.StateDir, "installed"), filepath.Join(i.StateDir, "pinned")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return lockfile.Acquire(ctx, filepath.Join(i.StateDir, "lock"), lockfile.Options{Wait: 30 * time.Second, WritePID: true})
}

// installNameRE is a skill's name as the Agent Skills format has it
// (lower-case letters, digits, single hyphens inside; at most 64): the
// installed folder's name, so nothing else may reach a path.
var installNameRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// recordPath and pinnedPath: name has passed installNameRE.
func (i *Installed) recordPath(name string) string {
	return filepath.Join(i.StateDir, "installed", name+".json")
}

func (i *Installed) pinnedPath(name string) string {
	return filepath.Join(i.StateDir, "pinned", name)
}

// Dir is an installed skill's folder.
func (i *Installed) Dir(name string) string { return filepath.Join(i.SkillsDir, name) }

// Record reads name's record.
func (i *Installed) Record(name string) (Record, error) {
	var r Record
	if !installNameRE.MatchString(name) || len(name) > 64 {
		return r, fmt.Errorf("%w: %q", ErrNotInstalled, name)
	}
	b, err := os.ReadFile(i.recordPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("%w: %s", ErrNotInstalled, name)
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("skill: record of %s: %w", name, err)
	}
	return r, nil
}

// Records lists the installed skills, by name.
func (i *Installed) Records() ([]Record, error) {
	ms, err := filepath.Glob(filepath.Join(i.StateDir, "installed", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, m := range ms {
		r, err := i.Record(strings.TrimSuffix(filepath.Base(m), ".json"))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (i *Installed) writeRecord(r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	p := i.recordPath(r.Name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Check verifies name's folder against its pin: a *TamperedError when a
// file was added, removed or changed (or the folder cannot be read).
func (i *Installed) Check(name string) (Record, error) {
	r, err := i.Record(name)
	if err != nil {
		return r, err
	}
	es, err := listTree(i.Dir(name))
	if err != nil {
		return r, &TamperedError{Name: name, Pinned: r.Digest, Err: err}
	}
	if got := digestOf(es); got != r.Digest {
		pinned, _ := listTree(i.pinnedPath(name))
		return r, &TamperedError{Name: name, Pinned: r.Digest, Found: got, Changed: changedPaths(pinned, es)}
	}
	return r, nil
}

// changedPaths: the paths whose entries differ between a and b.
func changedPaths(a, b []entry) []string {
	byPath := func(es []entry) map[string]entry {
		m := make(map[string]entry, len(es))
		for _, e := range es {
			m[e.Rel] = e
		}
		return m
	}
	ma, mb := byPath(a), byPath(b)
	var out []string
	for p, e := range ma {
		if o, ok := mb[p]; !ok || o != e {
			out = append(out, p)
		}
	}
	for p := range mb {
		if _, ok := ma[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Granted is what a run of the installed skill name may have: the hosts
// and credentials the person granted that its (pinned) manifest still
// asks for; nothing before a grant. A skill whose files do not match its
// pin gets an error (ErrTampered) and must not run; a skill that was not
// installed gets ErrNotInstalled (the runner then uses the manifest of
// the person's own skill as it stands).
func (i *Installed) Granted(name string) (network []string, creds []Credential, err error) {
	r, err := i.Check(name)
	if err != nil {
		return nil, nil, err
	}
	m, err := readManifest(i.Dir(name))
	if err != nil {
		return nil, nil, err
	}
	if r.Grant == nil {
		return nil, nil, nil
	}
	for _, h := range m.Network {
		if slices.Contains(r.Grant.Network, h) {
			network = append(network, h)
		}
	}
	for _, c := range m.Credentials {
		if slices.ContainsFunc(r.Grant.Credentials, func(g Credential) bool { return grantMatches(g, c) }) {
			creds = append(creds, c)
		}
	}
	return network, creds, nil
}

func grantMatches(a, b Credential) bool {
	return a.Ref == b.Ref && a.As == b.As && a.Name == b.Name && slices.Equal(a.Bind, b.Bind)
}

// Asks is what name's manifest asks for, and the pin it was read under;
// the folder must match its pin.
func (i *Installed) Asks(name string) (Manifest, string, error) {
	r, err := i.Check(name)
	if err != nil {
		return Manifest{}, "", err
	}
	m, err := readManifest(i.Dir(name))
	return m, r.Digest, err
}

// SetGrant records g as name's grant (nil revokes everything). The
// folder must still match the pin g.Digest the person saw the asks
// under, else ErrChangedSinceReview.
func (i *Installed) SetGrant(ctx context.Context, name string, g *Grant) (Record, error) {
	l, err := i.lock(ctx)
	if err != nil {
		return Record{}, err
	}
	defer l.Release()
	r, err := i.Check(name)
	if err != nil {
		return r, err
	}
	if g != nil {
		if g.Digest != r.Digest {
			return r, fmt.Errorf("%w: the asks shown were read under %s, the pin is %s", ErrChangedSinceReview, g.Digest, r.Digest)
		}
		g.At = i.now().UTC()
	}
	r.Grant = g
	return r, i.writeRecord(r)
}

// Forget drops name's record and pinned copy (after its folder is
// removed); it is no error when there is none.
func (i *Installed) Forget(ctx context.Context, name string) error {
	if !installNameRE.MatchString(name) || len(name) > 64 {
		return fmt.Errorf("%w: %q", ErrNotInstalled, name)
	}
	l, err := i.lock(ctx)
	if err != nil {
		return err
	}
	defer l.Release()
	if err := os.Remove(i.recordPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return removeTree(i.pinnedPath(name))
}

// removeTree removes a tree whose files may be read-only.
func removeTree(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// readOnly takes the write bits off dir's files: an installed skill
// changes only through a reviewed re-pin (docs/skills.md); the
// person can still write them, but nothing does so by accident.
func readOnly(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&^0o222)
	})
}

// skillName reads the name from SKILL.md's YAML front matter.
func skillName(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "SKILL.md"))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotInstallable, err)
	}
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(b, []byte("---\n"))
	if !ok {
		return "", fmt.Errorf("%w: SKILL.md:1: no front matter (a first line ---)", ErrNotInstallable)
	}
	fm, _, ok := bytes.Cut(rest, []byte("\n---"))
	if !ok {
		return "", fmt.Errorf("%w: SKILL.md: the front matter has no closing ---", ErrNotInstallable)
	}
	var v struct {
		Name string `yaml:"name"`
	}
	if err := yaml.Unmarshal(fm, &v); err != nil {
		return "", fmt.Errorf("%w: SKILL.md front matter: %w", ErrNotInstallable, err)
	}
	if !installNameRE.MatchString(v.Name) || len(v.Name) > 64 {
		return "", fmt.Errorf("%w: SKILL.md: name %q must be lower-case letters and digits, with single hyphens inside, at most 64", ErrNotInstallable, v.Name)
	}
	return v.Name, nil
}

// manifestFiles are the names a manifest is read from, first found wins.
var manifestFiles = []string{"skill.yaml", "carapace.yaml"}

// readManifest reads dir's manifest strictly (unknown fields refused);
// the zero Manifest when there is none.
func readManifest(dir string) (Manifest, error) {
	var m Manifest
	for _, n := range manifestFiles {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return m, err
		}
		return decodeManifest(n, b)
	}
	return m, nil
}

func decodeManifest(name string, b []byte) (Manifest, error) {
	var m Manifest
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil && !errors.Is(err, io.EOF) {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrNotInstallable, name, err)
	}
	return m, nil
}
