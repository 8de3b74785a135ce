package memory

import "testing"

func TestVecTableDropPath(t *testing.T) {
	v := newVecTable()
	v.put(1, "a.md", "", []float32{1, 0})
	v.put(2, "b.md", "", []float32{0, 1})
	v.put(3, "a.md", "", []float32{1, 1})
	v.putBlob(4, "c.md", "", encodeVec([]float32{2, 2}))
	v.put(5, "x.md", "", []float32{1, 2, 3}) // another length: dropped
	v.dropPath("a.md")
	if v.len() != 2 || v.has(1) || v.has(3) || v.has(5) {
		t.Fatalf("after the drop: %v", v.ids)
	}
	want := map[int64][]float32{2: {0, 1}, 4: {2, 2}}
	for id, w := range want {
		s, ok := v.slot[id]
		if !ok || v.ids[s] != id {
			t.Fatalf("%d: slot %d", id, s)
		}
		if r := v.row(s); r[0] != w[0] || r[1] != w[1] {
			t.Errorf("%d: row %v, want %v", id, r, w)
		}
	}
	v.put(2, "b.md", "", []float32{5, 5})
	if r := v.row(v.slot[2]); r[0] != 5 || v.len() != 2 {
		t.Errorf("replace: %v", r)
	}
}
