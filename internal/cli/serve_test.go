package cli

import (
	"os"
	"testing"
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
