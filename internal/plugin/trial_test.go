package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestReadTests(t *testing.T) {
	dir := t.TempDir()
	if cs, err := ReadTests(dir); err != nil || len(cs) != 0 {
		t.Fatalf("no tests folder: %v %v", cs, err)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, TestsDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, TestsDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.json", `{"tool": "count", "arguments": {"text": "a"}, "expect": "\"words\":1"}`)
	write("a.json", `{"tool": "count_file", "error": true}`)
	write("notes.txt", `not a case`)
	cs, err := ReadTests(dir)
	if err != nil || len(cs) != 2 || cs[0].Name != "a" || cs[1].Name != "b" || string(cs[0].Arguments) != "{}" || !cs[0].Error || cs[1].Expect != `"words":1` {
		t.Fatalf("cases %+v, %v", cs, err)
	}
	for name, body := range map[string]string{
		"unknown.json": `{"tool": "x", "expected": "y"}`,
		"notool.json":  `{"expect": "y"}`,
		"badre.json":   `{"tool": "x", "expect": "("}`,
		"notjson.json": `tool: x`,
	} {
		t.Run(name, func(t *testing.T) {
			write(name, body)
			defer os.Remove(filepath.Join(dir, TestsDir, name))
			if _, err := ReadTests(dir); !errors.Is(err, ErrTestCase) {
				t.Fatalf("%s: %v", body, err)
			}
		})
	}
}
