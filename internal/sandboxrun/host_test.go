package sandboxrun

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// ReleaseAudits (SIGUSR1 from a process waiting for the writer lock)
// closes a shared log no command holds, and never one a command is
// writing: its exec.end must not wait for the lock it just gave away.
func TestReleaseAudits(t *testing.T) {
	dir := t.TempDir()
	host := NewHost(HostOptions{AuditIdle: time.Hour})
	defer host.Close()
	s := audit.NewShared(func(ctx context.Context) (*audit.Log, error) {
		return audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	}, time.Hour, nil)
	host.audits["x"] = s
	ctx := context.Background()
	cmd := &hostAudit{Shared: s}
	s.Hold()
	if _, err := cmd.Append(ctx, audit.Entry{Kind: audit.KindExecStart, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	host.ReleaseAudits()
	if !s.IsOpen() {
		t.Fatal("the log was closed while a command held it")
	}
	if _, err := cmd.Append(ctx, audit.Entry{Kind: audit.KindExecEnd, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Close(); err != nil { // a second Close counts once
		t.Fatal(err)
	}
	if s.Held() {
		t.Fatal("held after the command's close")
	}
	host.ReleaseAudits()
	if s.IsOpen() {
		t.Fatal("the log stayed open with no command holding it")
	}
	// The writer lock is free: another writer gets it at once.
	l, err := audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	l.Close()
}
