package cli

import (
	"os"
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
