package tool

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/spell"
)

// ErrUnknownTool: the model called a tool the registry does not hold.
var ErrUnknownTool = errors.New("unknown tool")

// Registry holds the tools a session can call. Safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	// mu guards the fields below.
	byName map[string]*Tool
	byWire map[string]*Tool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]*Tool{}, byWire: map[string]*Tool{}}
}

// WireName is the tool's name as model APIs accept it
// (^[a-zA-Z0-9_-]{1,64}$): dots become double underscores.
func WireName(name string) string { return strings.ReplaceAll(name, ".", "__") }

// Register adds t; a name (or wire name) already taken is an error.
func (r *Registry) Register(t *Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := WireName(t.name)
	if _, ok := r.byName[t.name]; ok {
		return fmt.Errorf("%w: %s registered twice", ErrDefinition, t.name)
	}
	if o, ok := r.byWire[w]; ok {
		return fmt.Errorf("%w: %s and %s share the wire name %s", ErrDefinition, t.name, o.name, w)
	}
	r.byName[t.name] = t
	r.byWire[w] = t
	return nil
}

// Lookup finds a tool by name or wire name. An unknown name is an error
// wrapping ErrUnknownTool that lists the closest names, for the model.
func (r *Registry) Lookup(name string) (*Tool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if t, ok := r.byName[name]; ok {
		return t, nil
	}
	if t, ok := r.byWire[name]; ok {
		return t, nil
	}
	msg := fmt.Sprintf("%q", truncate(name, 64))
	if near := r.nearest(name, 3); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, ", ") + "?"
	}
	return nil, fmt.Errorf("%w %s", ErrUnknownTool, msg)
}

// List returns the tools sorted by name.
func (r *Registry) List() []*Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Tool, 0, len(r.byName))
	for _, t := range r.byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (r *Registry) nearest(name string, n int) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for k := range r.byName {
		d := min(spell.Distance(name, k), spell.Distance(name, WireName(k)))
		if d <= max(2, len(k)/3) {
			cs = append(cs, cand{k, d})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].d != cs[j].d {
			return cs[i].d < cs[j].d
		}
		return cs[i].name < cs[j].name
	})
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].name)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
