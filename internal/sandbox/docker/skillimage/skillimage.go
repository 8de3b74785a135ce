// Package skillimage owns skills' container images: a skill whose
// manifest names a Dockerfile gets an image built from it on the local
// engine (the classic builder, no registry, network none), FROM fluffy's
// base image, tagged fluffy-skill/<name>:<key12> and labelled with the
// key, a hash of the build context as sent (the Dockerfile with the base
// image's ID put in, and every file .dockerignore keeps: names, modes,
// link targets, contents; never times). Ensure builds only when no image
// carries the key; GC removes the images of skills that are gone and
// those a newer key superseded, never one a container uses. The skill
// runner asks Ensure for the image to run in; 'fluffy skill build' drives
// Build and GC through internal/wiring. docs/skills.md is the
// user's reference.
package skillimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// Labels on every skill image (with docker.LabelContent: the key).
const (
	LabelSkill      = "dev.fluffy.skill"            // the skill's name
	LabelDir        = "dev.fluffy.skill.dir"        // its folder, absolute
	LabelDockerfile = "dev.fluffy.skill.dockerfile" // the Dockerfile, relative to the folder
)

// Repository is the image repository skill images are tagged in:
// Repository/<name>:<first 12 hex digits of the key>.
const Repository = "fluffy-skill"

// DefaultMaxContext bounds a build context (it is held in memory).
const DefaultMaxContext = 256 << 20

var (
	// ErrInvalid: the skill cannot have an image (a bad name, a
	// Dockerfile outside its folder or not a regular file, a context
	// too big).
	ErrInvalid = errors.New("skillimage: invalid skill image")
	// ErrRefused: the Dockerfile asks for what a build here never gets
	// (an image from a registry, a URL fetched by the engine); the
	// *DockerfileError carrying it names the line.
	ErrRefused = errors.New("refused")
	// ErrNoBase: fluffy's base image is not on the engine and the
	// builder was not given a way to build it.
	ErrNoBase = errors.New("skillimage: the base image is missing (build it: fluffy image build base)")
)

// Options configure a Builder.
type Options struct {
	// Client is the engine. Required.
	Client *client.Client
	// Base is the image "FROM fluffy-base" stands for, and the image of
	// a skill without a Dockerfile; empty means docker.BaseImage.
	Base string
	// EnsureBase makes Base present when it is missing; nil makes a
	// missing base ErrNoBase.
	EnsureBase func(ctx context.Context) error
	// LockDir holds the locks that make concurrent builds of one skill
	// wait for each other; empty means /run/fluffy/docker. A directory
	// that cannot be created means no lock.
	LockDir string
	// MaxContext bounds a build context in bytes; 0 means
	// DefaultMaxContext.
	MaxContext int64
	// Memory bounds each build step's container (RUN), swap included,
	// in bytes; 0 means the engine's default (none).
	Memory int64
	// Logger receives a record per build; nil discards them.
	Logger *slog.Logger
}

// Builder builds and collects skill images. It is safe for concurrent
// use; builds of one skill wait for each other.
type Builder struct {
	cli  *client.Client
	opts Options
	log  *slog.Logger
}

