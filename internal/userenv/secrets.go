package userenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

// SecretKeyFile is the key of the secrets' audit fingerprints under keys/.
const SecretKeyFile = "secret-fingerprint.key"

// Prompt asks a person for a passphrase or master password on a terminal,
// without echo; what describes what is asked for. The caller zeroes the
// result.
type Prompt func(ctx context.Context, what string) ([]byte, error)

// ErrNoPassword: a store or vault needs a password and neither a
// configured source nor a terminal gives one.
var ErrNoPassword = errors.New("no password source: set the configuration's password file, or run on a terminal")

// SecretBackends builds the configured backends: env and file always,
// age, and bitwarden when enabled. prompt (nil in the daemon) asks when
// no password file is configured.
func (e *Env) SecretBackends(prompt Prompt) (map[string]secret.Backend, error) {
	l, err := e.Config()
	if err != nil {
		return nil, err
	}
	d, err := e.DataDir()
	if err != nil {
		return nil, err
	}
	c := l.Config.Secrets
	home, _ := e.Getenv("HOME")
	bs := map[string]secret.Backend{
		"env":  secret.Env{LookupEnv: e.Getenv},
		"file": secret.File{Home: home},
	}
	store := c.Age.Store
	if store == "" {
		store = d.Path("secrets", "store.age")
	}
	bs["age"] = &secret.Age{Store: e.Abs(store), Identity: absOr(e, c.Age.Identity),
		Passphrase: e.passwordSource(c.Age.PassphraseFile, "the age store's passphrase", prompt)}
	if c.Bitwarden.Enabled {
		app := c.Bitwarden.AppData
		if app == "" {
			app = d.Path("secrets", "bitwarden")
		}
		if err := os.MkdirAll(app, 0o700); err != nil {
			return nil, fmt.Errorf("secrets.bitwarden.appdata: %w", err)
		}
		var env []string
		for _, k := range []string{"PATH", "HOME"} {
			if v, ok := e.Getenv(k); ok {
				env = append(env, k+"="+v)
			}
		}
		bs["bitwarden"] = &secret.Bitwarden{BW: c.Bitwarden.BW, AppData: e.Abs(app), Env: env,
			Password: e.passwordSource(c.Bitwarden.PasswordFile, "the Bitwarden master password", prompt)}
	}
	return bs, nil
}

func absOr(e *Env, p string) string {
	if p == "" {
		return ""
	}
	return e.Abs(p)
}

// SecretBroker builds the broker on the configured backends, its
// fingerprints keyed by keys/secret-fingerprint.key (created on first
// use).
func (e *Env) SecretBroker(prompt Prompt) (*secret.Broker, error) {
	bs, err := e.SecretBackends(prompt)
	if err != nil {
		return nil, err
	}
	l, err := e.Config()
	if err != nil {
		return nil, err
	}
	d, err := e.DataDir()
	if err != nil {
		return nil, err
	}
	key, err := loadOrCreateKey(d.Path(datadir.Keys, SecretKeyFile))
	if err != nil {
		return nil, err
	}
	return secret.New(secret.Options{Backends: bs, Key: key, TTL: l.Config.Secrets.TTL.Std(), Logger: e.Logger()})
}

// SecretUses are the configured declarations, checked.
func (e *Env) SecretUses() ([]secret.Use, error) {
	l, err := e.Config()
	if err != nil {
		return nil, err
	}
	var uses []secret.Use
	var errs []error
	for i, c := range l.Config.Secrets.Uses {
		u, err := secret.NewUse(c.Ref, c.As, c.Name, c.Bind, c.Commands, c.Templates)
		if err == nil && c.TLS && u.As != secret.AsProxy {
			err = fmt.Errorf("%w: %s: tls is for a proxy use", secret.ErrUse, u.Ref)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("secrets.uses[%d]: %w", i, err))
			continue
		}
		u.TLS = c.TLS
		uses = append(uses, u)
	}
	return uses, errors.Join(errs...)
}

// passwordSource returns what reads a password: the configured source
// (a 0600 file, /dev/fd/N, credential:NAME), else the prompt, else
// nothing (the backend stays locked).
func (e *Env) passwordSource(src, what string, prompt Prompt) func(context.Context) ([]byte, error) {
	if src == "" {
		if prompt == nil {
			return nil
		}
		return func(ctx context.Context) ([]byte, error) { return prompt(ctx, what) }
	}
	return func(context.Context) ([]byte, error) { return e.readPassword(src) }
}

func (e *Env) readPassword(src string) ([]byte, error) {
	if name, ok := strings.CutPrefix(src, "credential:"); ok {
		dir, ok := e.Getenv("CREDENTIALS_DIRECTORY")
		if !ok || dir == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("%s: no systemd credential %q here (CREDENTIALS_DIRECTORY is not set)", src, name)
		}
		return secret.ReadFile(filepath.Join(dir, name))
	}
	if n, ok := strings.CutPrefix(src, "/dev/fd/"); ok {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 {
			return nil, fmt.Errorf("%s: want /dev/fd/N with N of 3 or more", src)
		}
		// A pipe the service manager or a script opened: read once, up
		// to the bound, without a trailing newline.
		f := os.NewFile(uintptr(fd), src)
		defer f.Close()
		buf := make([]byte, secret.MaxFileSecret+1)
		m, err := io.ReadFull(f, buf)
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			clear(buf)
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		v := bytes.Clone(bytes.TrimRight(buf[:m], "\r\n"))
		clear(buf)
		if len(v) == 0 {
			return nil, fmt.Errorf("%s: %w", src, ErrNoPassword)
		}
		return v, nil
	}
	return secret.ReadFile(e.Abs(src))
}
