package sandboxd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite testdata/frames.txtar")

// goldenFrames are the frames of testdata/frames.txtar, by name.
var goldenFrames = []struct {
	name string
	f    frame
}{
	{"request", frame{Type: frameRequest, Version: Version, Total: 5, Data: []byte("abcde")}},
	{"request-first-chunk", frame{Type: frameRequest, Version: Version, Total: 70000, Data: []byte("first")}},
	{"request-more", frame{Type: frameRequestMore, Data: []byte("rest")}},
	{"stdin", frame{Type: frameStdin, Data: []byte("line\n")}},
	{"stdin-eof", frame{Type: frameStdinEOF}},
	{"signal-int", frame{Type: frameSignal, Signal: syscall.SIGINT}},
	{"signal-term", frame{Type: frameSignal, Signal: syscall.SIGTERM}},
	{"signal-hup", frame{Type: frameSignal, Signal: syscall.SIGHUP}},
	{"started", frame{Type: frameStarted}},
	{"want", frame{Type: frameWant, Want: MaxChunk}},
	{"reply-0", frame{Type: frameReply}},
	{"reply-130", frame{Type: frameReply, Code: 130}},
	{"reply-negative", frame{Type: frameReply, Code: -1}},
	{"reply-handover", frame{Type: frameReply, HandOver: true}},
	{"refused", frame{Type: frameRefused, Version: Version, Message: "request carries 0 descriptors"}},
}

// goldenRequests are the encoded Requests of testdata/frames.txtar.
var goldenRequests = []struct {
	name string
	r    Request
}{
	{"body-sandbox-run", Request{Args: []string{"sandbox", "run", "--", "/bin/true"}, Environ: []string{"PATH=/usr/bin:/bin", "HOME=/root"}, Cwd: "/work"}},
	{"body-empty", Request{Cwd: "/"}},
}

func hexLines(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		n := min(len(b), 16)
		sb.WriteString(hex.EncodeToString(b[:n]))
		sb.WriteByte('\n')
		b = b[n:]
	}
	return sb.String()
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, "\n", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenFrames pins the wire format: every frame and request body
// encodes to the bytes in testdata/frames.txtar (go test -update rewrites
// it), and those bytes decode back to it.
func TestGoldenFrames(t *testing.T) {
	const path = "testdata/frames.txtar"
	if *update {
		ar := &txtar.Archive{Comment: []byte("Wire format version 1 of internal/sandboxd: each frame and request body in hex (see wire.go).\nRegenerate with go test -run TestGoldenFrames -update.\n")}
		for _, g := range goldenFrames {
			b, err := encodeFrame(g.f)
			if err != nil {
				t.Fatal(g.name, err)
			}
			ar.Files = append(ar.Files, txtar.File{Name: g.name, Data: []byte(hexLines(b))})
		}
		for _, g := range goldenRequests {
			b, err := encodeRequest(g.r)
			if err != nil {
				t.Fatal(g.name, err)
			}
			ar.Files = append(ar.Files, txtar.File{Name: g.name, Data: []byte(hexLines(b))})
		}
		if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range ar.Files {
		files[f.Name] = unhex(t, string(f.Data))
	}
	if len(files) != len(goldenFrames)+len(goldenRequests) {
		t.Errorf("%s has %d entries, want %d (run with -update)", path, len(files), len(goldenFrames)+len(goldenRequests))
	}
	for _, g := range goldenFrames {
		want, ok := files[g.name]
		if !ok {
			t.Errorf("%s: missing in %s", g.name, path)
			continue
		}
		got, err := encodeFrame(g.f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: encodes to %x (%v), golden %x", g.name, got, err, want)
		}
		f, err := decodeFrame(want)
		if err != nil || !reflect.DeepEqual(f, g.f) {
			t.Errorf("%s: decodes to %+v (%v), want %+v", g.name, f, err, g.f)
		}
	}
	for _, g := range goldenRequests {
		want, ok := files[g.name]
		if !ok {
			t.Errorf("%s: missing in %s", g.name, path)
			continue
		}
		got, err := encodeRequest(g.r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: encodes to %x (%v), golden %x", g.name, got, err, want)
		}
		r, err := decodeRequest(want)
		if err != nil || !equalRequest(r, g.r) {
			t.Errorf("%s: decodes to %+v (%v), want %+v", g.name, r, err, g.r)
		}
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		want string
	}{
		{"empty", "", "empty"},
		{"unknown type", "07", "unknown type"},
		{"request without version", "0100", "no version"},
		{"request of version 2", "010002", "protocol version 2"},
		{"request of version 0", "0100000000000501", "protocol version 0"},
		{"request without length", "01000100", "no length"},
		{"request of length 0", "01000100000000", "out of range"},
		{"request over the maximum", "01000101000001" + "61", "out of range"},
		{"request without chunk", "01000100000005", "chunk size"},
		{"request chunk over total", "0100010000000161" + "62", "chunk size"},
		{"empty request-more", "02", "empty chunk"},
		{"empty stdin", "03", "empty chunk"},
		{"stdin-eof with bytes", "0400", "trailing"},
		{"signal without number", "05", "wrong size"},
		{"signal 9", "0509", "not forwarded"},
		{"signal 2 bytes", "050200", "wrong size"},
		{"started with bytes", "8100", "trailing"},
		{"want 0", "8200000000", "out of range"},
		{"want too much", "8200010000", "out of range"},
		{"want short", "82000001", "wrong size"},
		{"reply short", "8300000000", "wrong size"},
		{"reply unknown flag", "830000000002", "unknown flags"},
		{"refused without version", "8400", "no version"},
		{"refused not UTF-8", "840001ff", "UTF-8"},
		{"refused too long", "840001" + strings.Repeat("61", maxMessage+1), "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := hex.DecodeString(tc.hex)
			if err != nil {
				t.Fatal(err)
			}
			_, err = decodeFrame(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeFrame(%s) = %v, want an error mentioning %q", tc.hex, err, tc.want)
			}
			var fe *FrameError
			var ve *VersionError
			if !errors.As(err, &fe) && !errors.As(err, &ve) {
				t.Errorf("error %T is neither a FrameError nor a VersionError", err)
			}
		})
	}
	if _, err := decodeFrame(make([]byte, MaxFrame+1)); err == nil {
		t.Error("a frame over MaxFrame decoded")
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		want string
	}{
		{"empty", "", "arguments count"},
		{"huge argc", "ffffffff", "exceeds"},
		{"argc over the bytes", "00000002" + "00000000", "exceeds"},
		{"string over the bytes", "00000001" + "00000009" + "61", "arguments"},
		{"NUL in an argument", "00000001" + "00000003" + "610062" + "00000000" + "00000001" + "2f", "NUL"},
		{"no environment", "00000000", "environment count"},
		{"no cwd", "00000000" + "00000000", "working directory"},
		{"trailing bytes", "00000000" + "00000000" + "00000001" + "2f" + "00", "trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := hex.DecodeString(tc.hex)
			_, err := decodeRequest(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeRequest(%s) = %v, want an error mentioning %q", tc.hex, err, tc.want)
			}
		})
	}
}

