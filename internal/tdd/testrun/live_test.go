package testrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestLivePytest runs the real pytest (Debian's python3-pytest, installed
// by scripts/deps.sh) on a passing test, a failing one and one whose
// module does not import, and parses the JUnit XML it writes: the format
// the committed testdata pins must still be what pytest produces.
func TestLivePytest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pytest")
	}
	pytest, err := exec.LookPath("pytest-3")
	if err != nil {
		t.Skip("pytest-3 not installed (make deps installs python3-pytest)")
	}
	dir := t.TempDir()
	files := map[string]string{
		"calc.py":         "def add(a, b):\n    return a + b\n",
		"test_pass.py":    "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
		"test_fail.py":    "from calc import add\n\ndef test_add_wrong():\n    assert add(2, 2) == 5\n",
		"test_collect.py": "from calc import mul\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		file  string
		extra []string
		want  Outcome
		build bool
	}{
		{"test_pass.py", nil, Passed, false},
		{"test_fail.py", nil, Failed, false},
		{"test_collect.py", nil, Failed, true},
		{"test_pass.py", []string{"-k", "nothing_matches_this"}, NoTests, false},
	}
	for _, c := range cases {
		report := filepath.Join(t.TempDir(), "report.xml")
		args := append([]string{"-q", "-p", "no:cacheprovider", "--junitxml=" + report, c.file}, c.extra...)
		cmd := exec.Command(pytest, args...)
		cmd.Dir = dir
		_ = cmd.Run() // non-zero for failures; the report says why
		f, err := os.Open(report)
		if err != nil {
			t.Fatalf("%s: no report: %v", c.file, err)
		}
		res, err := ParseJUnit(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if res.Outcome() != c.want || res.BuildFailed != c.build {
			t.Errorf("%s: outcome %s build %v, want %s build %v (%+v)", c.file, res.Outcome(), res.BuildFailed, c.want, c.build, res)
		}
		if c.want == Failed && (len(res.Failures) == 0 || res.Failures[0].File != c.file) {
			t.Errorf("%s: failure not located: %+v", c.file, res.Failures)
		}
	}
}
