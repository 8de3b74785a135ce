package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// TestContribUnitIsTheInstalledOne: contrib/fluffy.service is the unit
// "fluffy serve install-unit" writes, for a fluffy in /usr/local/bin.
func TestContribUnitIsTheInstalledOne(t *testing.T) {
	b, err := os.ReadFile("../../contrib/fluffy.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := unitText("/usr/local/bin/fluffy"); string(b) != want {
		t.Errorf("contrib/fluffy.service differs from install-unit's unit; write it again:\n%s", want)
	}
}

// TestUnitIsHardenedAndVerifies: the unit carries the hardening
// docs/deploy.md explains, none of the directives that would break the
// native sandbox, and systemd's own checker has nothing to say about it.
func TestUnitIsHardenedAndVerifies(t *testing.T) {
	u := unitText("/bin/true")
	for _, d := range []string{"NoNewPrivileges=yes", "ProtectSystem=full", "LockPersonality=yes", "RestrictRealtime=yes",
		"RestrictSUIDSGID=yes", "SystemCallArchitectures=native", "MemoryMax=", "TasksMax="} {
		if !strings.Contains(u, "\n"+d) {
			t.Errorf("the unit lacks %s", d)
		}
	}
	// Each breaks the sandbox: an overmount on /proc forbids its own
	// /proc, a private or read-only home hides the workspaces, a
	// namespace filter refuses its namespaces, W^X kills JITs in it.
	for _, d := range []string{"ProtectKernelTunables=", "ProtectProc=", "ProtectHome=", "PrivateTmp=", "RestrictNamespaces=", "MemoryDenyWriteExecute=", "ProtectSystem=strict"} {
		if strings.Contains(u, "\n"+d) {
			t.Errorf("the unit sets %s", d)
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the unit is not verified")
	}
	p := filepath.Join(t.TempDir(), "fluffy.service")
	if err := os.WriteFile(p, []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", p).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestStatusShowsTheDaemonsChannels: "fluffy status" says what /readyz
// says, and each channel's state, restarts and last error.
func TestStatusShowsTheDaemonsChannels(t *testing.T) {
	var b strings.Builder
	since := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	printServeStatus(&b, &kernel.ServeStatus{NotReady: []string{"channel mail: failing: dial tcp: refused"}, Health: "unix:/run/h.sock",
		Channels: []kernel.ChannelStatus{
			{Name: "github", State: kernel.ChannelConnected, Since: since},
			{Name: "mail", State: kernel.ChannelFailing, Since: since, Restarts: 3, LastError: "dial tcp: refused\x1b[2J"},
		}})
	want := "serve\tnot ready: channel mail: failing: dial tcp: refused\n" +
		"health\tunix:/run/h.sock\n" +
		"channel github\tconnected since 2026-11-27 10:00:00Z, 0 restarts\n" +
		"channel mail\tfailing since 2026-11-27 10:00:00Z, 3 restarts, last error: dial tcp: refused\\x1b[2J\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
