package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// DebianPackages returns the base image's packages beyond Debian's
// Essential set: what the Python red-green flow runs (python3 and pytest,
// which test.run's pytest runner calls), git and the CA certificates.
func DebianPackages() []string {
	return []string{"ca-certificates", "git", "python3", "python3-pytest"}
}

// BaseUser is the base image's non-root user ("fluffy", uid and gid
// 1000), the image's default user. fluffy's runtime names its own user
// for every container (the workspace's owner, else nobody).
const BaseUser = "1000:1000"

// DebianOptions configure the Debian base image.
type DebianOptions struct {
	// Tag defaults to BaseImage.
	Tag string
	// Suite is the Debian (or Ubuntu) release; empty means the host's
	// VERSION_CODENAME (/etc/os-release).
	Suite string
	// Sources are one-line apt sources ("deb [signed-by=K] URI SUITE
	// COMPONENTS..."); empty means the host's own apt sources for Suite
	// and its updates (Suite-*).
	Sources []string
	// Packages default to DebianPackages.
	Packages []string
	// HostRoot is where the host's /etc is read from; empty means "/".
	HostRoot string
	// LockDir holds the lock that makes concurrent builds of one tag wait
	// for each other; empty means /run/fluffy/docker. A directory that
	// cannot be created means no lock (the builds then both run).
	LockDir string
}

// debianRecipe is what a Debian base image is built from: the builder's
// command line (without the output path) and the image changes. Its hash
// is the image's content label.
type debianRecipe struct {
	tag     string
	argv    []string // the builder and its options; then suite, output, sources
	suite   string
	sources []string
	changes []string
}

// hash is the hex sha256 of the recipe: everything that decides what is
// built, so a changed package list, suite or source rebuilds.
func (r debianRecipe) hash() string {
	h := sha256.New()
	for _, part := range [][]string{r.argv, {r.suite}, r.sources, r.changes} {
		for _, s := range part {
			fmt.Fprintf(h, "%d:%s\n", len(s), s)
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// command returns the builder's argv writing the root file system as a
// tar to out.
func (r debianRecipe) command(out string) []string {
	argv := append([]string{}, r.argv...)
	argv = append(argv, r.suite, out)
	return append(argv, r.sources...)
}

// newDebianRecipe resolves opts against the host.
func newDebianRecipe(opts DebianOptions) (debianRecipe, error) {
	root := orDefault(opts.HostRoot, "/")
	suite := opts.Suite
	if suite == "" {
		var err error
		if suite, err = hostCodename(root); err != nil {
			return debianRecipe{}, err
		}
	}
	sources := opts.Sources
	if len(sources) == 0 {
		var err error
		if sources, err = hostSources(filepath.Join(root, "etc/apt"), suite); err != nil {
			return debianRecipe{}, err
		}
		if len(sources) == 0 {
			return debianRecipe{}, &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "apt-sources", Required: true,
				Detail: fmt.Sprintf("no apt source for %s (or %s-*) in %s", suite, suite, filepath.Join(root, "etc/apt")),
				Fix:    "add the Debian archive to /etc/apt/sources.list.d, or build the minimal image: fluffy image build base --minimal"}}}
		}
	}
	pkgs := opts.Packages
	if len(pkgs) == 0 {
		pkgs = DebianPackages()
	}
	pkgs = append([]string{}, pkgs...)
	sort.Strings(pkgs)
	for _, p := range pkgs {
		if p == "" || strings.ContainsAny(p, ", \t\n") {
			return debianRecipe{}, fmt.Errorf("%w: package name %q", sandbox.ErrInvalidSpec, p)
		}
	}
	argv := []string{"mmdebstrap",
		// Only the Essential set (no apt, no priority-required extras),
		// plus the packages and their dependencies.
		"--variant=essential",
		"--include=" + strings.Join(pkgs, ","),
		"--format=tar",
		// Documentation, manual pages and translations are a quarter
		// of the image and nothing in a sandbox reads them; the
		// copyright files stay.
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/info/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		`--customize-hook=echo "fluffy:x:1000:1000:fluffy:/tmp:/bin/sh" >> "$1/etc/passwd"; echo "fluffy:x:1000:" >> "$1/etc/group"`,
	}
	changes := []string{
		"USER " + BaseUser,
		"WORKDIR /",
		"ENV PATH=/usr/local/bin:/usr/bin:/bin",
		"ENV HOME=/tmp",
		`CMD ["/bin/sh"]`,
	}
	return debianRecipe{tag: orDefault(opts.Tag, BaseImage), argv: argv, suite: suite, sources: sources, changes: changes}, nil
}

// DebianContent is the content label (LabelContent) of the Debian base
// image opts would build on this host: an image carrying it is up to date.
func DebianContent(opts DebianOptions) (string, error) {
	rec, err := newDebianRecipe(opts)
	if err != nil {
		return "", err
	}
	return rec.hash(), nil
}

