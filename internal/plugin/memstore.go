package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// MemStore is a Store in memory: a plugin on trial ('fluffy plugin
// test', which writes nothing to fluffy.db) and tests. Safe for
// concurrent use.
type MemStore struct {
	mu   sync.Mutex
	recs map[string]Record
	pins map[string][]ToolPin
}

// NewMemStore holds recs, keyed by their manifest's name.
func NewMemStore(recs ...Record) *MemStore {
	s := &MemStore{recs: map[string]Record{}, pins: map[string][]ToolPin{}}
	for _, r := range recs {
		s.recs[r.Manifest.Name] = r
	}
	return s
}

// Put adds or replaces a record (keyed by its manifest's name).
func (s *MemStore) Put(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[r.Manifest.Name] = r
}

// List returns the records in name order.
func (s *MemStore) List(context.Context) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Manifest.Name, b.Manifest.Name) })
	return out, nil
}

// Get returns a record; ErrNotFound when there is none of that name.
func (s *MemStore) Get(_ context.Context, name string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[name]
	if !ok {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return r, nil
}

// SetState records a plugin's state and why.
func (s *MemStore) SetState(_ context.Context, name string, st State, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	r.State, r.Reason = st, reason
	s.recs[name] = r
	return nil
}

// PinTools replaces a plugin's pinned tools.
func (s *MemStore) PinTools(_ context.Context, name string, pins []ToolPin) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pins[name] = slices.Clone(pins)
	return nil
}

// Pins returns a plugin's pinned tools in name order.
func (s *MemStore) Pins(_ context.Context, name string) ([]ToolPin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.pins[name])
	slices.SortFunc(out, func(a, b ToolPin) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
