//go:build goolm

// Package matrixtest runs what the Matrix channel's tests need: a real
// homeserver (Dendrite v0.13.8 from github.com/matrix-org/dendrite, built
// once by scripts/dendrite.sh and cached) on loopback in a temporary
// directory, with registration disabled and accounts made by its
// create-account tool, and Person, a second mautrix client with its own
// end-to-end encrypted device that plays the person. It is test support:
// Dendrite runs as a separate process and is never linked into fluffy.
package matrixtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ServerName is the homeserver's name: user ids are @name:localhost.
const ServerName = "localhost"

// sharedSecret lets create-account make accounts while registration is
// disabled.
const sharedSecret = "fluffy-test-registration-secret"

// Dendrite is a running homeserver.
type Dendrite struct {
	// URL is the client-server API's base URL (http://127.0.0.1:PORT).
	URL string
	// Dir holds its configuration, keys, logs and SQLite databases.
	Dir  string
	bin  string
	addr string
	cmd  *exec.Cmd
	done chan error
}

// Binaries returns the directory holding the cached Dendrite binaries,
// building them with scripts/dendrite.sh when they are missing (the first
// run on a machine takes a minute or two; make deps does it ahead).
func Binaries() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "dendrite.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("scripts/dendrite.sh: %w\n%s", err, ee.Stderr)
		}
		return "", fmt.Errorf("scripts/dendrite.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Start configures and starts Dendrite in dir on a free loopback port and
// waits until it answers.
func Start(ctx context.Context, dir string) (*Dendrite, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	gen, err := exec.CommandContext(ctx, filepath.Join(bin, "generate-config"), "-dir", dir, "-server", ServerName).Output()
	if err != nil {
		return nil, fmt.Errorf("generate-config: %w", err)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "generate-keys"), "--private-key", filepath.Join(dir, "matrix_key.pem")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("generate-keys: %w: %s", err, out)
	}
	cfg, err := configure(gen, dir)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "dendrite.yaml"), cfg, 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	d := &Dendrite{URL: "http://" + addr, Dir: dir, bin: bin, addr: addr}
	if err := d.start(); err != nil {
		return nil, err
	}
	return d, nil
}

// start runs the homeserver on d.addr and waits until it answers.
func (d *Dendrite) start() error {
	log, err := os.OpenFile(filepath.Join(d.Dir, "dendrite.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(d.bin, "dendrite"), "--config", filepath.Join(d.Dir, "dendrite.yaml"),
		"--http-bind-address", d.addr, "--https-bind-address", "127.0.0.1:0")
	cmd.Dir = d.Dir
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dendrite: %w", err)
	}
	d.cmd, d.done = cmd, make(chan error, 1)
	go func() { d.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(d.URL + "/_matrix/client/versions")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-d.done:
			out, _ := os.ReadFile(filepath.Join(d.Dir, "dendrite.out"))
			return fmt.Errorf("dendrite exited: %v\n%s", err, tail(out))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.Stop()
			return errors.New("dendrite did not answer within 60s")
		}
	}
}

// Restart stops the homeserver (SIGKILL) and starts it again on the same
// address with the same databases, as a homeserver that went away.
func (d *Dendrite) Restart() error {
	d.Stop()
	return d.start()
}

// moduleRoot is the directory of fluffy's go.mod above the working
// directory (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/fluffy-agent/fluffy\n")) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("matrixtest: no fluffy go.mod above the working directory")
		}
		dir = up
	}
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// configure edits generate-config's output: the key file, no federation,
// no registration except by the shared secret, no rate limits, cheap
// password hashes, JetStream in memory.
func configure(gen []byte, dir string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(gen, &cfg); err != nil {
		return nil, fmt.Errorf("generate-config's output: %w", err)
	}
	section := func(name string) map[string]any {
		m, _ := cfg[name].(map[string]any)
		if m == nil {
			m = map[string]any{}
			cfg[name] = m
		}
		return m
	}
	global := section("global")
	global["private_key"] = filepath.Join(dir, "matrix_key.pem")
	global["disable_federation"] = true
	if js, ok := global["jetstream"].(map[string]any); ok {
		js["in_memory"] = true
	}
	client := section("client_api")
	client["registration_disabled"] = true
	client["registration_shared_secret"] = sharedSecret
	client["rate_limiting"] = map[string]any{"enabled": false}
	section("federation_api")["key_perspectives"] = []any{}
	section("user_api")["bcrypt_cost"] = 4
	cfg["logging"] = []any{map[string]any{"type": "file", "level": "warn", "params": map[string]any{"path": filepath.Join(dir, "logs")}}}
	return yaml.Marshal(cfg)
}

// CreateAccount makes an account with its create-account tool (the only
// way in: registration is disabled) and returns its user id.
func (d *Dendrite) CreateAccount(ctx context.Context, name, password string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "create-account"), "-config", filepath.Join(d.Dir, "dendrite.yaml"),
		"-url", d.URL, "-username", name, "-passwordstdin")
	cmd.Stdin = strings.NewReader(password)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("create-account %s: %w: %s", name, err, out)
	}
	return "@" + name + ":" + ServerName, nil
}

// Contains reports the files the homeserver stores (its SQLite
// databases with their WAL, its media store) that hold text, for the
// check that messages are encrypted at rest. Its own log is not stored
// data and is not searched.
func (d *Dendrite) Contains(text string) ([]string, error) {
	var hits []string
	err := filepath.WalkDir(d.Dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if e.Name() == "logs" {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Name() == "dendrite.out" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(text)) {
			hits = append(hits, p)
		}
		return nil
	})
	return hits, err
}

// Stop kills the homeserver and waits for it.
func (d *Dendrite) Stop() {
	if d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
	}
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
	}
}
