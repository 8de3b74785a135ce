package skill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// InstallOptions are a person's choices for one install.
type InstallOptions struct {
	// Insist installs past the scanner's findings and an unverified
	// signature; the findings are kept in the record.
	Insist bool
}

// Install copies the skill at src (a folder, or a git repository: a URL,
// or a path to a bare repository) into SkillsDir/<name>, refusing what
// is not a plain tree of files, scanning it, verifying a signature it
// carries, and pinning it by its digest. The skill starts with nothing
// granted. Findings come back with the record when the person insisted,
// and in a *FindingsError when they did not (nothing is installed).
func (i *Installed) Install(ctx context.Context, src string, o InstallOptions) (Record, []Finding, error) {
	l, err := i.lock(ctx)
	if err != nil {
		return Record{}, nil, err
	}
	defer l.Release()
	if err := os.MkdirAll(i.SkillsDir, 0o700); err != nil {
		return Record{}, nil, err
	}
	stage, err := os.MkdirTemp(i.SkillsDir, ".install-")
	if err != nil {
		return Record{}, nil, err
	}
	defer removeTree(stage)
	r := Record{Source: src}
	from := src
	if isGitSource(src) {
		from = filepath.Join(stage, "clone")
		if r.Commit, err = i.clone(ctx, src, from); err != nil {
			return Record{}, nil, err
		}
	} else if info, err := os.Stat(src); err != nil {
		return Record{}, nil, fmt.Errorf("%w: %w", ErrNotInstallable, err)
	} else if !info.IsDir() {
		return Record{}, nil, fmt.Errorf("%w: %s is not a folder", ErrNotInstallable, src)
	}
	tree := filepath.Join(stage, "tree")
	es, err := copyTree(from, tree, i.fits)
	if err != nil {
		return Record{}, nil, fmt.Errorf("skill: install %s: %w", src, err)
	}
	if r.Name, err = skillName(tree); err != nil {
		return Record{}, nil, err
	}
	if _, err := readManifest(tree); err != nil {
		return Record{}, nil, err
	}
	findings, err := Scan(os.DirFS(tree))
	if err != nil {
		return Record{}, nil, err
	}
	r.Digest = digestOf(es)
	if sig, err := os.ReadFile(filepath.Join(from, SignatureFile)); err == nil {
		signer, err := i.verify(ctx, r.Digest, sig)
		var se *SignatureError
		switch {
		case errors.As(err, &se) && o.Insist:
			findings = append(findings, Finding{File: SignatureFile, Rule: "signature", Why: se.Why})
		case err != nil:
			return Record{}, nil, err
		}
		r.Signer = signer
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Record{}, nil, err
	}
	if len(findings) > 0 && !o.Insist {
		return Record{}, findings, &FindingsError{Findings: findings}
	}
	r.Insisted = findings
	dst := i.Dir(r.Name)
	if _, err := os.Lstat(dst); err == nil {
		return Record{}, findings, fmt.Errorf("%w: %s (%s)", ErrExists, r.Name, dst)
	}
	if _, err := i.Record(r.Name); err == nil {
		return Record{}, findings, fmt.Errorf("%w: %s has a record but no folder; 'fluffy skill rm %s' forgets it", ErrExists, r.Name, r.Name)
	}
	if err := i.snapshot(r.Name, tree); err != nil {
		return Record{}, findings, err
	}
	if err := readOnly(tree); err != nil {
		return Record{}, findings, err
	}
	if err := os.Rename(tree, dst); err != nil {
		return Record{}, findings, err
	}
	r.Installed = i.now().UTC()
	r.Pinned = r.Installed
	if err := i.writeRecord(r); err != nil {
		return Record{}, findings, err
	}
	return r, findings, nil
}

// Default limits of what an install copies.
const (
	DefaultMaxFiles = 10000
	DefaultMaxBytes = 256 << 20
)

