package kernel_test

import (
	"context"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// echoModel answers every request with "echo: " and the last user text.
type echoModel struct{}

func (echoModel) Stream(_ context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		last := ""
		if n := len(req.Messages); n > 0 {
			last = req.Messages[n-1].Text()
		}
		u := llm.Usage{InputTokens: 10, OutputTokens: 3}
		for _, ev := range []llm.Event{{Type: llm.EventText, Text: "echo: " + last}, {Type: llm.EventUsage, Usage: &u}, {Type: llm.EventStop, Stop: llm.StopEnd}} {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

func echoModels(context.Context, string) (llm.Provider, string, error) {
	return echoModel{}, "echo", nil
}

// TestRunMessageTurns: each message is a new turn of the same session;
// stats events carry the running totals.
func TestRunMessageTurns(t *testing.T) {
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, echoModels, nil)
	ctx := context.Background()
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "first", Model: "echo/x"})
	if err != nil {
		t.Fatal(err)
	}
	for i, msg := range []string{"", "second", "third"} {
		var (
			mu    sync.Mutex
			text  string
			stats []kernel.Stats
		)
		res, err := k.RunMessage(ctx, info.ID, msg, func(ev kernel.Event) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Type == kernel.Type(agent.EventText) {
				text += ev.Agent.Text
			}
			if ev.Type == kernel.TypeStats {
				stats = append(stats, *ev.Stats)
			}
		})
		if err != nil || res.Reason != "done" {
			t.Fatalf("run %d: %+v, %v", i, res, err)
		}
		want := map[int]string{0: "echo: first", 1: "echo: second", 2: "echo: third"}[i]
		if text != want {
			t.Errorf("run %d: text %q, want %q", i, text, want)
		}
		if len(stats) < 2 {
			t.Fatalf("run %d: stats events %+v", i, stats)
		}
		last := stats[len(stats)-1]
		if last.Model != "echo/x" || last.Turns != i+1 || last.Usage.InputTokens != 10*(i+1) {
			t.Errorf("run %d: last stats %+v", i, last)
		}
	}
	// A finished conversation without a new message has nothing to do.
	res, err := k.Run(ctx, info.ID, nil)
	if err != nil || res.Reason != "done" || res.Text != "echo: third" {
		t.Fatalf("resume without a message: %+v, %v", res, err)
	}
	if i, _ := k.Get(ctx, info.ID); i.Turns != 3 {
		t.Errorf("turns = %d, want 3", i.Turns)
	}
}

