package host

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestCappedBody: an HTTP answer up to the cap reads whole; one byte
// more is ErrTooLong (what bounds a server answering plain JSON rather
// than an event stream, which MaxEventSize bounds).
func TestCappedBody(t *testing.T) {
	for _, tc := range []struct {
		n    int
		fail bool
	}{{0, false}, {9, false}, {10, false}, {11, true}, {1 << 20, true}} {
		b := &cappedBody{rc: io.NopCloser(strings.NewReader(strings.Repeat("x", tc.n))), left: 10}
		got, err := io.ReadAll(b)
		if tc.fail != errors.Is(err, ErrTooLong) || (!tc.fail && (err != nil || len(got) != tc.n)) || len(got) > 10 {
			t.Errorf("%d bytes: read %d, %v", tc.n, len(got), err)
		}
	}
}
