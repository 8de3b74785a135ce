package tool_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

type readArgs struct {
	Path string `json:"path" jsonschema:"file to read, relative to the workspace"`
}

// Example shows the road a fast-path call takes through these pieces; the
// router adds the gates (state, policy, approval) between Normalize and
// Run, and the audit record after sanitizing.
func Example() {
	ws, _ := os.MkdirTemp("", "ws")
	defer os.RemoveAll(ws)
	_ = os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("\x1b[31mhello\x1b[0m token=sk-123\n"), 0o644)

	read, err := tool.New(tool.Definition[readArgs]{
		Name:        "fs.read",
		Description: "Read a file of the workspace.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(ctx context.Context, r *tool.Resolver, in *readArgs, op *operation.Operation) error {
			p, err := r.Resolve(in.Path)
			op.Paths = append(op.Paths, p)
			return err
		},
		Run: func(ctx context.Context, in *readArgs) (tool.Result, error) {
			b, err := os.ReadFile(filepath.Join(ws, in.Path))
			return tool.Result{Output: b}, err
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := tool.NewRegistry()
	_ = reg.Register(read)
	resolver, _ := tool.NewResolver(tool.ResolverOptions{Workspace: ws})
	sanitizer := tool.NewSanitizer(tool.SanitizerOptions{Secrets: func() []string { return []string{"sk-123"} }})

	// 1. decode: the model's call, by its wire name.
	t, _ := reg.Lookup("fs__read")
	if _, err := t.Decode([]byte(`{"path": 7}`)); err != nil {
		var ae *tool.ArgsError
		errors.As(err, &ae)
		fmt.Println(ae.Problems[0].Path, "expected", ae.Problems[0].Expected, "got", ae.Problems[0].Got)
	}
	args, _ := t.Decode([]byte(`{"path": "notes.txt"}`))
	// 2. normalize: what the gates will see.
	op, _ := t.Normalize(context.Background(), resolver, args, operation.Session{ID: "s1"})
	fmt.Println(op.Tool, op.Action, op.Paths[0].InWorkspace)
	// (3–5: state gate, policy gate, approval.) 6. execute on the fast path.
	res, _ := t.Run(context.Background(), args)
	// 7. sanitize before anything reaches the model.
	fmt.Print(sanitizer.Sanitize(res.Output).Text)
	// Output:
	// path expected string got number 7
	// fs.read read true
	// \x1b[31mhello\x1b[0m token=[REDACTED]
}
