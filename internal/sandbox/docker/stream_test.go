package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

func frame(stream byte, p string) []byte {
	h := make([]byte, frameHeader, frameHeader+len(p))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(p)))
	return append(h, p...)
}

func frames(fs ...[]byte) []byte { return bytes.Join(fs, nil) }

func TestDemux(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	for _, c := range []struct {
		name             string
		in               []byte
		stdout, stderr   string
		err              error
		errText          string
		small, oneByteIO bool
	}{
		{name: "empty"},
		{name: "both", in: frames(frame(1, "out1 "), frame(2, "err"), frame(1, "out2"), frame(0, "in")), stdout: "out1 out2in", stderr: "err"},
		{name: "empty frames", in: frames(frame(1, ""), frame(2, ""), frame(1, "a")), stdout: "a"},
		{name: "a frame over the buffer", in: frames(frame(1, big), frame(2, "e")), stdout: big, stderr: "e"},
		{name: "a byte at a time", in: frames(frame(1, "hello"), frame(2, "world")), stdout: "hello", stderr: "world", oneByteIO: true},
		{name: "smallest buffer", in: frames(frame(1, "hello"), frame(2, "world"), frame(1, "!")), stdout: "hello!", stderr: "world", small: true},
		{name: "cut in a header", in: frame(1, "abc")[:5], err: ErrStream},
		{name: "cut in a payload", in: frame(1, "abc")[:10], stdout: "ab", err: ErrStream},
		{name: "unknown stream", in: frames(frame(1, "a"), frame(7, "b")), stdout: "a", err: ErrStream},
		{name: "system message", in: frames(frame(1, "a"), frame(3, "no such exec\n")), stdout: "a", errText: "the engine: no such exec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var src io.Reader = bytes.NewReader(c.in)
			if c.oneByteIO {
				src = iotest.OneByteReader(src)
			}
			n := demuxBuffer
			if c.small {
				n = frameHeader
			}
			buf := make([]byte, n)
			var out, errb bytes.Buffer
			err := demux(src, buf, &out, &errb)
			switch {
			case c.err != nil && !errors.Is(err, c.err):
				t.Errorf("err = %v, want %v", err, c.err)
			case c.errText != "" && (err == nil || !strings.Contains(err.Error(), c.errText)):
				t.Errorf("err = %v, want %q", err, c.errText)
			case c.err == nil && c.errText == "" && err != nil:
				t.Errorf("err = %v", err)
			}
			if out.String() != c.stdout || errb.String() != c.stderr {
				t.Errorf("stdout %.40q stderr %.40q, want %.40q %.40q", out.String(), errb.String(), c.stdout, c.stderr)
			}
			if !bytes.Equal(buf, make([]byte, n)) {
				t.Error("the read buffer is not zeroed")
			}
		})
	}
}

// FuzzDemux: whatever the engine sends, demux never panics, and what it
// reads without error stdcopy (the engine client's demultiplexer) reads
// the same.
func FuzzDemux(f *testing.F) {
	f.Add(frames(frame(1, "out"), frame(2, "err")), uint8(9))
	f.Add(frame(3, "boom"), uint8(8))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'a'}, uint8(40))
	f.Fuzz(func(t *testing.T, in []byte, n uint8) {
		buf := make([]byte, max(int(n), frameHeader))
		var out, errb bytes.Buffer
		err := demux(bytes.NewReader(in), buf, &out, &errb)
		if err == nil {
			var wout, werr bytes.Buffer
			_, werrc := stdcopy.StdCopy(&wout, &werr, bytes.NewReader(in))
			if werrc != nil || out.String() != wout.String() || errb.String() != werr.String() {
				t.Fatalf("demux: %q %q, stdcopy %v %q %q", out.String(), errb.String(), werrc, wout.String(), werr.String())
			}
		}
		if !bytes.Equal(buf, make([]byte, len(buf))) {
			t.Fatal("the read buffer is not zeroed")
		}
	})
}

// TestUpgradeExecReadsNoOutput: the engine may send the command's first
// output in the same write as the answer's header; the header's read
// must leave it on the connection for demux (into the arena), or it is
// lost (and was read into a heap buffer).
func TestUpgradeExecReadsNoOutput(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	body := frames(frame(1, "s3cr3t-output"), frame(2, "e"))
	go func() {
		defer b.Close()
		req := make([]byte, 4096)
		n, _ := b.Read(req)
		if !strings.HasPrefix(string(req[:n]), "POST /v1.47/exec/abc/start HTTP/1.1\r\n") || !strings.Contains(string(req[:n]), "Upgrade: tcp\r\n") {
			t.Errorf("request %q", req[:n])
			return
		}
		for n < 4096 && !strings.HasSuffix(string(req[:n]), `{"Detach":false,"Tty":false}`) {
			k, err := b.Read(req[n:])
			if err != nil {
				return
			}
			n += k
		}
		_, _ = b.Write(append([]byte("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"), body...))
	}()
	if err := upgradeExec(a, "1.47", "abc"); err != nil {
		t.Fatal(err)
	}
	ar := &secret.Arena{}
	defer ar.Wipe()
	out := newCapped(1<<20, nil, false, ar)
	var errb bytes.Buffer
	if err := demux(a, ar.Bytes(demuxBuffer), out, &errb); err != nil {
		t.Fatal(err)
	}
	if string(out.bytes()) != "s3cr3t-output" || errb.String() != "e" {
		t.Errorf("stdout %q stderr %q", out.bytes(), errb.String())
	}
	if out.fixed == nil {
		t.Error("the output was not captured in the arena")
	}
}

func TestUpgradeExecRefused(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		req := make([]byte, 4096)
		_, _ = b.Read(req)
		_, _ = b.Write([]byte("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n{\"message\":\"No such exec instance: abc\"}\n"))
	}()
	err := upgradeExec(a, "", "abc")
	if err == nil || !strings.Contains(err.Error(), "No such exec instance") {
		t.Fatalf("err = %v", err)
	}
}

func TestCappedInScratch(t *testing.T) {
	ar := &secret.Arena{}
	defer ar.Wipe()
	c := newCapped(5, nil, false, ar)
	if c.fixed == nil {
		t.Fatal("no arena buffer")
	}
	_, _ = c.Write([]byte("abc"))
	_, _ = c.Write([]byte("defg"))
	if got := string(c.bytes()); got != "abcde"+sandbox.TruncationMarker {
		t.Errorf("got %q", got)
	}
}
