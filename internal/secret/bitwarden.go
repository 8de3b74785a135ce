package secret

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Bitwarden resolves secret://bitwarden/ITEM/FIELD through the official
// bw CLI (Bitwarden or Vaultwarden), one bw process per call. ITEM is an
// item's id or name (everything before the last '/'); FIELD is password,
// username, notes, or the name of one of the item's custom fields.
//
// The person logs in once (bw login, with BITWARDENCLI_APPDATA_DIR set to
// AppData). The backend unlocks the vault when it first needs a value,
// giving bw the master password through a pipe (--passwordfile
// /dev/fd/3, never an environment variable or an argument), and keeps
// the session key bw returns in locked memory; each bw call gets it in
// its own environment (BW_SESSION) only. Lock runs bw lock and forgets
// the key.
type Bitwarden struct {
	// BW is the bw executable; "" finds bw in PATH.
	BW string
	// AppData is bw's data directory (BITWARDENCLI_APPDATA_DIR): its
	// login and its encrypted copy of the vault; must be set.
	AppData string
	// Password returns the master password (a terminal prompt, a file
	// descriptor, a systemd credential); nil leaves a locked vault
	// locked. The backend zeroes what it returns.
	Password func(ctx context.Context) ([]byte, error)
	// Env is the rest of bw's environment (PATH, HOME); nil is none.
	Env []string

	// mu guards key.
	mu  sync.Mutex
	key *locked
}

var (
	_ Backend = (*Bitwarden)(nil)
	_ Stater  = (*Bitwarden)(nil)
	_ Locker  = (*Bitwarden)(nil)
)

// BWError is a bw call that failed: the command (never a value) and what
// bw said, cut to one line.
type BWError struct {
	Op     string
	Msg    string
	Reason error // ErrNotFound, ErrLocked or ErrUnreachable
}

func (e *BWError) Error() string { return fmt.Sprintf("bw %s: %s", e.Op, e.Msg) }
func (e *BWError) Unwrap() error { return e.Reason }

// classify maps bw's messages to the backend errors.
func classify(msg string) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "not found"):
		return ErrNotFound
	case strings.Contains(m, "more than one result"):
		return ErrNotFound
	case strings.Contains(m, "not logged in"), strings.Contains(m, "locked"), strings.Contains(m, "invalid master password"), strings.Contains(m, "session key"),
		strings.Contains(m, "decryption operation failed"): // a wrong master password, as bw 2026 says it
		return ErrLocked
	}
	return ErrUnreachable
}

// bwMessage picks bw's message from its output: the first line that is
// not a log line ("ERROR ...", "WARN ..." of its crypto library), or the
// first line, cut to 200 bytes.
func bwMessage(outs ...[]byte) string {
	var first string
	for _, b := range outs {
		for line := range strings.SplitSeq(string(b), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case line == "":
				continue
			case !strings.HasPrefix(line, "ERROR ") && !strings.HasPrefix(line, "WARN ") && !strings.HasPrefix(line, "INFO "):
				return cut(line)
			case first == "":
				first = line
			}
		}
	}
	return cut(first)
}

func cut(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// run runs bw with args; stdin3, when set, is given as file descriptor 3.
// The output is returned in a buffer the caller zeroes.
func (b *Bitwarden) run(ctx context.Context, session []byte, stdin3 []byte, args ...string) ([]byte, error) {
	bin := b.BW
	if bin == "" {
		bin = "bw"
	}
	if b.AppData == "" {
		return nil, &BWError{Op: args[0], Msg: "no data directory configured", Reason: ErrUnreachable}
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	env := append(append([]string(nil), b.Env...), "BITWARDENCLI_APPDATA_DIR="+b.AppData, "BW_NOINTERACTION=true", "BW_NOCOLOR=true")
	if session != nil {
		env = append(env, "BW_SESSION="+string(session))
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	stdout.Grow(4096)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin3 != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("secret: %w", err)
		}
		cmd.ExtraFiles = []*os.File{r}
		go func() {
			_, _ = w.Write(stdin3)
			w.Close()
		}()
		defer r.Close()
	}
	err := cmd.Run()
	if err != nil {
		defer wipe(stdout.Bytes())
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, &BWError{Op: args[0], Msg: err.Error(), Reason: ErrUnreachable}
		}
		// bw says what failed (a failed call prints no value), after
		// the log lines of its crypto library, if any.
		msg := bwMessage(stderr.Bytes(), stdout.Bytes())
		return nil, &BWError{Op: args[0], Msg: msg, Reason: classify(msg)}
	}
	return stdout.Bytes(), nil
}

