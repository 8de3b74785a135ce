package wiring

import (
	"errors"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/web"
)

func TestWebPasskeysStore(t *testing.T) {
	ctx := t.Context()
	db, err := store.OpenMain(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	p := webPasskeys{db: db.DB}
	at := time.UnixMilli(1_700_000_000_000)
	k := web.Passkey{ID: []byte{1, 2}, Principal: "user:alice", UserHandle: []byte("h"), PublicKey: []byte("pk"), Flags: 0x1d, SignCount: 0, Created: at}
	if err := p.Add(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(ctx, k); err == nil {
		t.Fatal("the same credential id added twice")
	}
	if err := p.Used(ctx, k.ID, 0, k.Flags, at); err != nil {
		t.Fatalf("a counter at zero throughout: %v", err)
	}
	if err := p.Used(ctx, k.ID, 5, k.Flags, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint32{5, 4, 0} {
		if err := p.Used(ctx, k.ID, n, k.Flags, at); !errors.Is(err, web.ErrSignCount) {
			t.Errorf("counter %d after 5: %v, want ErrSignCount", n, err)
		}
	}
	got, err := p.ByID(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SignCount != 5 || got.Flags != 0x1d || !got.LastUsed.Equal(at.Add(time.Second)) || got.Principal != "user:alice" {
		t.Errorf("stored %+v", got)
	}
	if err := p.Remove(ctx, "user:bob", k.ID); !errors.Is(err, web.ErrNotFound) {
		t.Errorf("another principal removed it: %v", err)
	}
	if err := p.Remove(ctx, "user:alice", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ByID(ctx, k.ID); !errors.Is(err, web.ErrNotFound) {
		t.Errorf("after removal: %v", err)
	}
	if l, err := p.List(ctx, "user:alice"); err != nil || len(l) != 0 {
		t.Errorf("list after removal: %v %v", l, err)
	}
}
