package secret

import "testing"

func TestArenaHolds(t *testing.T) {
	a := &Arena{}
	defer a.Wipe()
	in := a.String([]byte("TOKEN="), []byte("v"))
	big := a.String(make([]byte, arenaChunk))
	out := string([]byte("TOKEN=v"))
	if !a.Holds(in) || !a.Holds(big) || a.Holds(out) || a.Holds("") {
		t.Errorf("Holds: arena %v %v, heap %v, empty %v", a.Holds(in), a.Holds(big), a.Holds(out), a.Holds(""))
	}
	if (*Arena)(nil).Holds(in) {
		t.Error("a nil arena holds a string")
	}
}
