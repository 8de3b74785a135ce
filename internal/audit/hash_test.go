package audit

import (
	"bytes"
	"crypto/rand"
	"testing"
)

// The allocation-free leafHash and hashChildren give exactly what the
// RFC 6962 hasher gives, for hash-sized and other inputs.
func TestHashesMatchRFC6962(t *testing.T) {
	for _, n := range []int{0, 1, HashSize - 1, HashSize, HashSize + 1, 100} {
		for i := 0; i < 20; i++ {
			a, b := make([]byte, n), make([]byte, HashSize)
			rand.Read(a)
			rand.Read(b)
			if got, want := leafHash(a), hasher.HashLeaf(a); !bytes.Equal(got, want) {
				t.Fatalf("leafHash(%d bytes) = %x, want %x", n, got, want)
			}
			for _, p := range [][2][]byte{{a, b}, {b, a}, {a, a}, {b, b}} {
				if got, want := hashChildren(p[0], p[1]), hasher.HashChildren(p[0], p[1]); !bytes.Equal(got, want) {
					t.Fatalf("hashChildren(%d, %d bytes) = %x, want %x", len(p[0]), len(p[1]), got, want)
				}
			}
		}
	}
}
