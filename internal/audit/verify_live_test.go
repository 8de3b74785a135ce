package audit

import (
	"context"
	"sync"
	"testing"
)

// A log being written is not damaged: verifying it from another reader
// while a writer commits entries and their signed head never reports
// entries "added outside fluffy". Read in several snapshots, the
// checkpoints could predate a commit the entries were read after.
func TestVerifyWhileWriting(t *testing.T) {
	l, opts := testLog(t, Options{})
	appendN(t, l, 5, "test.event")
	if err := l.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			if _, err := l.Append(ctx, Entry{Session: "s1", Kind: "test.event", Actor: "agent", Payload: map[string]any{"i": i}}); err != nil {
				return
			}
			if err := l.Flush(ctx); err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	for i := 0; i < 40; i++ {
		if _, err := verifyDB(t, opts, false); err != nil {
			t.Fatalf("verify %d of a log being written: %v", i, err)
		}
	}
}
