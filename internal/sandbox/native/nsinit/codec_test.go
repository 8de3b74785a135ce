package nsinit

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleConfig() Config {
	return Config{
		Protocol: Protocol, Argv: []string{"/bin/sh", "-c", "echo 'hi'\n"}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/tmp"},
		Dir: "/work", Workspace: "/work", Upper: "/cs/upper", Work: "/cs/.fluffy-work-1", LowerFD: true,
		Mounts:  []MountSpec{{Source: "/a", Target: "/b", Writable: true}, {Source: "/c", Target: "/c"}},
		TmpSize: 64 << 20, UpperSize: 64 << 20, Seccomp: []byte{0x20, 0, 0, 0, 4, 0, 0, 0}, Landlock: 7, LandlockNet: true,
		Rlimits:     []Rlimit{{Resource: 9, Value: 1 << 62}, {Resource: 1, Value: 0}},
		ProxySocket: "/run/proxy.sock", ProxyListen: "127.0.0.1:3128", ProxyFD: true, Trace: true, OverlayRO: true,
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, c := range []Config{{Protocol: Protocol}, sampleConfig()} {
		got, err := DecodeConfig(c.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("config: got %+v (%v), want %+v", got, err, c)
		}
	}
	for _, s := range []Status{{}, {Stage: "mount", Error: "boom", Started: true, ExitCode: -1, Signal: 9, TmpFull: true, SetupNanos: 123456,
		Marks: []Mark{{"a", 1}, {"b", 1 << 60}}, CommandCPU: [2]int64{5, 6}, UpperFull: true, UpperWritten: true}} {
		got, err := DecodeStatus(s.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("status: got %+v (%v), want %+v", got, err, s)
		}
	}
	// Framing.
	var buf bytes.Buffer
	buf.Write(Frame([]byte("one")))
	buf.Write(Frame(nil))
	buf.WriteByte(Release)
	br := bufio.NewReader(&buf)
	for _, want := range []string{"one", ""} {
		if got, err := ReadFrame(br); err != nil || string(got) != want {
			t.Errorf("frame %q: got %q %v", want, got, err)
		}
	}
	if b, err := br.ReadByte(); err != nil || b != Release {
		t.Errorf("the byte after the frames: %q %v", b, err)
	}
}

// TestFramedInGivenMemory: Framed encodes the whole frame, environment
// included, into the memory alloc gives (a secret's value never passes
// through the heap), byte for byte as Frame(AppendBinary) does; lengths
// at the varint boundaries too. Without alloc's memory it uses the heap.
func TestFramedInGivenMemory(t *testing.T) {
	for _, n := range []int{0, 1, 121, 122, 127, 128, 16383, 16384, 70000} {
		c := sampleConfig()
		c.Env = append(c.Env, "TOKEN="+strings.Repeat("v", n))
		want := Frame(c.AppendBinary(nil))
		var given []byte
		got := c.Framed(func(size int) []byte {
			given = make([]byte, size)
			return given
		})
		if !bytes.Equal(got, want) {
			t.Fatalf("env value of %d bytes: Framed differs from Frame(AppendBinary)", n)
		}
		if len(given) != len(got) || &given[0] != &got[0] {
			t.Fatalf("env value of %d bytes: the frame is not in the given memory", n)
		}
		if heap := c.Framed(func(int) []byte { return nil }); !bytes.Equal(heap, want) {
			t.Fatalf("env value of %d bytes: without given memory the frame differs", n)
		}
	}
	var empty Config
	if got := empty.Framed(nil); !bytes.Equal(got, Frame(empty.AppendBinary(nil))) {
		t.Fatal("an empty config's frame differs")
	}
}

func TestCodecRejects(t *testing.T) {
	sample := sampleConfig()
	good := sample.AppendBinary(nil)
	other := sampleConfig()
	other.Protocol = Protocol + 1
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "malformed"},
		{"truncated", good[:len(good)-3], "malformed"},
		{"trailing byte", append(append([]byte(nil), good...), 0), "malformed"},
		{"other protocol", other.AppendBinary(nil), "speaks protocol"},
		{"huge count", append([]byte{Protocol}, 0xff, 0xff, 0xff, 0xff, 0x0f), "malformed"},
		{"bad bool", append((&Config{Protocol: Protocol}).AppendBinary(nil)[:1+1+1+4], 2), "malformed"},
	} {
		if _, err := DecodeConfig(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(huge))); !errors.Is(err, ErrMalformed) {
		t.Errorf("a 4 GB frame: %v", err)
	}
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader([]byte{0, 0, 0, 9, 1}))); err == nil {
		t.Error("a short frame was accepted")
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder (the init decodes what
// its parent sends, the parent what the init reports): no panic, and whatever decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	sample := sampleConfig()
	f.Add(sample.AppendBinary(nil))
	f.Add((&Config{Protocol: Protocol}).AppendBinary(nil))
	f.Add((&Status{Stage: "x", Marks: []Mark{{"m", 3}}}).AppendBinary(nil))
	f.Add(Frame([]byte("x")))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := DecodeConfig(b); err == nil {
			if framed := c.Framed(nil); !bytes.Equal(framed, Frame(c.AppendBinary(nil))) {
				t.Fatalf("Framed differs from Frame(AppendBinary): %+v", c)
			}
			if again := c.AppendBinary(nil); !bytes.Equal(again, b) {
				// Varints have one canonical form here; booleans are 0/1.
				if c2, err := DecodeConfig(again); err != nil || !reflect.DeepEqual(c, c2) {
					t.Fatalf("config does not round-trip: %+v", c)
				}
			}
		}
		if s, err := DecodeStatus(b); err == nil {
			if s2, err := DecodeStatus(s.AppendBinary(nil)); err != nil || !reflect.DeepEqual(s, s2) {
				t.Fatalf("status does not round-trip: %+v", s)
			}
		}
		_, _ = ReadFrame(bufio.NewReader(bytes.NewReader(b)))
	})
}
