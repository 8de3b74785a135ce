package sched

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// FuzzSubmitEdges submits a batch of tasks whose After edges come from
// the input (ids among the batch, a live task, an unknown one). A
// refusal as a cycle must name a real cycle of the batch; an accepted
// batch must have none, and running every task to its end must start
// each only after what it waits for.
func FuzzSubmitEdges(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 2, 0})
	f.Add([]byte{0, 1, 1, 2})
	f.Add([]byte{3, 3})
	f.Add([]byte{0, 9, 4, 8})
	f.Fuzz(func(t *testing.T, edges []byte) {
		if len(edges) > 64 {
			edges = edges[:64]
		}
		s, err := New(Options{Limits: Limits{Global: 2}})
		if err != nil {
			t.Fatal(err)
		}
		// A live task the batch may wait for.
		liveT := submit(t, s, Task{ID: "live"})[0]
		const n = 8
		tasks := make([]Task, n)
		for i := range tasks {
			tasks[i].ID = fmt.Sprintf("n%d", i)
		}
		for i := 0; i+1 < len(edges); i += 2 {
			from, to := int(edges[i])%n, int(edges[i+1])
			switch {
			case to%16 == 8:
				tasks[from].After = append(tasks[from].After, "live")
			case to%16 == 9:
				tasks[from].After = append(tasks[from].After, "unknown")
			default:
				tasks[from].After = append(tasks[from].After, tasks[to%n].ID)
			}
		}
		ts, err := s.Submit(tasks...)
		hasCycle := cyclic(tasks)
		var ce *CycleError
		switch {
		case errors.As(err, &ce):
			if !hasCycle {
				t.Fatalf("refused as a cycle %v, but the batch has none: %v", ce.Path, tasks)
			}
			checkPath(t, tasks, ce.Path)
			lease(t, liveT).Release()
			return
		case errors.Is(err, ErrUnknownDependency):
			lease(t, liveT).Release()
			return
		case err != nil:
			t.Fatal(err)
		case hasCycle:
			t.Fatalf("accepted a cyclic batch %v", tasks)
		}
		ended := map[string]bool{}
		pending := append([]*Ticket{liveT}, ts...)
		for len(pending) > 0 {
			progressed := false
			for i := 0; i < len(pending); i++ {
				tk := pending[i]
				if !started(tk) {
					continue
				}
				for _, d := range tk.e.t.After {
					if !ended[d] {
						t.Fatalf("%s started before %s ended", tk.ID(), d)
					}
				}
				lease(t, tk).Release()
				ended[tk.ID()] = true
				pending = slices.Delete(pending, i, i+1)
				i--
				progressed = true
			}
			if !progressed {
				t.Fatalf("stuck with %d tasks", len(pending))
			}
		}
	})
}

// cyclic is an independent check (Kahn's algorithm) for a cycle.
func cyclic(tasks []Task) bool {
	idx := map[string]int{}
	for i, t := range tasks {
		idx[t.ID] = i
	}
	indeg := make([]int, len(tasks))
	out := make([][]int, len(tasks))
	for i, t := range tasks {
		for _, d := range t.After {
			if j, ok := idx[d]; ok {
				indeg[i]++
				out[j] = append(out[j], i)
			}
		}
	}
	var q []int
	for i, d := range indeg {
		if d == 0 {
			q = append(q, i)
		}
	}
	seen := 0
	for len(q) > 0 {
		i := q[0]
		q = q[1:]
		seen++
		for _, j := range out[i] {
			if indeg[j]--; indeg[j] == 0 {
				q = append(q, j)
			}
		}
	}
	return seen < len(tasks)
}

// checkPath checks that path is a cycle of tasks' edges.
func checkPath(t *testing.T, tasks []Task, path []string) {
	t.Helper()
	if len(path) < 2 || path[0] != path[len(path)-1] {
		t.Fatalf("not a closed path: %v", path)
	}
	after := map[string][]string{}
	for _, x := range tasks {
		after[x.ID] = x.After
	}
	for i := 0; i+1 < len(path); i++ {
		if !slices.Contains(after[path[i]], path[i+1]) {
			t.Fatalf("path %v: %s does not wait for %s", path, path[i], path[i+1])
		}
	}
}