// fits refuses a folder with more entries or bytes than the limits: a
// skill is instructions and scripts, and its copy must not fill the disk.
func (i *Installed) fits(es []entry) error {
	maxFiles, maxBytes := i.MaxFiles, i.MaxBytes
	if maxFiles <= 0 {
		maxFiles = DefaultMaxFiles
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if len(es) > maxFiles {
		return fmt.Errorf("%w: more than %d files and folders", ErrNotInstallable, maxFiles)
	}
	var total int64
	for _, e := range es {
		if total += e.Size; total > maxBytes {
			return fmt.Errorf("%w: more than %d bytes", ErrNotInstallable, maxBytes)
		}
	}
	return nil
}

// snapshot replaces name's pinned copy with a copy of dir: what a later
// review diffs the folder against.
func (i *Installed) snapshot(name, dir string) error {
	tmp := i.pinnedPath(name) + ".new"
	if err := removeTree(tmp); err != nil {
		return err
	}
	if _, err := copyTree(dir, tmp, nil); err != nil {
		return err
	}
	if err := removeTree(i.pinnedPath(name)); err != nil {
		return err
	}
	return os.Rename(tmp, i.pinnedPath(name))
}

// IsGitURL reports whether src is a git URL rather than a path: it has a
// scheme (scheme://...) or is scp-like (user@host:path).
func IsGitURL(src string) bool {
	if strings.Contains(src, "://") {
		return true
	}
	at, colon := strings.Index(src, "@"), strings.Index(src, ":")
	return at > 0 && colon > at && !strings.Contains(src[:at], "/")
}

// isGitSource: a git URL, or a path to a bare repository (HEAD and
// objects/ at its top, no SKILL.md).
func isGitSource(src string) bool {
	if IsGitURL(src) {
		return true
	}
	_, errHead := os.Stat(filepath.Join(src, "HEAD"))
	info, errObj := os.Stat(filepath.Join(src, "objects"))
	_, errSkill := os.Stat(filepath.Join(src, "SKILL.md"))
	return errHead == nil && errObj == nil && info.IsDir() && errSkill != nil
}

// clone clones src's default branch into dst, without submodules, tags
// or hooks, and returns the commit checked out. A clone keeps symlinks as
// symlinks, so the copy after it refuses them as a folder's would.
func (i *Installed) clone(ctx context.Context, src, dst string) (string, error) {
	git := i.Git
	if git == "" {
		git = "git"
	}
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, git, args...)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_ASKPASS=", "SSH_ASKPASS=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("skill: git %s: %w: %s", verb(args), err, strings.TrimSpace(errb.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	// Only the plain transports: never ext:: (which runs a command) or
	// another helper a URL could name, whatever the person's git
	// configuration allows (a protocol's own setting beats
	// protocol.allow, so ext and fd are named).
	if _, err := run("-c", "core.hooksPath=/dev/null", "-c", "protocol.allow=never",
		"-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never",
		"-c", "protocol.file.allow=always", "-c", "protocol.https.allow=always", "-c", "protocol.ssh.allow=always", "-c", "protocol.git.allow=always",
		"clone", "--quiet", "--no-recurse-submodules", "--no-tags", "--single-branch", "-c", "core.symlinks=true", "--", src, dst); err != nil {
		return "", err
	}
	return run("-C", dst, "rev-parse", "HEAD")
}

// verb is the git command among args (after the -c and -C options).
func verb(args []string) string {
	for i := 0; i < len(args); i++ {
		if args[i] == "-c" || args[i] == "-C" {
			i++
			continue
		}
		return args[i]
	}
	return ""
}

// verify checks sig, an SSH signature over the digest line ("sha256:…"
// and a newline, what 'fluffy skill digest' prints) in the fluffy-skill
// namespace, against the allowed signers; it returns the principal.
func (i *Installed) verify(ctx context.Context, digest string, sig []byte) (string, error) {
	if i.AllowedSigners == "" {
		return "", &SignatureError{Why: "no allowed signers file to verify it against"}
	}
	if _, err := os.Stat(i.AllowedSigners); err != nil {
		return "", &SignatureError{Why: "no allowed signers file to verify it against: " + err.Error()}
	}
	keygen := i.SSHKeygen
	if keygen == "" {
		keygen = "ssh-keygen"
	}
	tmp, err := os.MkdirTemp(i.StateDir, ".sig-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	sigPath := filepath.Join(tmp, "skill.sig")
	if err := os.WriteFile(sigPath, sig, 0o600); err != nil {
		return "", err
	}
	msg := digest + "\n"
	out, err := exec.CommandContext(ctx, keygen, "-Y", "find-principals", "-s", sigPath, "-f", i.AllowedSigners).Output()
	if err != nil {
		return "", &SignatureError{Why: "no allowed signer made it"}
	}
	principals := strings.Fields(string(out))
	for _, p := range principals {
		v := exec.CommandContext(ctx, keygen, "-Y", "verify", "-f", i.AllowedSigners, "-I", p, "-n", SignatureNamespace, "-s", sigPath)
		v.Stdin = strings.NewReader(msg)
		if err := v.Run(); err == nil {
			return p, nil
		}
	}
	return "", &SignatureError{Why: "it does not sign this folder's digest " + digest}
}
