package changeset

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRandomized runs random sequences of kernel-side writes against a
// random workspace, mirrors each successful one on a plain directory (the
// model), and checks that every view agrees with the model: the change
// set's merged reads, overlayfs mounting the upper, git applying the diff,
// and Apply.
func TestRandomized(t *testing.T) {
	requireRoot(t)
	iterations := 25
	if testing.Short() {
		iterations = 5
	}
	for seed := range uint64(iterations) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed) })
	}
}

func randomPath(r *rand.Rand) string {
	names := []string{"a", "b", "c"}
	n := 1 + r.IntN(3)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = names[r.IntN(len(names))]
	}
	return strings.Join(parts, "/")
}

func randomRun(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	ctx := t.Context()
	ws := filepath.Join(t.TempDir(), "ws")
	must(t, os.Mkdir(ws, 0o755))
	for range 8 {
		p := filepath.Join(ws, randomPath(r))
		if os.MkdirAll(filepath.Dir(p), 0o755) != nil {
			continue
		}
		if r.IntN(4) == 0 {
			_ = os.MkdirAll(p, 0o755)
		} else {
			_ = os.WriteFile(p, fmt.Appendf(nil, "base %d\n", r.IntN(3)), 0o644)
		}
	}
	model := filepath.Join(t.TempDir(), "model")
	sh(t, "/", "cp -a "+ws+" "+model)
	cs, err := Begin(ctx, ws, filepath.Join(t.TempDir(), "cs"))
	must(t, err)
	must(t, os.Chmod(cs.UpperDir(), 0o755))
	var log []string
	kernelOps(t, r, cs, model, &log, 6)
	// Then ordinary programs write through a real overlay mount (what a
	// sandbox does), then the kernel again.
	merged0, umount0 := mountOverlay(t, cs)
	for range 6 {
		p := randomPath(r)
		a, b := filepath.Join(merged0, p), filepath.Join(model, p)
		var ea, eb error
		switch r.IntN(3) {
		case 0:
			data := fmt.Appendf(nil, "mounted %d\n", r.IntN(3))
			ea = osWrite(a, data)
			eb = osWrite(b, data)
			log = append(log, fmt.Sprintf("mount: write %s: %v", p, ea))
		case 1:
			ea, eb = osRemove(a), osRemove(b)
			log = append(log, fmt.Sprintf("mount: rm -r %s: %v", p, ea))
		case 2:
			ea, eb = os.MkdirAll(a, 0o755), os.MkdirAll(b, 0o755)
			log = append(log, fmt.Sprintf("mount: mkdir -p %s: %v", p, ea))
		}
		if (ea == nil) != (eb == nil) {
			t.Fatalf("%s: mount %v, model %v\n%s", log[len(log)-1], ea, eb, strings.Join(log, "\n"))
		}
	}
	umount0()
	kernelOps(t, r, cs, model, &log, 6)
	checkAgainstModel(t, cs, ws, model, log)
}

func osWrite(p string, data []byte) error {
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return errors.New("is a directory")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

func osRemove(p string) error {
	if _, err := os.Lstat(p); err != nil {
		return err
	}
	return os.RemoveAll(p)
}

func kernelOps(t *testing.T, r *rand.Rand, cs *ChangeSet, model string, logp *[]string, n int) {
	t.Helper()
	log := *logp
	defer func() { *logp = log }()
	for range n {
		p := randomPath(r)
		mp := filepath.Join(model, p)
		switch r.IntN(3) {
		case 0:
			data := fmt.Appendf(nil, "new %d\n", r.IntN(3))
			err := cs.WriteFile(p, data, 0)
			log = append(log, fmt.Sprintf("write %s: %v", p, err))
			merr := osWrite(mp, data)
			if (err == nil) != (merr == nil) {
				t.Fatalf("write %s: changeset %v, model %v\n%s", p, err, merr, strings.Join(log, "\n"))
			}
		case 1:
			err := cs.Remove(p, true)
			log = append(log, fmt.Sprintf("remove %s: %v", p, err))
			merr := osRemove(mp)
			if (err == nil) != (merr == nil) {
				t.Fatalf("remove %s: changeset %v, model %v\n%s", p, err, merr, strings.Join(log, "\n"))
			}
		case 2:
			err := cs.MkdirAll(p)
			log = append(log, fmt.Sprintf("mkdir %s: %v", p, err))
			merr := os.MkdirAll(mp, 0o755)
			if (err == nil) != (merr == nil) {
				t.Fatalf("mkdir %s: changeset %v, model %v\n%s", p, err, merr, strings.Join(log, "\n"))
			}
		}
	}
}

func checkAgainstModel(t *testing.T, cs *ChangeSet, ws, model string, log []string) {
	ctx := t.Context()
	want := snap(t, model)
	fail := func(what string, got tree) {
		t.Helper()
		if !cmp.Equal(want, got) {
			t.Fatalf("%s differs from the model (-model +got):\n%s\nops:\n%s", what, cmp.Diff(want, got), strings.Join(log, "\n"))
		}
	}
	fail("merged view", snapView(t, cs))
	merged, umount := mountOverlay(t, cs)
	fail("overlayfs", snap(t, merged))
	umount()
	d, err := cs.Diff(ctx)
	must(t, err)
	if d != "" && gitCanExpress(t, cs) {
		cp := filepath.Join(t.TempDir(), "copy")
		sh(t, "/", "cp -a "+ws+" "+cp)
		patch := filepath.Join(t.TempDir(), "p.diff")
		must(t, os.WriteFile(patch, []byte(d), 0o644))
		sh(t, cp, "git apply "+patch)
		// git removes directories its deletions empty; the model keeps
		// directories the ops made empty. Compare files only.
		fail2 := func(what string, got tree) {
			t.Helper()
			w, g := filesOnly(want), filesOnly(got)
			if !cmp.Equal(w, g) {
				t.Fatalf("%s differs from the model (-model +got):\n%s\ndiff:\n%s\nops:\n%s", what, cmp.Diff(w, g), d, strings.Join(log, "\n"))
			}
		}
		fail2("git apply", snap(t, cp))
	}
	if _, err := cs.Apply(ctx); err != nil {
		t.Fatalf("apply: %v\nops:\n%s", err, strings.Join(log, "\n"))
	}
	fail("applied tree", snap(t, ws))
	if ch, err := cs.Changes(ctx); err != nil || len(ch) != 0 {
		t.Fatalf("changes after apply: %v %v", ch, err)
	}
}

// gitCanExpress is false when the change set deletes an empty directory:
// git does not track directories, so its diff cannot say so (our Apply
// can, and is checked regardless).
func gitCanExpress(t *testing.T, cs *ChangeSet) bool {
	ch, err := cs.Changes(t.Context())
	must(t, err)
	for _, c := range ch {
		if c.Op != Deleted || c.Kind != KindDir {
			continue
		}
		hasFile := false
		for _, f := range ch {
			if f.Op == Deleted && f.Kind != KindDir && strings.HasPrefix(f.Path, c.Path+"/") {
				hasFile = true
			}
		}
		if !hasFile {
			return false
		}
	}
	return true
}

func filesOnly(tr tree) tree {
	out := tree{}
	for k, v := range tr {
		if !strings.HasPrefix(v, "dir ") {
			out[k] = v
		}
	}
	return out
}