// EnsureDebianImage builds the Debian base image when it is missing or was
// built from another recipe: Debian's Essential packages and DebianPackages
// from the host's apt sources by mmdebstrap, imported through the engine's
// API (no registry, no Dockerfile), with BaseUser as its user. The label
// dev.fluffy.content is the recipe's hash (builder options, suite,
// sources, packages), so an unchanged recipe skips the build; newer
// package versions in the archive do not trigger one.
func EnsureDebianImage(ctx context.Context, cli *client.Client, opts DebianOptions) (BuildResult, error) {
	rec, err := newDebianRecipe(opts)
	if err != nil {
		return BuildResult{}, err
	}
	sum := rec.hash()
	res := BuildResult{Tag: rec.tag, Content: sum}
	lock := lockBuild(ctx, opts.LockDir, rec.tag)
	defer lock.Release()
	old := ""
	if img, err := cli.ImageInspect(ctx, rec.tag); err == nil {
		if img.Config != nil && img.Config.Labels[LabelContent] == sum {
			res.Cached = true
			return res, nil
		}
		old = img.ID
	}
	if err := buildDebian(ctx, cli, rec, sum); err != nil {
		return res, err
	}
	if old != "" {
		// The replaced image is a few hundred MB; an engine that still
		// uses it for a container keeps it.
		_, _ = cli.ImageRemove(ctx, old, client.ImageRemoveOptions{})
	}
	return res, nil
}

// EnsureBasePresent builds the Debian base image only when no image
// tagged opts.Tag exists: the image a 'sandbox run' starts from on first
// use. An existing one (built from an older recipe, or the minimal one) is
// kept; 'fluffy image build base' brings it up to date.
func EnsureBasePresent(ctx context.Context, cli *client.Client, opts DebianOptions) (BuildResult, error) {
	tag := orDefault(opts.Tag, BaseImage)
	if img, err := cli.ImageInspect(ctx, tag); err == nil {
		r := BuildResult{Tag: tag, Cached: true}
		if img.Config != nil {
			r.Content = img.Config.Labels[LabelContent]
		}
		return r, nil
	}
	return EnsureDebianImage(ctx, cli, opts)
}

// lockBuild takes the build lock of tag, waiting for another build of it
// to end; nil (no lock) when the lock directory is not available.
func lockBuild(ctx context.Context, dir, tag string) *lockfile.Lock {
	dir = orDefault(dir, "/run/fluffy/docker")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil
	}
	sum := sha256.Sum256([]byte(tag))
	l, err := lockfile.Acquire(ctx, filepath.Join(dir, "build-"+hex.EncodeToString(sum[:8])+".lock"), lockfile.Options{Wait: lockfile.Forever})
	if err != nil {
		return nil
	}
	return l
}

// buildDebian runs the builder into a temporary tar and imports it.
func buildDebian(ctx context.Context, cli *client.Client, rec debianRecipe, sum string) error {
	if _, err := exec.LookPath(rec.argv[0]); err != nil {
		return &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "mmdebstrap", Required: true,
			Detail: "the Debian base image is built by mmdebstrap, which is not installed: " + err.Error(),
			Fix:    "apt-get install mmdebstrap (or build the busybox image: fluffy image build base --minimal)"}}}
	}
	tmp, err := os.MkdirTemp("", "fluffy-base-")
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "rootfs.tar")
	argv := rec.command(out)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// mmdebstrap mounts /proc, /sys and /dev in its chroot; on SIGTERM it
	// lets the current step end (a minute, under load), then unmounts them
	// and removes its directory. A kill would leave them behind.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Minute
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker: building %s: %s: %w\n%s", rec.tag, argv[0], err, tail(log.String(), 20))
	}
	f, err := os.Open(out)
	if err != nil {
		return fmt.Errorf("docker: building %s: %w", rec.tag, err)
	}
	defer f.Close()
	changes := append([]string{}, rec.changes...)
	changes = append(changes, "LABEL "+LabelContent+"="+sum, "LABEL "+LabelManaged+"=1")
	resp, err := cli.ImageImport(ctx, client.ImageImportSource{Source: f, SourceName: "-"}, rec.tag, client.ImageImportOptions{Changes: changes})
	if err != nil {
		return fmt.Errorf("docker: importing %s: %w", rec.tag, err)
	}
	defer resp.Close()
	progress, err := readProgress(resp)
	if err != nil {
		return fmt.Errorf("docker: importing %s: %w", rec.tag, err)
	}
	if img, err := cli.ImageInspect(ctx, rec.tag); err != nil || img.Config == nil || img.Config.Labels[LabelContent] != sum {
		return fmt.Errorf("docker: importing %s: the image is missing afterwards: %v\n%s", rec.tag, err, progress)
	}
	return nil
}

