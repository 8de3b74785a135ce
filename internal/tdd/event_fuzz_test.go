package tdd

import (
	"bytes"
	"testing"
)

// FuzzDecodeEvent: the journal's strict decoder accepts only canonical
// encodings (so one event has one hash), and no decoded event — however
// odd — makes Step panic or return a status that breaks its invariants.
func FuzzDecodeEvent(f *testing.F) {
	for _, ev := range eventAlphabet {
		b, err := canonical(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"coverage","coverage":{"files":{"a.go":{"covered":5,"total":3}}},"baseline":true}`))
	f.Add([]byte(`{"kind":"write","files":[{"path":"../x","class":"source"}]}`))
	statuses := []Status{
		run(&testing.T{}, start(Strict)),
		run(&testing.T{}, with(Explore, toImpl)...),
		run(&testing.T{}, with(Debug, []Event{instrument("calc.go")})...),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := decodeEvent(data)
		if err != nil {
			return
		}
		again, err := canonical(ev)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("accepted a non-canonical encoding: %q vs %q", data, again)
		}
		for _, s := range statuses {
			tr, err := Step(s, ev)
			if err != nil {
				continue
			}
			n := tr.Status
			if !n.State.Valid() || !n.Mode.Valid() || n.Seq != s.Seq+1 {
				t.Fatalf("invalid status after %s: %+v", ev.Kind, n)
			}
			if n.Mode != s.Mode && (ev.By == nil || ev.By.Kind != ActorUser) {
				t.Fatalf("mode changed without the user: %+v", ev)
			}
		}
	})
}
