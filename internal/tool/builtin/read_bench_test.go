package builtin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// BenchmarkRead: fs.read of a 2,000-line source file (about 80 KB), whole,
// through the change set.
func BenchmarkRead(b *testing.B) {
	ws := b.TempDir()
	var sb strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sb, "\tx%d := compute(a, b, c) // a line of ordinary Go source\n", i)
	}
	if err := os.WriteFile(filepath.Join(ws, "f.go"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	cs, err := changeset.Begin(context.Background(), ws, filepath.Join(b.TempDir(), "cs"))
	if err != nil {
		b.Fatal(err)
	}
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: ws, FS: cs.Links()})
	if err != nil {
		b.Fatal(err)
	}
	reg := tool.NewRegistry()
	if err := Register(reg, Options{ChangeSet: cs, Resolver: res}); err != nil {
		b.Fatal(err)
	}
	tl, _ := reg.Lookup("fs.read")
	args, err := tl.Decode([]byte(`{"path":"f.go"}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := tl.Run(context.Background(), args)
		if err != nil || r.IsError || len(r.Output) < 80000 {
			b.Fatalf("%d bytes, %v", len(r.Output), err)
		}
	}
}
