package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/doctor"
)

func TestBinariesCheck(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	core := touch("fluffy-core")
	if c := binariesCheck(core); c.Status != doctor.Warn || c.Fix == "" {
		t.Errorf("fluffy-core without the client: %+v", c)
	}
	lone := touch("fluffy")
	if c := binariesCheck(lone); c.Status != doctor.Warn {
		t.Errorf("a lone full build named fluffy: %+v", c)
	}
	if c := binariesCheck(core); c.Status != doctor.OK || !strings.Contains(c.Detail, dir) {
		t.Errorf("fluffy-core with the client beside it: %+v", c)
	}
}
