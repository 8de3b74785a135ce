package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func init() {
	scriptCmds["gomodproxy"] = goModProxy
}

// goModProxy PROXY MODULE VERSION DIR publishes the module in DIR (with
// its go.mod) as MODULE@VERSION in the file-system module proxy PROXY, so
// a script can fill a Go module cache offline (GOPROXY=file://PROXY).
func goModProxy(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: gomodproxy PROXY MODULE VERSION DIR")
	}
	m := module.Version{Path: args[1], Version: args[2]}
	esc, err := module.EscapePath(m.Path)
	ts.Check(err)
	dir := filepath.Join(ts.MkAbs(args[0]), esc, "@v")
	ts.Check(os.MkdirAll(dir, 0o755))
	src := ts.MkAbs(args[3])
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	ts.Check(err)
	var z bytes.Buffer
	ts.Check(zip.CreateFromDir(&z, m, src))
	info, err := json.Marshal(map[string]string{"Version": m.Version, "Time": "2026-01-01T00:00:00Z"})
	ts.Check(err)
	for name, data := range map[string][]byte{
		"list": []byte(m.Version + "\n"), m.Version + ".info": info, m.Version + ".mod": mod, m.Version + ".zip": z.Bytes(),
	} {
		ts.Check(os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
}
