package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// The message offers --allow-degraded only where a degraded run would
// run: a missing engine or user namespaces leave nothing to run with.
func TestUnavailableOffersDegradedOnlyWhereItRuns(t *testing.T) {
	engine := &UnavailableError{Missing: []Facility{{Name: "container-engine", Required: true, Detail: "unix:///var/run/docker.sock: no answer", Fix: "install docker.io and start dockerd"}}}
	landlock := &UnavailableError{Missing: []Facility{{Name: "landlock", Required: true, Detail: "not in this kernel"}}, Degradable: true}
	for _, c := range []struct {
		err   *UnavailableError
		offer bool
	}{{engine, false}, {landlock, true}} {
		msg := c.err.Error()
		if got := strings.Contains(msg, "--allow-degraded"); got != c.offer {
			t.Errorf("%q: offers --allow-degraded %v, want %v", msg, got, c.offer)
		}
		if !strings.Contains(msg, c.err.Missing[0].Name) || !errors.Is(c.err, ErrUnavailable) {
			t.Errorf("%q: does not name %s, or is not ErrUnavailable", msg, c.err.Missing[0].Name)
		}
	}
	if !strings.Contains(engine.Error(), "fix: install docker.io") {
		t.Errorf("%q: no fix", engine.Error())
	}
}
