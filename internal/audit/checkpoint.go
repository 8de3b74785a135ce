package audit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is a signed statement of the log's state at a tree size, in
// the C2SP tlog-checkpoint format inside a C2SP signed note:
//
//	<origin>
//	<tree size>
//	<base64 RFC 6962 root hash>
//	chain <base64 chain hash of entry <tree size>>
//
//	— <key name> <base64 signature>
//
// The extension line binds the hash chain to the Merkle tree, so a
// verifier can resume the chain from any checkpoint.
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   []byte
	Chain  []byte
	// Note is the whole signed note, as stored and exported.
	Note []byte
}

// ErrBadCheckpoint is wrapped by errors about checkpoints that do not
// parse or whose signature does not verify.
var ErrBadCheckpoint = errors.New("checkpoint does not verify")

const chainExt = "chain "

func signCheckpoint(signer note.Signer, size uint64, root, chain []byte) (Checkpoint, error) {
	text := fmt.Sprintf("%s\n%d\n%s\n%s%s\n", signer.Name(), size,
		base64.StdEncoding.EncodeToString(root), chainExt, base64.StdEncoding.EncodeToString(chain))
	msg, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit: sign checkpoint: %w", err)
	}
	return Checkpoint{Origin: signer.Name(), Size: size, Root: root, Chain: chain, Note: msg}, nil
}

// ParseCheckpoint opens a signed checkpoint with the verifier string vkey:
// the note must carry a valid signature by that key, its origin must be
// the key's name, and its body must be exactly the four lines above.
//
// msg may also be the content of the checkpoint file fluffy keeps under
// keys/ (CheckpointFile, two slots): the newest checkpoint in its intact
// slots is returned, and every intact slot must verify.
func ParseCheckpoint(msg []byte, vkey string) (Checkpoint, error) {
	if isWitnessFile(msg) {
		return parseWitness(msg, vkey)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit: verifier key: %w", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(lines) != 4 {
		return Checkpoint{}, fmt.Errorf("%w: %d lines in the body, want 4", ErrBadCheckpoint, len(lines))
	}
	c := Checkpoint{Origin: lines[0], Note: bytes.Clone(msg)}
	if c.Origin != v.Name() {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not the key's name %q", ErrBadCheckpoint, c.Origin, v.Name())
	}
	if c.Size, err = strconv.ParseUint(lines[1], 10, 64); err != nil || strconv.FormatUint(c.Size, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("%w: tree size %q", ErrBadCheckpoint, lines[1])
	}
	if c.Root, err = base64.StdEncoding.DecodeString(lines[2]); err != nil || len(c.Root) != HashSize {
		return Checkpoint{}, fmt.Errorf("%w: root hash %q", ErrBadCheckpoint, lines[2])
	}
	ext, ok := strings.CutPrefix(lines[3], chainExt)
	if c.Chain, err = base64.StdEncoding.DecodeString(ext); !ok || err != nil || len(c.Chain) != HashSize {
		return Checkpoint{}, fmt.Errorf("%w: chain line %q", ErrBadCheckpoint, lines[3])
	}
	return c, nil
}

// checkpointName returns the signer name on a note without verifying it,
// for error messages about foreign logs.
func checkpointOrigin(msg []byte) string {
	origin, _, _ := bytes.Cut(msg, []byte("\n"))
	return string(origin)
}
