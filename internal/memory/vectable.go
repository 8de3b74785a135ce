package memory

import (
	"encoding/binary"
	"math"
	"slices"
)

// vecTable holds one model's chunk vectors in one contiguous slice, so a
// search scans memory in order (a map of slices made the scan several
// times slower at 100k chunks). Not safe for concurrent use: Index.mu
// guards it.
type vecTable struct {
	dim  int
	data []float32 // len(ids) rows of dim
	ids  []int64
	meta []chunkMeta
	slot map[int64]int
}

type chunkMeta struct{ path, day string }

func newVecTable() *vecTable { return &vecTable{slot: map[int64]int{}} }

func (t *vecTable) len() int { return len(t.ids) }

func (t *vecTable) has(id int64) bool {
	_, ok := t.slot[id]
	return ok
}

// put adds or replaces id's vector; a vector of another length than the
// table's first is dropped (a model never mixes lengths).
func (t *vecTable) put(id int64, path, day string, v []float32) {
	if t.dim == 0 {
		t.dim = len(v)
	}
	if len(v) != t.dim || t.dim == 0 {
		return
	}
	if s, ok := t.slot[id]; ok {
		copy(t.data[s*t.dim:], v)
		t.meta[s] = chunkMeta{path, day}
		return
	}
	t.slot[id] = len(t.ids)
	t.ids = append(t.ids, id)
	t.meta = append(t.meta, chunkMeta{path, day})
	t.data = append(t.data, v...)
}

// dropPath removes the vectors of path's chunks (swapping the last row
// into each hole).
func (t *vecTable) dropPath(path string) {
	for s := 0; s < len(t.ids); {
		if t.meta[s].path != path {
			s++
			continue
		}
		last := len(t.ids) - 1
		delete(t.slot, t.ids[s])
		if s != last {
			t.ids[s], t.meta[s] = t.ids[last], t.meta[last]
			copy(t.data[s*t.dim:(s+1)*t.dim], t.data[last*t.dim:])
			t.slot[t.ids[s]] = s
		}
		t.ids, t.meta, t.data = t.ids[:last], t.meta[:last], t.data[:last*t.dim]
	}
}

// row is slot s's vector.
func (t *vecTable) row(s int) []float32 { return t.data[s*t.dim : (s+1)*t.dim : (s+1)*t.dim] }

// putBlob is put for a stored vector (little-endian float32s), decoded
// straight into the table.
func (t *vecTable) putBlob(id int64, path, day string, b []byte) {
	n := len(b) / 4
	if t.dim == 0 {
		t.dim = n
	}
	if n != t.dim || n == 0 || t.has(id) {
		if n == t.dim && n > 0 {
			t.put(id, path, day, decodeVec(b))
		}
		return
	}
	t.slot[id] = len(t.ids)
	t.ids = append(t.ids, id)
	t.meta = append(t.meta, chunkMeta{path, day})
	t.data = slices.Grow(t.data, n)
	for i := range n {
		t.data = append(t.data, math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
}

// grow makes room for n more rows of dim.
func (t *vecTable) grow(n, dim int) {
	t.ids = slices.Grow(t.ids, n)
	t.meta = slices.Grow(t.meta, n)
	t.data = slices.Grow(t.data, n*dim)
}