// unlock returns the held session key, unlocking the vault first when
// none is held. The caller holds b.mu.
func (b *Bitwarden) unlockLocked(ctx context.Context) (*locked, error) {
	if b.key != nil {
		return b.key, nil
	}
	if b.Password == nil {
		return nil, &BWError{Op: "unlock", Msg: "the vault is locked and no master password source is configured", Reason: ErrLocked}
	}
	pw, err := b.Password(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: master password: %w", ErrLocked, err)
	}
	out, err := b.run(ctx, nil, pw, "unlock", "--raw", "--passwordfile", "/dev/fd/3")
	wipe(pw)
	if err != nil {
		return nil, err
	}
	key := bytes.TrimSpace(out)
	if len(key) == 0 {
		wipe(out)
		return nil, &BWError{Op: "unlock", Msg: "no session key in bw's output", Reason: ErrLocked}
	}
	l, err := newLocked(key)
	wipe(out)
	if err != nil {
		return nil, err
	}
	b.key = l
	return l, nil
}

// Lookup returns the field of the item.
func (b *Bitwarden) Lookup(ctx context.Context, p string) ([]byte, error) {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 || i == len(p)-1 {
		return nil, fmt.Errorf("%w: a bitwarden path is ITEM/FIELD, got %q", ErrRef, p)
	}
	item, field := p[:i], p[i+1:]
	b.mu.Lock()
	defer b.mu.Unlock()
	key, err := b.unlockLocked(ctx)
	if err != nil {
		return nil, err
	}
	switch field {
	case "password", "username", "notes":
		out, err := b.run(ctx, key.b, nil, "get", field, item)
		if err != nil {
			b.forgetIfLocked(err)
			return nil, err
		}
		v := bytes.TrimSuffix(out, []byte("\n"))
		if len(v) == 0 {
			wipe(out)
			return nil, fmt.Errorf("%w: %s of %q is empty", ErrNotFound, field, item)
		}
		res := bytes.Clone(v)
		wipe(out)
		return res, nil
	}
	out, err := b.run(ctx, key.b, nil, "get", "item", item)
	if err != nil {
		b.forgetIfLocked(err)
		return nil, err
	}
	defer wipe(out)
	return customField(out, item, field)
}

// customField finds a custom field's value in bw's item JSON. encoding/json
// makes Go strings of the item's fields, which cannot be zeroed.
func customField(item []byte, name, field string) ([]byte, error) {
	var it struct {
		Fields []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"fields"`
	}
	if err := json.Unmarshal(item, &it); err != nil {
		return nil, &BWError{Op: "get", Msg: "bw printed no item JSON", Reason: ErrUnreachable}
	}
	for _, f := range it.Fields {
		if f.Name == field && f.Value != "" {
			return []byte(f.Value), nil
		}
	}
	return nil, fmt.Errorf("%w: item %q has no field %q", ErrNotFound, name, field)
}

// forgetIfLocked drops a session key bw no longer accepts (bw locked it,
// or its vault was logged out), so the next call unlocks again.
func (b *Bitwarden) forgetIfLocked(err error) {
	if errors.Is(err, ErrLocked) && b.key != nil {
		_ = b.key.free()
		b.key = nil
	}
}

// State asks bw status: unlocked, locked (or not logged in) or
// unreachable (no bw, or it fails).
func (b *Bitwarden) State(ctx context.Context) (State, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var key []byte
	if b.key != nil {
		key = b.key.b
	}
	out, err := b.run(ctx, key, nil, "status")
	if err != nil {
		return Unreachable, err.Error()
	}
	var st struct {
		ServerURL string `json:"serverUrl"`
		Status    string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return Unreachable, "bw status printed no JSON"
	}
	server := st.ServerURL
	if server == "" {
		server = "the default server"
	}
	switch st.Status {
	case "unlocked":
		return Unlocked, "logged in to " + server
	case "locked":
		return Locked, "logged in to " + server + ", vault locked"
	case "unauthenticated":
		return Locked, "not logged in (BITWARDENCLI_APPDATA_DIR=" + b.AppData + " bw login)"
	}
	return Unreachable, "bw status: " + st.Status
}

// Lock locks the vault (bw lock) and forgets the session key.
func (b *Bitwarden) Lock(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.key == nil {
		return nil
	}
	_, err := b.run(ctx, b.key.b, nil, "lock")
	ferr := b.key.free()
	b.key = nil
	return errors.Join(err, ferr)
}
