package audit

import (
	"crypto"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
)

// ChainDomain prefixes every chain hash input, so a chain hash can never
// be confused with a Merkle node hash (prefix 0x00 or 0x01) or with a hash
// made for another purpose.
const ChainDomain = "fluffy-audit-chain-v1\x00"

// HashSize is the size of every hash in the log (SHA-256).
const HashSize = sha256.Size

// chainHash returns SHA-256(ChainDomain || prev || uint64be(seq) || body).
func chainHash(prev []byte, seq uint64, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(ChainDomain))
	h.Write(prev)
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	h.Write(s[:])
	h.Write(body)
	return h.Sum(nil)
}

// chainer computes chain hashes with one reusable SHA-256 state, for the
// verification loop.
type chainer struct {
	h   hash.Hash
	seq [8]byte
}

func newChainer() *chainer { return &chainer{h: sha256.New()} }

func (c *chainer) sum(prev []byte, seq uint64, body []byte) []byte {
	c.h.Reset()
	c.h.Write([]byte(ChainDomain))
	c.h.Write(prev)
	binary.BigEndian.PutUint64(c.seq[:], seq)
	c.h.Write(c.seq[:])
	c.h.Write(body)
	return c.h.Sum(make([]byte, 0, HashSize))
}

// zeroHash is the chain hash before the first entry.
var zeroHash = make([]byte, HashSize)

var hasher = rfc6962.New(crypto.SHA256)

// leafHash is the RFC 6962 leaf hash of an entry: SHA-256(0x00 || chain hash).
// It gives what hasher.HashLeaf gives, without allocating a hash state
// for the usual HashSize-byte input.
func leafHash(chain []byte) []byte {
	if len(chain) != HashSize {
		return hasher.HashLeaf(chain)
	}
	var b [1 + HashSize]byte
	b[0] = rfc6962.RFC6962LeafHashPrefix
	copy(b[1:], chain)
	s := sha256.Sum256(b[:])
	return s[:]
}

// hashChildren is the RFC 6962 node hash SHA-256(0x01 || l || r): what
// hasher.HashChildren gives, without allocating a hash state for the usual
// HashSize-byte inputs.
func hashChildren(l, r []byte) []byte {
	if len(l) != HashSize || len(r) != HashSize {
		return hasher.HashChildren(l, r)
	}
	var b [1 + 2*HashSize]byte
	b[0] = rfc6962.RFC6962NodeHashPrefix
	copy(b[1:], l)
	copy(b[1+HashSize:], r)
	s := sha256.Sum256(b[:])
	return s[:]
}

var rangeFactory = compact.RangeFactory{Hash: hashChildren}

// newRange returns the compact Merkle range [0, size) from its stored node
// hashes (concatenated, HashSize bytes each).
func newRange(size uint64, packed []byte) (*compact.Range, error) {
	if len(packed)%HashSize != 0 {
		return nil, fmt.Errorf("audit: compact range of %d bytes is not a multiple of %d", len(packed), HashSize)
	}
	var hs [][]byte
	for i := 0; i < len(packed); i += HashSize {
		hs = append(hs, packed[i:i+HashSize:i+HashSize])
	}
	r, err := rangeFactory.NewRange(0, size, hs)
	if err != nil {
		return nil, fmt.Errorf("audit: compact range for size %d: %w", size, err)
	}
	return r, nil
}

func packRange(r *compact.Range) []byte {
	var b []byte
	for _, h := range r.Hashes() {
		b = append(b, h...)
	}
	return b
}

// rootOf returns the RFC 6962 root of a range starting at 0.
func rootOf(r *compact.Range) []byte {
	if r.End() == 0 {
		return hasher.EmptyRoot()
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		// GetRootHash fails only for ranges not starting at 0.
		panic(fmt.Sprintf("audit: root of range [%d,%d): %v", r.Begin(), r.End(), err))
	}
	return root
}

func cloneRange(r *compact.Range) *compact.Range {
	hs := make([][]byte, 0, len(r.Hashes()))
	for _, h := range r.Hashes() {
		hs = append(hs, append([]byte(nil), h...))
	}
	c, _ := rangeFactory.NewRange(r.Begin(), r.End(), hs)
	return c
}
