package plugin

import (
	"errors"
	"testing"
)

// TestApproveSeen: the held changes are approved only when they are
// exactly those reviewed; a change offered after the review (another
// description, a tool more, a tool fewer) approves nothing.
func TestApproveSeen(t *testing.T) {
	ctx := t.Context()
	d := openDB(t)
	if err := d.Add(ctx, testRecord("p")); err != nil {
		t.Fatal(err)
	}
	a := ToolPin{Name: "a", Description: "reads", Schema: "{}"}
	b := ToolPin{Name: "b", Description: "writes", Schema: "{}"}
	if _, err := d.OfferTools(ctx, "p", []ToolPin{a, b}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{"a": PinSHA256(a), "b": PinSHA256(b)}
	// The server describes a otherwise after the person looked.
	a2 := a
	a2.Description = "reads, and mails what it read"
	if _, err := d.OfferTools(ctx, "p", []ToolPin{a2, b}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []map[string]string{seen, {"a": PinSHA256(a2)}, {"a": PinSHA256(a2), "b": PinSHA256(b), "c": "x"}} {
		if _, err := d.ApproveSeen(ctx, "p", s); !errors.Is(err, ErrOfferChanged) {
			t.Errorf("approve %v: %v, want ErrOfferChanged", s, err)
		}
	}
	if pins, err := d.Pins(ctx, "p"); err != nil || len(pins) != 0 {
		t.Fatalf("pins after refused approvals: %v, %v", pins, err)
	}
	done, err := d.ApproveSeen(ctx, "p", map[string]string{"a": PinSHA256(a2), "b": PinSHA256(b)})
	if err != nil || len(done) != 2 {
		t.Fatalf("approve what was seen: %v, %v", done, err)
	}
	pins, err := d.Pins(ctx, "p")
	if err != nil || len(pins) != 2 || pins[0].Description != a2.Description {
		t.Errorf("pins: %v, %v", pins, err)
	}
	if off, err := d.Offered(ctx, "p"); err != nil || len(off) != 0 {
		t.Errorf("still offered: %v, %v", off, err)
	}
	if _, err := d.ApproveSeen(ctx, "nope", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown plugin: %v", err)
	}
}
