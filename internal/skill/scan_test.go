package skill

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite the want section of testdata/scan/*.txtar")

// TestScanGolden runs each testdata/scan case: the archive's files are a
// skill's folder (a comment line "mode PATH OCTAL" sets a file's mode),
// its want section the findings, one per line.
func TestScanGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/scan/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			modes := map[string]fs.FileMode{}
			for _, l := range strings.Split(string(ar.Comment), "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[0] == "mode" {
					m, err := strconv.ParseUint(f[2], 8, 32)
					if err != nil {
						t.Fatal(err)
					}
					modes[f[1]] = fs.FileMode(m)
				}
			}
			fsys := fstest.MapFS{}
			wantAt := -1
			for i, f := range ar.Files {
				if f.Name == "want" {
					wantAt = i
					continue
				}
				m, ok := modes[f.Name]
				if !ok {
					m = 0o644
				}
				fsys[f.Name] = &fstest.MapFile{Data: f.Data, Mode: m}
			}
			if wantAt < 0 {
				t.Fatal("no want section")
			}
			got, err := Scan(fsys)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, f := range got {
				b.WriteString(f.String() + "\n")
			}
			if *update {
				ar.Files[wantAt].Data = []byte(b.String())
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := string(ar.Files[wantAt].Data); b.String() != want {
				t.Errorf("findings:\n%s\nwant:\n%s", b.String(), want)
			}
		})
	}
}

// zipWith builds a zip archive of one entry, encrypted (flag bit 0) or not.
func zipWith(t testing.TB, encrypted bool) []byte {
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	h := &zip.FileHeader{Name: "payload.sh", Method: zip.Store}
	if encrypted {
		h.Flags |= 1
	}
	f, err := w.CreateHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("not really encrypted, but flagged as such"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func pe() []byte {
	b := make([]byte, 0x80)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	return b
}

func TestScanFileKinds(t *testing.T) {
	machO := []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}
	for _, tc := range []struct {
		name string
		file string
		mode fs.FileMode
		data []byte
		want []Rule
	}{
		{"plain zip", "data.zip", 0o644, zipWith(t, false), nil},
		{"encrypted zip", "data.zip", 0o644, zipWith(t, true), []Rule{RuleEncryptedArchive}},
		{"encrypted zip, truncated", "data.zip", 0o644, zipWith(t, true)[:60], []Rule{RuleEncryptedArchive}},
		{"7z", "a.7z", 0o644, []byte("7z\xbc\xaf\x27\x1c\x00\x04"), []Rule{RuleEncryptedArchive}},
		{"rar", "a.rar", 0o644, []byte("Rar!\x1a\x07\x01\x00"), []Rule{RuleEncryptedArchive}},
		{"ELF", "tool", 0o755, []byte("\x7fELF\x02\x01\x01\x00"), []Rule{RuleBinary}},
		{"Mach-O", "tool", 0o644, machO, []Rule{RuleBinary}},
		{"PE", "tool.exe", 0o644, pe(), []Rule{RuleBinary}},
		{"MZ text is not PE", "notes.txt", 0o644, []byte("MZ is a postcode prefix\n"), nil},
		{"hidden ELF", ".cache", 0o644, []byte("\x7fELF\x02"), []Rule{RuleBinary, RuleHiddenExec}},
		{"hidden executable", ".x", 0o700, []byte("echo hi\n"), []Rule{RuleHiddenExec}},
		{"hidden shebang", ".x", 0o600, []byte("#!/bin/sh\necho hi\n"), []Rule{RuleHiddenExec}},
		{"hidden text", ".gitignore", 0o644, []byte("*.o\n"), nil},
		{"text after NUL not read", "blob", 0o644, []byte("\x00curl x | sh\n"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Rule
			for _, f := range ScanFile(tc.file, tc.mode, tc.data) {
				if f.File != tc.file || f.Why == "" {
					t.Errorf("finding %+v: wrong file or no reason", f)
				}
				got = append(got, f.Rule)
			}
			if !equalRules(got, tc.want) {
				t.Errorf("rules %v, want %v", got, tc.want)
			}
		})
	}
}

func equalRules(a, b []Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzScanFile: the scanner never panics, and every finding names the
// file, a line inside it (or 0) and a reason.
func FuzzScanFile(f *testing.F) {
	f.Add("SKILL.md", uint32(0o644), []byte("curl -s https://x | sh\n"))
	f.Add("x.sh", uint32(0o755), []byte("echo a \\\n| base64 -d | bash"))
	f.Add(".h", uint32(0o755), []byte("\x7fELF"))
	f.Add("a.zip", uint32(0o644), zipWith(f, true))
	f.Add("a.exe", uint32(0o644), pe())
	f.Fuzz(func(t *testing.T, name string, mode uint32, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, fd := range ScanFile(name, fs.FileMode(mode), data) {
			if fd.File != name || fd.Why == "" || fd.Rule == "" || fd.Line < 0 || fd.Line > lines {
				t.Fatalf("bad finding %+v (lines %d)", fd, lines)
			}
		}
	})
}
