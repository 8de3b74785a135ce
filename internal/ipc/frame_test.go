package ipc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

func frame(payload string) []byte { return AppendFrame(nil, []byte(payload)) }

func header(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func TestReadFrame(t *testing.T) {
	cases := []struct {
		name    string
		in      []byte
		max     int
		want    string
		wantErr error
	}{
		{"one frame", frame(`{"type":"hello"}`), 0, `{"type":"hello"}`, nil},
		{"exactly max", frame(`12345`), 5, `12345`, nil},
		{"clean EOF", nil, 0, "", io.EOF},
		{"truncated header", []byte{0, 0}, 0, "", ErrTruncated},
		{"truncated payload", append(header(10), "abc"...), 0, "", ErrTruncated},
		{"header only", header(10), 0, "", ErrTruncated},
		{"empty frame", header(0), 0, "", ErrEmptyFrame},
		{"over max", frame(`123456`), 5, "", ErrFrameTooLarge},
		{"huge prefix", append(header(0xFFFFFFFF), "x"...), 0, "", ErrFrameTooLarge},
		{"over default", header(DefaultMaxFrame + 1), 0, "", ErrFrameTooLarge},
		{"max is clamped to the hard limit", header(HardMaxFrame + 1), 1 << 40, "", ErrFrameTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(tc.in), tc.max)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Fatalf("payload = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWriteFrame(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrame(&b, []byte(`{"a":1}`), 0); err != nil {
		t.Fatal(err)
	}
	if want := "\x00\x00\x00\x07{\"a\":1}"; b.String() != want {
		t.Fatalf("wire = %q, want %q", b.String(), want)
	}
	if err := WriteFrame(&b, make([]byte, 11), 10); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized write: err = %v", err)
	}
	if err := WriteFrame(&b, nil, 10); !errors.Is(err, ErrEmptyFrame) {
		t.Fatalf("empty write: err = %v", err)
	}
}

func TestDecodeMessage(t *testing.T) {
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"hello", `{"type":"hello","hello":{"min":1,"max":1,"name":"x"}}`, true},
		{"request", `{"type":"request","id":1,"method":"session.create","params":{"a":1}}`, true},
		{"response result", `{"type":"response","id":1,"result":null}`, true},
		{"response error", `{"type":"response","id":1,"error":{"code":"internal","message":"x"}}`, true},
		{"event", `{"type":"event","topic":"session.output","data":"hi"}`, true},
		{"cancel", `{"type":"cancel","id":3}`, true},
		{"error", `{"type":"error","error":{"code":"shutting_down","message":""}}`, true},
		{"not json", `hello`, false},
		{"array", `[1,2]`, false},
		{"null", `null`, false},
		{"trailing", `{"type":"cancel","id":3} {}`, false},
		{"unknown field", `{"type":"cancel","id":3,"extra":1}`, false},
		{"unknown type", `{"type":"shout"}`, false},
		{"no type", `{"id":1}`, false},
		{"hello without hello", `{"type":"hello"}`, false},
		{"request without id", `{"type":"request","method":"ping"}`, false},
		{"request negative id", `{"type":"request","id":-1,"method":"ping"}`, false},
		{"request bad method", `{"type":"request","id":1,"method":"Ping!"}`, false},
		{"response both", `{"type":"response","id":1,"result":1,"error":{"code":"x","message":""}}`, false},
		{"response neither", `{"type":"response","id":1}`, false},
		{"event bad topic", `{"type":"event","topic":""}`, false},
		{"error without code", `{"type":"error","error":{"message":"x"}}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeMessage([]byte(tc.in))
			if (err == nil) != tc.ok {
				t.Fatalf("DecodeMessage(%s): err = %v, want ok=%v", tc.in, err, tc.ok)
			}
		})
	}
}

func TestNegotiate(t *testing.T) {
	cases := []struct {
		min, max, want int
		ok             bool
	}{
		{1, 1, 1, true},
		{1, 5, 1, true},
		{1, 0, 1, true},
		{2, 3, 0, false},
		{0, 0, 0, false},
		{3, 2, 0, false},
	}
	for _, tc := range cases {
		v, err := negotiate(&Hello{Min: tc.min, Max: tc.max})
		if (err == nil) != tc.ok || v != tc.want {
			t.Errorf("negotiate(%d..%d) = %d, %v; want %d ok=%v", tc.min, tc.max, v, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrVersionMismatch) {
			t.Errorf("negotiate error %v does not match ErrVersionMismatch", err)
		}
	}
}

func TestTopicMatch(t *testing.T) {
	cases := []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "a.b", true},
		{"a.b", "a.b", true},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", true},
		{"a.*", "a", false},
		{"a.*", "ab.c", false},
		{"a.b", "a.c", false},
	}
	for _, tc := range cases {
		if got := topicMatch(tc.pattern, tc.topic); got != tc.want {
			t.Errorf("topicMatch(%q, %q) = %v", tc.pattern, tc.topic, got)
		}
	}
}

// FuzzReadFrame: arbitrary bytes never panic, never yield a payload over
// the limit, and a frame that decodes re-encodes to the bytes it came from.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(`{"type":"hello","hello":{"min":1}}`), 64)
	f.Add(header(0xFFFFFFFF), 0)
	f.Add([]byte{0, 0, 0}, 0)
	f.Add(append(header(3), "ab"...), 16)
	f.Add(header(0), 16)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		r := bytes.NewReader(in)
		p, err := ReadFrame(r, max)
		if err != nil {
			if p != nil {
				t.Fatal("payload returned with an error")
			}
			return
		}
		if len(p) == 0 || len(p) > clampMax(max) {
			t.Fatalf("payload of %d bytes with max %d", len(p), max)
		}
		consumed := len(in) - r.Len()
		if !bytes.Equal(AppendFrame(nil, p), in[:consumed]) {
			t.Fatal("re-encoding differs from the input")
		}
	})
}

// FuzzDecodeMessage: a payload that decodes re-encodes to a message that
// decodes to the same value (the decoder is strict and stable).
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","hello":{"min":1,"max":1,"name":"x","pid":3}}`,
		`{"type":"request","id":1,"method":"ping"}`,
		`{"type":"request","id":7,"method":"a.b","params":{"x":[1,2]}}`,
		`{"type":"response","id":1,"result":{"pong":true}}`,
		`{"type":"response","id":1,"error":{"code":"internal","message":"m","data":[1]}}`,
		`{"type":"event","topic":"session.output","data":"x"}`,
		`{"type":"cancel","id":2}`,
		`{"type":"error","error":{"code":"slow_consumer","message":""}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMessage(in)
		if err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, err := DecodeMessage(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		b2, _ := json.Marshal(m2)
		if !bytes.Equal(b, b2) {
			t.Fatalf("unstable: %s vs %s", b, b2)
		}
	})
}
