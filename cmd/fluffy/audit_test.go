package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["audit-verify-py"] = auditVerifyPy
	scriptCmds["export-cut"] = exportCut
	scriptCmds["cut-tail"] = cutTail
}

// auditVerifyPy ARGS... runs the stand-alone export verifier,
// python3 scripts/audit_verify.py ARGS..., keeping its stdout and stderr for
// the next commands. Scripts guard it with [exec:python3].
func auditVerifyPy(ts *testscript.TestScript, neg bool, args []string) {
	// The test runs in cmd/fluffy.
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "audit_verify.py"))
	ts.Check(err)
	err = ts.Exec("python3", append([]string{script}, args...)...)
	switch {
	case err != nil && !neg:
		ts.Fatalf("audit_verify.py: %v", err)
	case err == nil && neg:
		ts.Fatalf("audit_verify.py accepted the export")
	}
}

// exportCut DIR A plays someone holding an export: it deletes the entries
// up to A from DIR and rewrites anchor.json for the cut (A's chain hash
// and compact Merkle range, recomputed with the formulas of docs/audit.md),
// so that what is left is self-consistent and A is a signed checkpoint.
func exportCut(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: export-cut DIR A")
	}
	dir := ts.MkAbs(args[0])
	cut, err := strconv.ParseUint(args[1], 10, 64)
	ts.Check(err)
	var anchor struct {
		Format string   `json:"format"`
		Origin string   `json:"origin"`
		Size   uint64   `json:"size"`
		Chain  []byte   `json:"chain"`
		Range  [][]byte `json:"range"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "anchor.json"))
	ts.Check(err)
	ts.Check(json.Unmarshal(b, &anchor))
	if anchor.Size != 0 {
		ts.Fatalf("export-cut: the export already starts at %d", anchor.Size)
	}
	entries, err := os.ReadFile(filepath.Join(dir, "entries.jsonl"))
	ts.Check(err)
	lines := bytes.SplitAfter(entries, []byte("\n"))
	if uint64(len(lines)) <= cut {
		ts.Fatalf("export-cut: %d entries, cannot cut at %d", len(lines)-1, cut)
	}
	chain := make([]byte, 32)
	var stack [][]byte // compact range [0, n): the perfect subtrees, largest first
	for i, line := range lines[:cut] {
		n := uint64(i) + 1
		h := sha256.New()
		h.Write([]byte("fluffy-audit-chain-v1\x00"))
		h.Write(chain)
		binary.Write(h, binary.BigEndian, n)
		h.Write(bytes.TrimSuffix(line, []byte("\n")))
		chain = h.Sum(nil)
		leaf := sha256.Sum256(append([]byte{0}, chain...))
		stack = append(stack, leaf[:])
		for m := n - 1; m&1 == 1; m >>= 1 {
			node := sha256.Sum256(append(append([]byte{1}, stack[len(stack)-2]...), stack[len(stack)-1]...))
			stack = append(stack[:len(stack)-2], node[:])
		}
	}
	anchor.Size, anchor.Chain, anchor.Range = cut, chain, stack
	b, err = json.MarshalIndent(anchor, "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(dir, "anchor.json"), append(b, '\n'), 0o600))
	ts.Check(os.WriteFile(filepath.Join(dir, "entries.jsonl"), bytes.Join(lines[cut:], nil), 0o600))
}

// cutTail DIR N deletes the entries after N from the export in DIR (which
// starts at 1) and the checkpoints that cover them, leaving an export that
// is consistent on its own.
func cutTail(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: cut-tail DIR N")
	}
	dir := ts.MkAbs(args[0])
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	entries, err := os.ReadFile(filepath.Join(dir, "entries.jsonl"))
	ts.Check(err)
	lines := bytes.SplitAfter(entries, []byte("\n"))
	if len(lines) <= n {
		ts.Fatalf("cut-tail: %d entries, cannot cut after %d", len(lines)-1, n)
	}
	ts.Check(os.WriteFile(filepath.Join(dir, "entries.jsonl"), bytes.Join(lines[:n], nil), 0o600))
	var cps []struct {
		Size int    `json:"size"`
		Note string `json:"note"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "checkpoints.json"))
	ts.Check(err)
	ts.Check(json.Unmarshal(b, &cps))
	kept := cps[:0]
	for _, c := range cps {
		if c.Size <= n {
			kept = append(kept, c)
		}
	}
	b, err = json.MarshalIndent(kept, "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(dir, "checkpoints.json"), append(b, '\n'), 0o600))
}
