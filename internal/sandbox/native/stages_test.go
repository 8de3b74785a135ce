package native

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// TestTraceStages is a measuring tool, not a check: with
// FLUFFY_TRACE_STAGES=N it runs /bin/true N times with a trace and prints
// the median time of every stage (parent and init merged, in order), so a
// change to one stage can be seen apart from the load on the machine.
// FLUFFY_TRACE_WORKSPACE=1 adds a workspace overlay; FLUFFY_TRACE_EXEC=1
// starts the init with os/exec instead of vfork; FLUFFY_TRACE_NONETNS=1
// makes each direct start's network namespace in its clone (no pool).
//
//	FLUFFY_TRACE_STAGES=200 go test -run TestTraceStages -v ./internal/sandbox/native/
func TestTraceStages(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FLUFFY_TRACE_STAGES"))
	if n <= 0 {
		t.Skip("set FLUFFY_TRACE_STAGES=N to measure")
	}
	var buf bytes.Buffer
	rt := newRuntime(t, Options{Init: smallInit(t), Trace: &buf, NoNetNSPool: os.Getenv("FLUFFY_TRACE_NONETNS") == "1"})
	rt.noVfork = os.Getenv("FLUFFY_TRACE_EXEC") == "1"
	spec := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 256}}
	var csDir string
	if os.Getenv("FLUFFY_TRACE_WORKSPACE") == "1" {
		spec.Workspace, csDir = t.TempDir(), t.TempDir()
	}
	stages := map[string][]float64{}
	var order []string
	var totals []float64
	for i := range n {
		buf.Reset()
		if csDir != "" {
			spec.ChangeSet = fmt.Sprintf("%s/cs%d", csDir, i)
		}
		if _, err := rt.Run(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(&buf)
		var total float64
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "cpu:") {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			name := strings.Join(f[:len(f)-4], " ")
			d, err := strconv.ParseFloat(f[len(f)-4], 64)
			if err != nil {
				continue
			}
			total, _ = strconv.ParseFloat(f[len(f)-2], 64)
			if _, ok := stages[name]; !ok {
				order = append(order, name)
			}
			stages[name] = append(stages[name], d)
		}
		totals = append(totals, total)
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d runs, median and minimum:\n", n)
	for _, s := range order {
		fmt.Fprintf(&out, "%-48s %8.3f ms %8.3f ms  (%d)\n", s, med(stages[s]), stages[s][0], len(stages[s]))
	}
	fmt.Fprintf(&out, "%-48s %8.3f ms %8.3f ms\n", "total", med(totals), totals[0])
	t.Log(out.String())
}
