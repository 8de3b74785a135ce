package secret

import "unsafe"

// Holds reports whether s's bytes lie in the arena: a runtime tells the
// environment entries that carry a value (env uses, made by String) from
// the others, to keep them off paths that copy to the heap.
func (a *Arena) Holds(s string) bool {
	if a == nil || len(s) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.maps {
		lo := uintptr(unsafe.Pointer(&m[0]))
		if p >= lo && p < lo+uintptr(len(m)) {
			return true
		}
	}
	return false
}