// readProgress reads an engine's JSON progress stream (build or import)
// to its end: the text it carried, or the error it reported.
func readProgress(r io.Reader) (string, error) {
	dec := json.NewDecoder(r)
	var log strings.Builder
	for {
		var m struct {
			Stream string `json:"stream"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return log.String(), nil
			}
			return log.String(), fmt.Errorf("reading progress: %w", err)
		}
		if m.Error != "" {
			return log.String(), errors.New(m.Error)
		}
		log.WriteString(m.Stream)
		if m.Status != "" {
			log.WriteString(m.Status + "\n")
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// hostCodename reads VERSION_CODENAME from root's /etc/os-release.
func hostCodename(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "etc/os-release"))
	if err != nil {
		return "", fmt.Errorf("docker: the host's release: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "VERSION_CODENAME="); ok {
			if v = strings.Trim(v, `"'`); v != "" {
				return v, nil
			}
		}
	}
	return "", &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "apt-sources", Required: true,
		Detail: "the host's /etc/os-release names no VERSION_CODENAME (not a Debian release?)",
		Fix:    "build the minimal image: fluffy image build base --minimal"}}}
}

// hostSources returns the enabled binary ("deb") apt sources in aptDir
// (sources.list, then sources.list.d/*.list and *.sources in name order,
// as apt reads them) whose suite is suite or suite-*, one line each:
// "deb [signed-by=KEYRING] URI SUITE COMPONENTS...". A Signed-By that
// holds the key itself is left out (mmdebstrap then uses the host's
// trusted keys).
func hostSources(aptDir, suite string) ([]string, error) {
	files := []string{filepath.Join(aptDir, "sources.list")}
	names, err := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	files = append(files, names...)
	var out []string
	seen := map[string]bool{}
	for _, f := range files {
		var entries []aptSource
		switch {
		case strings.HasSuffix(f, ".sources"):
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("docker: apt sources: %w", err)
			}
			entries = parseDeb822(string(b))
		case strings.HasSuffix(f, ".list"):
			b, err := os.ReadFile(f)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("docker: apt sources: %w", err)
			}
			entries = parseOneLine(string(b))
		}
		for _, e := range entries {
			if e.suite != suite && !strings.HasPrefix(e.suite, suite+"-") {
				continue
			}
			if l := e.line(); !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// aptSource is one "deb" source: one URI and one suite.
type aptSource struct {
	signedBy, uri, suite string
	components           []string
}

func (s aptSource) line() string {
	l := "deb "
	if s.signedBy != "" {
		l += "[signed-by=" + s.signedBy + "] "
	}
	return l + s.uri + " " + s.suite + " " + strings.Join(s.components, " ")
}

// parseOneLine reads the one-line format: "deb [opt=v ...] URI SUITE
// COMPONENT...".
func parseOneLine(text string) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		s := aptSource{}
		if strings.HasPrefix(f[0], "[") {
			var opts []string
			for len(f) > 0 {
				tok := f[0]
				f = f[1:]
				opts = append(opts, strings.Fields(strings.Trim(tok, "[]"))...)
				if strings.HasSuffix(tok, "]") {
					break
				}
			}
			for _, o := range opts {
				if v, ok := strings.CutPrefix(o, "signed-by="); ok {
					s.signedBy = v
				}
			}
		}
		if len(f) < 2 {
			continue
		}
		s.uri, s.suite, s.components = f[0], f[1], f[2:]
		out = append(out, s)
	}
	return out
}

// parseDeb822 reads the deb822 format: stanzas of Types, URIs, Suites,
// Components, Signed-By and Enabled, separated by blank lines.
func parseDeb822(text string) []aptSource {
	var out []aptSource
	for _, stanza := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		fields := map[string]string{}
		last := ""
		for _, l := range strings.Split(stanza, "\n") {
			switch {
			case strings.HasPrefix(l, "#"), strings.TrimSpace(l) == "":
			case l[0] == ' ' || l[0] == '\t':
				if last != "" {
					fields[last] += "\n" + strings.TrimSpace(l)
				}
			default:
				k, v, ok := strings.Cut(l, ":")
				if !ok {
					continue
				}
				last = strings.ToLower(strings.TrimSpace(k))
				fields[last] = strings.TrimSpace(v)
			}
		}
		if strings.EqualFold(fields["enabled"], "no") || !containsWord(fields["types"], "deb") {
			continue
		}
		signedBy := fields["signed-by"]
		if strings.ContainsAny(signedBy, "\n ") {
			signedBy = "" // the key itself, or several keyrings
		}
		for _, uri := range strings.Fields(fields["uris"]) {
			for _, suite := range strings.Fields(fields["suites"]) {
				out = append(out, aptSource{signedBy: signedBy, uri: uri, suite: suite, components: strings.Fields(fields["components"])})
			}
		}
	}
	return out
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
