package reaper

import (
	"encoding/binary"
	"testing"
)

// FuzzParseReport: the report comes from inside the sandbox (a reaper
// the command took over could write anything): any bytes parse without a
// panic, and only a 16-byte report is accepted, word by word.
func FuzzParseReport(f *testing.F) {
	f.Add([]byte{0, 7, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 7, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0})
	f.Add([]byte{})
	f.Add(make([]byte, 13))
	f.Add(make([]byte, 17))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok := ParseReport(b)
		if ok != (len(b) == ReportSize) {
			t.Fatalf("%d bytes: ok %v", len(b), ok)
		}
		if !ok {
			return
		}
		if r.WaitStatus != binary.NativeEndian.Uint32(b) || r.Reaped != (binary.NativeEndian.Uint32(b[4:]) == 1) || r.TmpFull != (b[8]&1 != 0) ||
			r.UpperFull != (b[8]&2 != 0) || r.UpperInodes != binary.NativeEndian.Uint32(b[12:]) {
			t.Fatalf("%x: %+v", b, r)
		}
	})
}
