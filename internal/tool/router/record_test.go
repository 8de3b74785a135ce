package router_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// wantReadRecord is the tool.read payload as the router wrote it before
// it built payloads with audit.Object: a struct through encoding/json and
// audit.Canonicalize. The fast path must keep writing the same bytes.
type wantReadRecord struct {
	Call        string   `json:"call"`
	Tool        string   `json:"tool"`
	ArgsSHA256  string   `json:"args_sha256"`
	Paths       []string `json:"paths,omitempty"`
	State       wantGate `json:"gate_state"`
	Policy      wantGate `json:"gate_policy"`
	IsError     bool     `json:"is_error,omitempty"`
	Error       string   `json:"error,omitempty"`
	DurationUS  int64    `json:"duration_us"`
	OutputBytes int64    `json:"output_bytes"`
	ShownBytes  int      `json:"shown_bytes"`
	ShownSHA256 string   `json:"shown_sha256"`
	CutBytes    int64    `json:"cut_bytes,omitempty"`
	Redactions  int      `json:"redactions,omitempty"`
	Stripped    int      `json:"stripped,omitempty"`
	Binary      bool     `json:"binary,omitempty"`
}

type wantGate struct {
	Effect string `json:"effect"`
	Rule   string `json:"rule"`
}

// TestReadRecordFormat: the tool.read entry of an allowed fast-path read
// holds exactly what the struct encoding above gives, for a plain read,
// one with control sequences stripped and a secret redacted, and one the
// tool fails.
func TestReadRecordFormat(t *testing.T) {
	e := newEnv(t, setup{})
	e.secrets = []string{"s3cr3t-value"}
	must(t, os.WriteFile(filepath.Join(e.ws, "mixed.txt"), []byte("a \x1b[31mred\x1b[0m s3cr3t-value line\n"), 0o644))
	type in struct {
		Path string `json:"path"`
	}
	fail, err := tool.New(tool.Definition[in]{
		Name: "test.fail", Description: "Fails.", Action: operation.Read, Tags: []string{tool.TagReads},
		Execution: tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, r *tool.Resolver, x *in, op *operation.Operation) error {
			p, err := r.Resolve(x.Path)
			op.Paths = append(op.Paths, p)
			return err
		},
		Run: func(context.Context, *in) (tool.Result, error) {
			return tool.Result{}, errors.New("it broke \x1b[1m\"badly\"")
		},
	})
	must(t, err)
	must(t, e.reg.Register(fail))
	for _, c := range []struct {
		name, tool string
		args       map[string]any
	}{
		{"plain", "fs.read", map[string]any{"path": "README.md"}},
		{"stripped and redacted", "fs.read", map[string]any{"path": "mixed.txt"}},
		{"tool result is an error", "fs.read", map[string]any{"path": "no-such-file"}},
		{"tool fails", "test.fail", map[string]any{"path": "README.md"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			from := e.last()
			call := tc(c.tool, c.args)
			res, err := e.r.Call(t.Context(), call)
			must(t, err)
			es := e.entries(from)
			if len(es) != 1 || es[0].Kind != "tool.read" {
				t.Fatalf("entries %v, want one tool.read", kinds(es))
			}
			var got map[string]any
			must(t, json.Unmarshal(es[0].Payload.(json.RawMessage), &got))
			argsSum := sha256.Sum256(call.Args)
			shown := sha256.Sum256([]byte(res.Content))
			w := wantReadRecord{
				Call: call.ID, Tool: c.tool, ArgsSHA256: hex.EncodeToString(argsSum[:]),
				Paths: []string{filepath.Join(e.ws, c.args["path"].(string))},
				State: wantGate{"allow", "not_gated"}, Policy: wantGate{"allow", "default.read-workspace"},
				IsError: res.IsError, DurationUS: int64(got["duration_us"].(float64)),
				OutputBytes: int64(got["output_bytes"].(float64)), ShownBytes: len(res.Content), ShownSHA256: hex.EncodeToString(shown[:]),
			}
			if c.tool == "test.fail" {
				w.Error = res.Content
				if !res.IsError || !strings.Contains(res.Content, `it broke \x1b[1m"badly"`) {
					t.Fatalf("result %+v", res)
				}
			}
			if v, ok := got["stripped"]; ok {
				w.Stripped = int(v.(float64))
			}
			if v, ok := got["redactions"]; ok {
				w.Redactions = int(v.(float64))
			}
			raw, err := json.Marshal(w)
			must(t, err)
			want, err := audit.Canonicalize(raw)
			must(t, err)
			if string(es[0].Payload.(json.RawMessage)) != string(want) {
				t.Fatalf("payload\n got %s\nwant %s", es[0].Payload, want)
			}
			if c.name == "stripped and redacted" && (w.Stripped == 0 || w.Redactions != 1) {
				t.Fatalf("stripped %d, redactions %d: the case does not exercise them", w.Stripped, w.Redactions)
			}
		})
	}
}
