package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// BaseImage is the tag of fluffy's base image: the Debian one
// (EnsureDebianImage), or the minimal busybox one (EnsureBaseImage).
const BaseImage = "fluffy-base:latest"

// LabelContent carries the content hash an image was built from; a build
// whose context hashes the same is skipped.
const LabelContent = "dev.fluffy.content"

// BaseOptions configure the minimal base image.
type BaseOptions struct {
	// Tag defaults to BaseImage.
	Tag string
	// Busybox is a statically linked busybox; empty means the first of
	// /usr/bin/busybox and /bin/busybox (Debian's busybox-static).
	Busybox string
	// Files are extra host files copied into the image at the same path
	// (tests add a dynamic loader and libc for their probe).
	Files []string
}

// BuildResult says what a build did.
type BuildResult struct {
	Tag, Content string
	// Cached is true when an image with the same content hash existed.
	Cached bool
}

// EnsureBaseImage builds the minimal base image ('image build base
// --minimal') when it is missing or its content changed: busybox (static) and its applets in /bin FROM scratch, an
// /etc/passwd with root and nobody, nothing else. The build context is a
// deterministic tar (fixed times and owners, sorted), so the same busybox
// gives the same content hash on every machine.
func EnsureBaseImage(ctx context.Context, cli *client.Client, opts BaseOptions) (BuildResult, error) {
	tag := orDefault(opts.Tag, BaseImage)
	bb := opts.Busybox
	if bb == "" {
		for _, p := range []string{"/usr/bin/busybox", "/bin/busybox"} {
			if _, err := os.Stat(p); err == nil {
				bb = p
				break
			}
		}
	}
	if bb == "" {
		return BuildResult{}, &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "busybox", Required: true,
			Detail: "no static busybox to build the base image from", Fix: "apt-get install busybox-static"}}}
	}
	if dynamic, err := isDynamic(bb); err != nil || dynamic {
		return BuildResult{}, &sandbox.UnavailableError{Missing: []sandbox.Facility{{Name: "busybox", Required: true,
			Detail: fmt.Sprintf("%s is not a statically linked executable (%v): it cannot run in an image FROM scratch", bb, err),
			Fix:    "apt-get install busybox-static (it replaces the dynamic busybox package)"}}}
	}
	out, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return BuildResult{}, fmt.Errorf("docker: %s --list: %w", bb, err)
	}
	ctxTar := newTarBuilder()
	ctxTar.dir("rootfs")
	ctxTar.dir("rootfs/bin")
	if err := ctxTar.hostFile("rootfs/bin/busybox", bb); err != nil {
		return BuildResult{}, err
	}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.ContainsAny(a, "/.") {
			ctxTar.symlink("rootfs/bin/"+a, "busybox")
		}
	}
	ctxTar.dir("rootfs/etc")
	ctxTar.file("rootfs/etc/passwd", []byte("root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n"), 0o644)
	ctxTar.file("rootfs/etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	for _, f := range opts.Files {
		if err := ctxTar.hostFile("rootfs"+f, f); err != nil {
			return BuildResult{}, err
		}
	}
	ctxTar.file("Dockerfile", []byte("FROM scratch\nCOPY rootfs/ /\nCMD [\"/bin/sh\"]\n"), 0o644)
	return buildTar(ctx, cli, tag, ctxTar)
}

// isDynamic reports whether the ELF file p asks for a program interpreter.
func isDynamic(p string) (bool, error) {
	f, err := elf.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, pr := range f.Progs {
		if pr.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// BuildDir builds the Dockerfile in dir (a skill's image) into tag, unless
// an image tagged so was built from the same content: the hash covers the
// Dockerfile and every file of the context (names, modes, contents), so a
// changed Dockerfile or requirements file triggers a rebuild. Symlinks are
// kept as links; files outside dir are never read.
func BuildDir(ctx context.Context, cli *client.Client, dir, tag string) (BuildResult, error) {
	tb := newTarBuilder()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			tb.dir(rel)
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			tb.symlink(rel, l)
		case info.Mode().IsRegular():
			return tb.hostFile(rel, p)
		}
		return nil
	})
	if err != nil {
		return BuildResult{}, fmt.Errorf("docker: reading build context %s: %w", dir, err)
	}
	return buildTar(ctx, cli, tag, tb)
}

func buildTar(ctx context.Context, cli *client.Client, tag string, tb *tarBuilder) (BuildResult, error) {
	body, sum, err := tb.finish()
	if err != nil {
		return BuildResult{}, err
	}
	res := BuildResult{Tag: tag, Content: sum}
	if img, err := cli.ImageInspect(ctx, tag); err == nil && img.Config != nil && img.Config.Labels[LabelContent] == sum {
		res.Cached = true
		return res, nil
	}
	resp, err := cli.ImageBuild(ctx, bytes.NewReader(body), client.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, NetworkMode: "none",
		Labels: map[string]string{LabelContent: sum, LabelManaged: "1"},
	})
	if err != nil {
		return res, fmt.Errorf("docker: building %s: %w", tag, err)
	}
	defer resp.Body.Close()
	log, err := readProgress(resp.Body)
	if err != nil {
		return res, fmt.Errorf("docker: building %s: %w", tag, err)
	}
	if img, err := cli.ImageInspect(ctx, tag); err != nil || img.Config == nil || img.Config.Labels[LabelContent] != sum {
		return res, fmt.Errorf("docker: building %s: the image is missing afterwards: %v\n%s", tag, err, log)
	}
	return res, nil
}

// tarBuilder writes a deterministic tar: entries sorted by name, fixed
// times and owners.
type tarBuilder struct {
	entries map[string]TarEntry
}

// TarEntry is one entry of a tar an image is built or imported from.
type TarEntry struct {
	Type byte // tar.TypeReg, TypeDir, TypeSymlink
	Mode int64
	Data []byte
	Link string
}

func newTarBuilder() *tarBuilder { return &tarBuilder{entries: map[string]TarEntry{}} }

func (t *tarBuilder) dir(name string) { t.entries[name] = TarEntry{Type: tar.TypeDir, Mode: 0o755} }
func (t *tarBuilder) file(name string, b []byte, mode int64) {
	t.entries[name] = TarEntry{Type: tar.TypeReg, Mode: mode, Data: b}
}
func (t *tarBuilder) symlink(name, target string) {
	t.entries[name] = TarEntry{Type: tar.TypeSymlink, Mode: 0o777, Link: target}
}

func (t *tarBuilder) hostFile(name, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	for d := filepath.Dir(name); d != "." && d != "/"; d = filepath.Dir(d) {
		if _, ok := t.entries[d]; !ok {
			t.dir(d)
		}
	}
	t.file(name, b, int64(fi.Mode().Perm()))
	return nil
}

// finish returns the tar and the hex sha256 of its bytes.
func (t *tarBuilder) finish() ([]byte, string, error) { return DeterministicTar(t.entries) }

// DeterministicTar writes entries as a tar in path order, every time the
// epoch and no owner, so the same entries make the same bytes (an
// image's content key); it returns the tar and the hex sha256 of it.
func DeterministicTar(entries map[string]TarEntry) ([]byte, string, error) {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{Name: n, Typeflag: e.Type, Mode: e.Mode, Linkname: e.Link, Size: int64(len(e.Data)), ModTime: epoch, Format: tar.FormatPAX}
		if e.Type == tar.TypeDir {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:]), nil
}
