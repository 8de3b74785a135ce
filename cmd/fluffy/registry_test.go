package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["cargoregistry"] = cargoRegistry
	scriptCmds["rusttoolchain"] = rustToolchain
	scriptCmds["wheel"] = wheel
	scriptCmds["npmregistry"] = npmRegistry
}

// cargoRegistry VAR CRATE... serves the .crate files (named
// NAME-VERSION.crate, dependency-free) as a sparse cargo registry on the
// host's 127.0.0.1 for the rest of the script, and sets VAR to its
// source URL (sparse+http://…/index/), so a script can fill a cargo
// registry cache the way a person's cargo does.
func cargoRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: cargoregistry VAR CRATE...")
	}
	crates := map[string][]byte{}
	index := map[string][]byte{}
	for _, f := range args[1:] {
		data, err := os.ReadFile(ts.MkAbs(f))
		ts.Check(err)
		base := strings.TrimSuffix(filepath.Base(f), ".crate")
		i := strings.LastIndex(base, "-")
		if i <= 0 {
			ts.Fatalf("%s: want NAME-VERSION.crate", f)
		}
		name, vers := base[:i], base[i+1:]
		sum := sha256.Sum256(data)
		line, err := json.Marshal(map[string]any{"name": name, "vers": vers, "deps": []any{}, "cksum": hex.EncodeToString(sum[:]), "features": map[string]any{}, "yanked": false})
		ts.Check(err)
		index[indexPath(name)] = append(append(index[indexPath(name)], line...), '\n')
		crates["/dl/"+name+"/"+vers] = data
	}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/index/config.json":
			fmt.Fprintf(w, `{"dl": "%s/dl/{crate}/{version}"}`, srv.URL)
		case strings.HasPrefix(p, "/index/") && index[strings.TrimPrefix(p, "/index/")] != nil:
			w.Write(index[strings.TrimPrefix(p, "/index/")])
		case crates[p] != nil:
			w.Write(crates[p])
		default:
			http.NotFound(w, r)
		}
	}))
	ts.Defer(srv.Close)
	ts.Setenv(args[0], "sparse+"+srv.URL+"/index/")
}

// indexPath is where a sparse index keeps a crate's entries.
func indexPath(name string) string {
	n := strings.ToLower(name)
	switch len(n) {
	case 1:
		return "1/" + n
	case 2:
		return "2/" + n
	case 3:
		return "3/" + n[:1] + "/" + n
	}
	return n[:2] + "/" + n[2:4] + "/" + n
}

// rustToolchain puts the Rust toolchain's own bin directory (rustc
// --print sysroot, asked with the test's environment) first on the
// script's PATH; a script guards it with [exec:rustc]. ~/.cargo/bin holds
// rustup's proxies, which need rustup's home; the sandbox mounts the
// toolchain itself (docs/sandbox.md).
func rustToolchain(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: rusttoolchain")
	}
	out, err := exec.Command("rustc", "--print", "sysroot").Output()
	if err != nil {
		ts.Fatalf("no rust toolchain: %v", err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "bin")
	if _, err := os.Stat(filepath.Join(bin, "cargo")); err != nil {
		ts.Fatalf("no cargo beside rustc: %v", err)
	}
	ts.Setenv("PATH", bin+string(os.PathListSeparator)+ts.Getenv("PATH"))
}

// wheel FILE MODULE writes a pure-Python wheel FILE
// (NAME-VERSION-py3-none-any.whl) holding the module file MODULE, so a
// script can fill a wheelhouse offline.
func wheel(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: wheel FILE.whl MODULE.py")
	}
	parts := strings.Split(filepath.Base(args[0]), "-")
	if len(parts) < 2 {
		ts.Fatalf("%s: want NAME-VERSION-py3-none-any.whl", args[0])
	}
	name, vers := parts[0], parts[1]
	mod, err := os.ReadFile(ts.MkAbs(args[1]))
	ts.Check(err)
	info := name + "-" + vers + ".dist-info/"
	files := []struct {
		name string
		data []byte
	}{
		{filepath.Base(args[1]), mod},
		{info + "METADATA", []byte("Metadata-Version: 2.1\nName: " + name + "\nVersion: " + vers + "\n")},
		{info + "WHEEL", []byte("Wheel-Version: 1.0\nGenerator: fluffy-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")},
	}
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := z.Create(f.name)
		ts.Check(err)
		_, err = w.Write(f.data)
		ts.Check(err)
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	record.WriteString(info + "RECORD,,\n")
	w, err := z.Create(info + "RECORD")
	ts.Check(err)
	_, err = w.Write([]byte(record.String()))
	ts.Check(err)
	ts.Check(z.Close())
	ts.Check(os.MkdirAll(filepath.Dir(ts.MkAbs(args[0])), 0o755))
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), buf.Bytes(), 0o644))
}

// npmRegistry VAR TARBALL... serves the package tarballs (npm pack's
// NAME-VERSION.tgz, dependency-free) as an npm registry on the host's
// 127.0.0.1 for the rest of the script, and sets VAR to its URL, so a
// script can fill an npm cache the way a person's npm does.
func npmRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: npmregistry VAR TARBALL...")
	}
	type version struct {
		name, vers, file string
		data             []byte
	}
	var pkgs []version
	for _, f := range args[1:] {
		data, err := os.ReadFile(ts.MkAbs(f))
		ts.Check(err)
		base := strings.TrimSuffix(filepath.Base(f), ".tgz")
		i := strings.LastIndex(base, "-")
		if i <= 0 {
			ts.Fatalf("%s: want NAME-VERSION.tgz", f)
		}
		pkgs = append(pkgs, version{base[:i], base[i+1:], filepath.Base(f), data})
	}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range pkgs {
			switch r.URL.Path {
			case "/" + p.name:
				s512, s1 := sha512.Sum512(p.data), sha1.Sum(p.data)
				doc := map[string]any{"name": p.name, "dist-tags": map[string]string{"latest": p.vers}, "versions": map[string]any{p.vers: map[string]any{
					"name": p.name, "version": p.vers,
					"dist": map[string]string{"tarball": srv.URL + "/" + p.name + "/-/" + p.file, "integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]), "shasum": hex.EncodeToString(s1[:])},
				}}}
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(doc)
				return
			case "/" + p.name + "/-/" + p.file:
				w.Write(p.data)
				return
			}
		}
		http.NotFound(w, r)
	}))
	ts.Defer(srv.Close)
	ts.Setenv(args[0], srv.URL+"/")
}