// TestApplyDiscardKeepOpen: partial apply writes only the chosen paths and
// keeps the session open with the rest pending; discard drops them.
func TestApplyDiscardKeepOpen(t *testing.T) {
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, echoModels, nil)
	ctx := context.Background()
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "t", Model: "echo/x"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := changeset.Open(info.ChangeSet, info.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		if err := cs.WriteFile(f, []byte(f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := k.Apply(ctx, info.ID, "a.txt")
	if err != nil || len(applied) != 1 || applied[0].Path != "a.txt" {
		t.Fatalf("apply a.txt: %+v, %v", applied, err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "a.txt")); err != nil {
		t.Errorf("a.txt not applied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b.txt reached the workspace: %v", err)
	}
	_, ch, err := k.Diff(ctx, info.ID)
	if err != nil || len(ch) != 2 {
		t.Fatalf("pending after partial apply: %+v, %v", ch, err)
	}
	d, ch, err := k.Diff(ctx, info.ID, "c.txt")
	if err != nil || len(ch) != 1 || ch[0].Path != "c.txt" || d == "" {
		t.Fatalf("diff of c.txt: %q %+v, %v", d, ch, err)
	}
	if n, err := k.Discard(ctx, info.ID, "b.txt"); err != nil || n != 1 {
		t.Fatalf("discard b.txt: %d, %v", n, err)
	}
	if _, ch, _ := k.Diff(ctx, info.ID); len(ch) != 1 || ch[0].Path != "c.txt" {
		t.Fatalf("pending after discard: %+v", ch)
	}
	// The session is still open and runs.
	if res, err := k.RunMessage(ctx, info.ID, "more", nil); err != nil || res.Reason != "done" {
		t.Fatalf("run after apply: %+v, %v", res, err)
	}
	if n, err := k.Discard(ctx, info.ID); err != nil || n != 1 {
		t.Fatalf("discard all: %d, %v", n, err)
	}
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Apply(ctx, info.ID); !errors.Is(err, kernel.ErrClosed) {
		t.Errorf("apply on a closed session: %v", err)
	}
	kinds := strings.Fields(auditKinds(t, e))
	for _, want := range []string{"changeset.apply", "changeset.discard"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("audit kinds %v lack %s", kinds, want)
		}
	}
}

// TestSwitchMode: the user's mode switch over the kernel is stored in the
// TDD journal and shows in the next run's stats.
func TestSwitchMode(t *testing.T) {
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	m, err := tdd.New(tdd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := tdd.NewJournal(tdd.JournalOptions{DB: e.db})
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.Start(context.Background(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: echoModels,
		TDD:   &kernel.TDDOptions{Machine: m, Journal: j, Mode: tdd.Strict},
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) { return &writeTools{env: env}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "t", Model: "echo/x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.SwitchMode(ctx, kernel.ModeParams{ID: info.ID, Mode: "sloppy"}); err == nil {
		t.Fatal("unknown mode accepted")
	}
	res, err := k.SwitchMode(ctx, kernel.ModeParams{ID: info.ID, Mode: "explore", Name: "me"})
	if err != nil || res.From != tdd.Strict || res.To != tdd.Explore {
		t.Fatalf("switch: %+v, %v", res, err)
	}
	var mode string
	if _, err := k.Run(ctx, info.ID, func(ev kernel.Event) {
		if ev.Type == kernel.TypeStats {
			mode = ev.Stats.Mode
		}
	}); err != nil {
		t.Fatal(err)
	}
	if mode != "explore" {
		t.Errorf("stats mode = %q, want explore", mode)
	}
	if kinds := strings.Fields(auditKinds(t, e)); !slices.Contains(kinds, "tdd.mode") {
		t.Errorf("audit kinds %v lack tdd.mode", kinds)
	}
}

// burstModel streams its answer as n one-byte deltas at once.
type burstModel struct{ n int }

func (b burstModel) Stream(context.Context, llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		for range b.n {
			if !yield(llm.Event{Type: llm.EventText, Text: "x"}, nil) {
				return
			}
		}
		u := llm.Usage{InputTokens: 1, OutputTokens: 1}
		for _, ev := range []llm.Event{{Type: llm.EventUsage, Usage: &u}, {Type: llm.EventStop, Stop: llm.StopEnd}} {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// TestTextDeltasJoined: a burst of thousands of text deltas reaches
// clients as a few events (each is a frame in a bounded client queue),
// the whole text, in order before the turn's usage.
func TestTextDeltasJoined(t *testing.T) {
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	const n = 5000
	k := start(t, e, func(context.Context, string) (llm.Provider, string, error) { return burstModel{n}, "burst", nil }, nil)
	ctx := context.Background()
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "t", Model: "burst/x"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		texts     int
		text      string
		usageSeen bool
		lastSeq   uint64
	)
	if _, err := k.Run(ctx, info.ID, func(ev kernel.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Seq != lastSeq+1 {
			t.Errorf("seq %d after %d", ev.Seq, lastSeq)
		}
		lastSeq = ev.Seq
		switch ev.Type {
		case kernel.Type(agent.EventText):
			if usageSeen {
				t.Error("text after the turn's usage")
			}
			texts++
			text += ev.Agent.Text
		case kernel.Type(agent.EventUsage):
			usageSeen = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	if text != strings.Repeat("x", n) {
		t.Fatalf("text of %d bytes, want %d", len(text), n)
	}
	if texts > 20 {
		t.Errorf("%d text events for one burst", texts)
	}
}