// New returns a Builder on opts.Client.
func New(opts Options) *Builder {
	if opts.Base == "" {
		opts.Base = docker.BaseImage
	}
	if opts.MaxContext <= 0 {
		opts.MaxContext = DefaultMaxContext
	}
	if opts.LockDir == "" {
		opts.LockDir = "/run/fluffy/docker"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Builder{cli: opts.Client, opts: opts, log: log}
}

// Result is what Build did.
type Result struct {
	// Ref is the image to run the skill in: its tag, or the base image
	// for a skill without a Dockerfile.
	Ref string
	// Key is the content hash (empty for the base image).
	Key string
	// Built is true when this call built the image.
	Built bool
}

// Ensure returns the image s runs in, building it first when no image
// carries the key of s's current build context. A skill without a
// Dockerfile runs in the base image: its ref, never built here.
func (b *Builder) Ensure(ctx context.Context, s skill.Skill) (ref string, built bool, err error) {
	r, err := b.Build(ctx, s, nil)
	return r.Ref, r.Built, err
}

// Build is Ensure that copies the engine's build output to progress
// (nil: discarded). A build that fails at a step of the Dockerfile is a
// *DockerfileError naming its line.
func (b *Builder) Build(ctx context.Context, s skill.Skill, progress io.Writer) (Result, error) {
	if s.Manifest.Image.Dockerfile == "" {
		return Result{Ref: b.opts.Base}, nil
	}
	p, err := b.prepare(ctx, s)
	if err != nil {
		return Result{}, err
	}
	res := Result{Ref: p.tag, Key: p.key}
	if lock := b.lock(ctx, p.tag); lock != nil {
		defer lock.Release()
	}
	if b.current(ctx, p.tag, p.key) {
		return res, nil
	}
	if err := b.build(ctx, s, p, progress); err != nil {
		// The base image may have been rebuilt (or collected) between
		// reading its ID and the build: the build then names an image
		// that is gone. Read the base anew and build once more.
		if p.base == "" || !b.gone(ctx, p.base) {
			return res, err
		}
		if p, err = b.prepare(ctx, s); err != nil {
			return res, err
		}
		res = Result{Ref: p.tag, Key: p.key}
		if b.current(ctx, p.tag, p.key) {
			return res, nil
		}
		if err := b.build(ctx, s, p, progress); err != nil {
			return res, err
		}
	}
	if !b.current(ctx, p.tag, p.key) {
		return res, fmt.Errorf("skillimage: building %s: the image is missing afterwards", p.tag)
	}
	b.log.Info("skill image built", slog.String("skill", s.Name), slog.String("image", p.tag))
	res.Built = true
	return res, nil
}

// Key returns the key s's image would carry now (without building), or
// "" for a skill without a Dockerfile.
func (b *Builder) Key(ctx context.Context, s skill.Skill) (string, error) {
	if s.Manifest.Image.Dockerfile == "" {
		return "", nil
	}
	p, err := b.prepare(ctx, s)
	if err != nil {
		return "", err
	}
	return p.key, nil
}

// prepared is a build ready to send.
type prepared struct {
	dockerfile string // relative to the skill's folder, slash-separated
	path       string // absolute, for errors
	ins        []instruction
	body       []byte // the context tar
	key, tag   string
	base       string // the base image's ID the FROM was pinned to; "" for none
}

var validName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// prepare reads s's Dockerfile and build context and computes the key.
func (b *Builder) prepare(ctx context.Context, s skill.Skill) (*prepared, error) {
	if !validName.MatchString(s.Name) || len(s.Name) > 64 {
		return nil, fmt.Errorf("%w: skill name %q (lower case letters, digits and single hyphens)", ErrInvalid, s.Name)
	}
	rel := filepath.Clean(filepath.FromSlash(s.Manifest.Image.Dockerfile))
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%w: %s: image.dockerfile %q is not inside the skill's folder", ErrInvalid, s.Name, s.Manifest.Image.Dockerfile)
	}
	abs := filepath.Join(s.Dir, rel)
	// The Dockerfile is read through no symbolic link, of its own or of
	// a folder on its way: a link could name any file of the host.
	if fi, err := os.Lstat(abs); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, s.Name, err)
	} else if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%w: %s: %s is a symbolic link", ErrInvalid, s.Name, abs)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: %s is not a regular file", ErrInvalid, s.Name, abs)
	}
	if real, err := filepath.EvalSymlinks(abs); err != nil || real != filepath.Join(mustReal(s.Dir), rel) {
		return nil, fmt.Errorf("%w: %s: %s is reached through a symbolic link", ErrInvalid, s.Name, abs)
	}
	src, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, s.Name, err)
	}
	ins := parseDockerfile(src)
	from, err := check(abs, ins)
	if err != nil {
		return nil, err
	}
	df, baseID := src, ""
	if len(from) > 0 {
		if baseID, err = b.baseID(ctx); err != nil {
			return nil, err
		}
		df = rewriteBase(src, from, baseID)
	}
	slashRel := filepath.ToSlash(rel)
	bc, err := readContext(s.Dir, slashRel, df, b.opts.MaxContext)
	if err != nil {
		return nil, err
	}
	body, ctxSum, err := bc.tar()
	if err != nil {
		return nil, fmt.Errorf("skillimage: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "fluffy skill image 1\ndockerfile %s\ncontext %s\n", slashRel, ctxSum)
	key := hex.EncodeToString(h.Sum(nil))
	return &prepared{dockerfile: slashRel, path: abs, ins: ins, body: body, key: key, base: baseID,
		tag: Repository + "/" + s.Name + ":" + key[:12]}, nil
}

// mustReal is dir with its symbolic links resolved, or dir when that
// fails (the check it serves then fails closed).
func mustReal(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return dir
}

// gone says whether the engine no longer has image id.
func (b *Builder) gone(ctx context.Context, id string) bool {
	_, err := b.cli.ImageInspect(ctx, id)
	return isNotFound(err)
}

// baseID returns the base image's ID, building it first when it is
// missing and the builder can.
func (b *Builder) baseID(ctx context.Context) (string, error) {
	img, err := b.cli.ImageInspect(ctx, b.opts.Base)
	if err != nil && isNotFound(err) && b.opts.EnsureBase != nil {
		if err := b.opts.EnsureBase(ctx); err != nil {
			return "", fmt.Errorf("skillimage: the base image %s: %w", b.opts.Base, err)
		}
		img, err = b.cli.ImageInspect(ctx, b.opts.Base)
	}
	if err != nil {
		if isNotFound(err) {
			return "", fmt.Errorf("%w: %s", ErrNoBase, b.opts.Base)
		}
		return "", fmt.Errorf("skillimage: the base image %s: %w", b.opts.Base, err)
	}
	return img.ID, nil
}

// current reports whether tag exists and carries key.
func (b *Builder) current(ctx context.Context, tag, key string) bool {
	img, err := b.cli.ImageInspect(ctx, tag)
	return err == nil && img.Config != nil && img.Config.Labels[docker.LabelContent] == key
}

// lock takes tag's build lock; nil when the lock directory is not
// available (the builds then both run, and the second finds the image).
func (b *Builder) lock(ctx context.Context, tag string) *lockfile.Lock {
	if err := os.MkdirAll(b.opts.LockDir, 0o700); err != nil {
		return nil
	}
	sum := sha256.Sum256([]byte(tag))
	l, err := lockfile.Acquire(ctx, filepath.Join(b.opts.LockDir, "build-"+hex.EncodeToString(sum[:8])+".lock"), lockfile.Options{Wait: lockfile.Forever})
	if err != nil {
		return nil
	}
	return l
}

// build sends the context to the engine's classic builder with network
// none and reads its progress.
func (b *Builder) build(ctx context.Context, s skill.Skill, p *prepared, progress io.Writer) error {
	resp, err := b.cli.ImageBuild(ctx, bytes.NewReader(p.body), client.ImageBuildOptions{
		Tags: []string{p.tag}, Dockerfile: p.dockerfile, Remove: true, ForceRemove: true,
		NetworkMode: "none", Version: build.BuilderV1, Memory: b.opts.Memory, MemorySwap: b.opts.Memory,
		Labels: map[string]string{docker.LabelContent: p.key, LabelSkill: s.Name, LabelDir: s.Dir, LabelDockerfile: p.dockerfile},
	})
	if err != nil {
		// The engine parses the Dockerfile before any step and names
		// the line of what it could not parse.
		if m := parseErrLine.FindStringSubmatch(err.Error()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return &DockerfileError{Path: p.path, Line: n, Instruction: "(parse)", Err: err}
		}
		return fmt.Errorf("skillimage: building %s: %w", p.tag, err)
	}
	defer resp.Body.Close()
	step, err := readProgress(resp.Body, progress)
	if err == nil {
		return nil
	}
	if step > 0 && step <= len(p.ins) {
		in := p.ins[step-1]
		return &DockerfileError{Path: p.path, Line: in.line, Instruction: in.String(), Err: err}
	}
	return fmt.Errorf("skillimage: building %s: %w", p.tag, err)
}

var parseErrLine = regexp.MustCompile(`(?i)dockerfile parse error (?:on )?line (\d+)`)

// BuildError is the engine's report of a failed build.
type BuildError struct{ Msg string }

func (e *BuildError) Error() string { return e.Msg }

// readProgress copies the engine's JSON progress to w and returns the
// last step it started and the error it reported, if any.
func readProgress(r io.Reader, w io.Writer) (int, error) {
	dec := json.NewDecoder(r)
	step := 0
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return step, nil
			}
			return step, fmt.Errorf("reading the build's progress: %w", err)
		}
		if m.Stream != "" {
			for _, l := range lines(m.Stream) {
				if n := stepOf(l); n > 0 {
					step = n
				}
			}
			if w != nil {
				io.WriteString(w, m.Stream)
			}
		}
		if msg := strings.TrimSpace(m.ErrorDetail.Message); msg != "" || m.Error != "" {
			if msg == "" {
				msg = strings.TrimSpace(m.Error)
			}
			return step, &BuildError{Msg: msg}
		}
	}
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
