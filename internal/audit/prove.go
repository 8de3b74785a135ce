package audit

import (
	"context"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
)

// InclusionProof shows that an entry is in the tree a checkpoint signs.
type InclusionProof struct {
	Entry Entry
	// Body is the entry's canonical bytes; LeafIndex is Seq-1.
	Body      []byte
	LeafIndex uint64
	// Chain is the entry's chain hash (the Merkle leaf data).
	Chain      []byte
	Checkpoint Checkpoint
	// Hashes are the RFC 6962 inclusion proof, leaf to root.
	Hashes [][]byte
}

// Prove builds the inclusion proof of entry seq against the newest stored
// checkpoint covering it (or cp, when not nil), and checks it against the
// checkpoint's signed root before returning it.
func (r *Reader) Prove(ctx context.Context, seq uint64, vkey string, cp *Checkpoint) (InclusionProof, error) {
	var p InclusionProof
	if cp == nil {
		c, err := r.NewestCheckpoint(ctx, vkey)
		if err != nil {
			return p, err
		}
		cp = &c
	}
	if seq == 0 || seq > cp.Size {
		return p, fmt.Errorf("audit: entry %d is not covered by the checkpoint at size %d (wait for the next checkpoint, or run 'fluffy audit verify')", seq, cp.Size)
	}
	anchor, err := r.metaUint(ctx, "anchor")
	if err != nil {
		return p, err
	}
	if seq <= anchor {
		return p, fmt.Errorf("audit: entry %d was pruned (the log starts after %d)", seq, anchor)
	}
	// Leaves after the anchor, and the anchor's compact range for the
	// nodes before it.
	var leaves [][]byte
	err = r.rows(ctx, anchor+1, func(rw row) error {
		if rw.seq > cp.Size {
			return errStop
		}
		if rw.seq != anchor+uint64(len(leaves))+1 {
			return fmt.Errorf("audit: entry %d missing (run 'fluffy audit verify')", anchor+uint64(len(leaves))+1)
		}
		if rw.seq == seq {
			p.Body, p.Chain = append([]byte(nil), rw.body...), rw.hash
		}
		leaves = append(leaves, leafHash(rw.hash))
		return nil
	})
	if err != nil && err != errStop {
		return p, err
	}
	if uint64(len(leaves)) != cp.Size-anchor {
		return p, fmt.Errorf("audit: the log has %d entries, the checkpoint %d (run 'fluffy audit verify')", anchor+uint64(len(leaves)), cp.Size)
	}
	known := map[compact.NodeID][]byte{}
	if anchor > 0 {
		var packed []byte
		if err := r.db.QueryRowContext(ctx, `SELECT range FROM checkpoints WHERE size = ?`, int64(anchor)).Scan(&packed); err != nil {
			return p, fmt.Errorf("audit: read anchor: %w", err)
		}
		ids := compact.RangeNodes(0, anchor, nil)
		if len(packed) != len(ids)*HashSize {
			return p, fmt.Errorf("audit: anchor range has %d bytes, want %d", len(packed), len(ids)*HashSize)
		}
		for i, id := range ids {
			known[id] = packed[i*HashSize : (i+1)*HashSize]
		}
	}
	var node func(id compact.NodeID) ([]byte, error)
	node = func(id compact.NodeID) ([]byte, error) {
		if h, ok := known[id]; ok {
			return h, nil
		}
		begin, end := id.Coverage()
		switch {
		case id.Level == 0 && begin >= anchor:
			return leaves[begin-anchor], nil
		case end <= anchor || id.Level == 0:
			return nil, fmt.Errorf("audit: node %v lies in the pruned part of the tree", id)
		}
		l, err := node(compact.NewNodeID(id.Level-1, id.Index*2))
		if err != nil {
			return nil, err
		}
		rt, err := node(compact.NewNodeID(id.Level-1, id.Index*2+1))
		if err != nil {
			return nil, err
		}
		h := hasher.HashChildren(l, rt)
		known[id] = h
		return h, nil
	}
	nodes, err := proof.Inclusion(seq-1, cp.Size)
	if err != nil {
		return p, fmt.Errorf("audit: %w", err)
	}
	hs := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		if hs[i], err = node(id); err != nil {
			return p, err
		}
	}
	if p.Hashes, err = nodes.Rehash(hs, hasher.HashChildren); err != nil {
		return p, fmt.Errorf("audit: %w", err)
	}
	if p.Entry, err = ParseEntry(p.Body); err != nil {
		return p, err
	}
	p.LeafIndex, p.Checkpoint = seq-1, *cp
	if err := VerifyInclusion(p); err != nil {
		return p, err
	}
	return p, nil
}

// VerifyInclusion checks an inclusion proof: the chain hash is the leaf,
// and the proof leads from it to the checkpoint's root. (That the chain
// hash belongs to the entry's bytes needs the previous chain hash; see
// docs/audit.md.)
func VerifyInclusion(p InclusionProof) error {
	if err := proof.VerifyInclusion(hasher, p.LeafIndex, p.Checkpoint.Size, leafHash(p.Chain), p.Hashes, p.Checkpoint.Root); err != nil {
		return fmt.Errorf("audit: inclusion proof of entry %d: %w", p.LeafIndex+1, err)
	}
	return nil
}

type stopError struct{}

func (stopError) Error() string { return "stop" }

var errStop error = stopError{}
