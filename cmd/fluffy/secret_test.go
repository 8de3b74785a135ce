package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["procmem"] = procMem
}

// procMem is the script command "procmem PID FILE": it succeeds when the
// content of FILE (a secret's value; one trailing newline is not part of
// it) is in the memory of process PID, searched through /proc/PID/mem in
// every readable mapping. "! procmem" asserts it is nowhere.
func procMem(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: procmem PID FILE")
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("procmem: pid %q", args[0])
	}
	needle := bytes.TrimSuffix([]byte(ts.ReadFile(args[1])), []byte("\n"))
	if len(needle) < 8 {
		ts.Fatalf("procmem: %s holds fewer than 8 bytes", args[1])
	}
	mem, err := os.Open("/proc/" + args[0] + "/mem")
	ts.Check(err)
	defer mem.Close()
	n := 0
	for _, r := range residentRegions(ts, args[0]) {
		buf := make([]byte, r.end-r.start)
		m, _ := mem.ReadAt(buf, int64(r.start))
		c := bytes.Count(buf[:m], needle)
		n += c
		// Where a value is left says who left it: a failure shows it
		// without a rerun (a flake seen once in CI may not come back).
		if c > 0 && (neg || os.Getenv("PROCMEM_DEBUG") != "") {
			for i := 0; ; {
				j := bytes.Index(buf[i:m], needle)
				if j < 0 {
					break
				}
				at := i + j
				ts.Logf("at %x in %s: %q", r.start+uint64(at), r.line, buf[max(0, at-64):min(m, at+len(needle)+256)])
				i = at + 1
			}
		}
	}
	ts.Logf("procmem: %d occurrence(s) in process %d", n, pid)
	if neg && n > 0 {
		ts.Fatalf("the value is in process %d's memory %d time(s)", pid, n)
	}
	if !neg && n == 0 {
		ts.Fatalf("the value is not in process %d's memory", pid)
	}
}

type region struct {
	start, end uint64
	line       string
}

// residentRegions are the readable mappings of process pid that have
// pages in memory (smaps' Rss above 0): the others read as zeros.
func residentRegions(ts *testscript.TestScript, pid string) []region {
	smaps, err := os.ReadFile("/proc/" + pid + "/smaps")
	ts.Check(err)
	var out []region
	var cur *region
	readable := false
	for line := range strings.SplitSeq(string(smaps), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			cur = nil
			readable = err1 == nil && err2 == nil && f[1][0] == 'r' && !(len(f) >= 6 && strings.HasPrefix(f[5], "[v"))
			if readable {
				cur = &region{start: start, end: end, line: line}
			}
			continue
		}
		if cur != nil && len(f) >= 2 && f[0] == "Rss:" && f[1] != "0" {
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}
