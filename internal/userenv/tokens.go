package userenv

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// TokenKeyFile is the kernel's capability-token key under keys/.
const TokenKeyFile = "policy-tokens.key"

// ApprovalTokens returns the token store (for the policy engine) and the
// grants (for the router) signed with the key in keys/, creating the key
// on first use.
func (e *Env) ApprovalTokens() (*policy.Tokens, *approval.Grants, error) {
	l, err := e.Config()
	if err != nil {
		return nil, nil, err
	}
	d, err := e.DataDir()
	if err != nil {
		return nil, nil, err
	}
	key, err := loadOrCreateKey(d.Path(datadir.Keys, TokenKeyFile))
	if err != nil {
		return nil, nil, err
	}
	toks, err := policy.NewTokens(key, nil)
	if err != nil {
		return nil, nil, err
	}
	grants, err := approval.NewGrants(approval.GrantOptions{Issuer: toks, TTL: l.Config.Approval.TokenTTL.Std(), Uses: l.Config.Approval.TokenUses})
	if err != nil {
		return nil, nil, err
	}
	return toks, grants, nil
}

// loadOrCreateKey reads a 32-byte secret key kept with mode 0600, or
// creates one. A key readable by others is refused, not used.
func loadOrCreateKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			f.Close()
			os.Remove(path)
			return nil, fmt.Errorf("token key: %w", err)
		}
		_, werr := f.Write(key)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = syncDir(path)
		}
		if werr != nil {
			os.Remove(path)
			return nil, fmt.Errorf("token key %s: %w", path, werr)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("token key %s: must be a regular file with mode 0600 (it is %v); fix it or remove it to make a new one", path, fi.Mode())
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("token key %s: %d bytes, want 32; remove it to make a new one", path, len(key))
	}
	return key, nil
}

// syncDir makes a new file's directory entry durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
