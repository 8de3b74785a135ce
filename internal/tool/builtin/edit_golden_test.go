package builtin

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/edit")

// TestEditGolden runs the cases in testdata/edit: each archive has the
// file ("file"), the edit ("old" and "new", or "diff") and the expected
// outcome: the new content ("want") or the error shown to the model
// ("error"). A comment line "nonl: file want" marks sections whose final
// newline is not part of the content. Run with -update to rewrite the
// outcomes after a deliberate change of wording.
func TestEditGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/edit/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, name := range files {
		t.Run(strings.TrimSuffix(filepath.Base(name), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(name)
			if err != nil {
				t.Fatal(err)
			}
			nonl := map[string]bool{}
			for _, l := range strings.Split(string(ar.Comment), "\n") {
				if rest, ok := strings.CutPrefix(l, "nonl:"); ok {
					for _, f := range strings.Fields(rest) {
						nonl[f] = true
					}
				}
			}
			sec := map[string]string{}
			for _, f := range ar.Files {
				s := string(f.Data)
				if nonl[f.Name] {
					s = strings.TrimSuffix(s, "\n")
				}
				sec[f.Name] = s
			}
			got, err := goldenEdit(sec)
			key := "want"
			if err != nil {
				key, got = "error", err.Error()+"\n"
			} else if nonl["want"] {
				got += "\n"
			}
			if *update {
				var out []txtar.File
				for _, f := range ar.Files {
					if f.Name != "want" && f.Name != "error" {
						out = append(out, f)
					}
				}
				ar.Files = append(out, txtar.File{Name: key, Data: []byte(got)})
				if err := os.WriteFile(name, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, ok := sec[key]
			if nonl[key] {
				want += "\n"
			}
			if !ok {
				t.Fatalf("outcome %q not expected (the case has no %q section); got:\n%s", key, key, got)
			}
			if got != want {
				t.Errorf("%s:\n--- got\n%s--- want\n%s", key, got, want)
			}
		})
	}
}

// goldenEdit applies a case's edit to its file, named f.go.
func goldenEdit(sec map[string]string) (string, error) {
	if d, ok := sec["diff"]; ok {
		fps, err := parsePatch(d, "f.go")
		if err != nil {
			return "", err
		}
		if len(fps) != 1 {
			return "", &EditError{Path: "f.go", Msg: "case error: one file per golden case"}
		}
		return applyHunks(fps[0].Path, sec["file"], fps[0].Hunks)
	}
	return replaceOnce("f.go", sec["file"], sec["old"], sec["new"])
}