func TestRequestFrames(t *testing.T) {
	for _, tc := range []struct{ n, max int }{
		{12, MaxFrame}, {MaxFrame - 7, MaxFrame}, {MaxFrame - 6, MaxFrame}, {3*MaxFrame + 5, MaxFrame},
		{3*MaxFrame + 5, 2 * MaxFrame}, // never over MaxFrame
		{1000, 64}, {5000, 4096},       // a small send buffer
	} {
		n := tc.n
		body := bytes.Repeat([]byte{'z'}, n)
		var got []byte
		for i, b := range requestFrames(body, tc.max) {
			if len(b) > min(tc.max, MaxFrame) {
				t.Fatalf("%d: frame %d has %d bytes", n, i, len(b))
			}
			f, err := decodeFrame(b)
			if err != nil {
				t.Fatalf("%d: frame %d: %v", n, i, err)
			}
			if (i == 0) != (f.Type == frameRequest) || (i == 0 && int(f.Total) != n) {
				t.Fatalf("%d: frame %d is %+v", n, i, f)
			}
			got = append(got, f.Data...)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("%d: reassembled %d bytes", n, len(got))
		}
	}
}

// FuzzDecodeFrame: decodeFrame never panics, and what it accepts is the
// canonical encoding of what it returns (no two encodings of one frame).
func FuzzDecodeFrame(f *testing.F) {
	for _, g := range goldenFrames {
		b, _ := encodeFrame(g.f)
		f.Add(b)
	}
	f.Add([]byte{0x01, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			return
		}
		again, err := encodeFrame(fr)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", fr, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v which encodes to %x", b, fr, again)
		}
	})
}

// FuzzDecodeRequest: decodeRequest never panics nor allocates beyond its
// input, and what it accepts re-encodes to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	for _, g := range goldenRequests {
		b, _ := encodeRequest(g.r)
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			return
		}
		again, err := encodeRequest(r)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v which encodes to %x", b, r, again)
		}
	})
}
