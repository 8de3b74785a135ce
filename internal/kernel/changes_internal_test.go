package kernel

import (
	"errors"
	"testing"
)

// A reservation for apply/discard and a run exclude each other: Run
// checks k.running, which the reservation holds.
func TestReserveChanges(t *testing.T) {
	k := &Kernel{running: map[string]*run{}}
	release, err := k.reserveChanges("s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.reserveChanges("s1"); !errors.Is(err, ErrBusy) {
		t.Errorf("second reservation = %v, want ErrBusy", err)
	}
	if _, busy := k.running["s1"]; !busy {
		t.Error("the reservation does not make the session busy for Run")
	}
	if k.Cancel("s1") != true {
		t.Error("Cancel of a reserved session")
	}
	release()
	if _, busy := k.running["s1"]; busy {
		t.Error("still busy after release")
	}
	r2, err := k.reserveChanges("s1")
	if err != nil {
		t.Fatal(err)
	}
	r2()
}
