package operation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Signature identifies what an operation does, independent of who asked and
// when: tool, action, canonical paths, argv, the command line as written and
// its parsed commands (with their environment assignments, directories and
// redirections), hosts, the digest of the arguments and the content of the
// files it runs. Two operations with the same signature have the same
// effect, so an approval (a capability token binds it) or a classifier
// verdict given for one holds for the other. Size, session, tags and tokens
// are left out on purpose.
func (op Operation) Signature() string {
	type pathSig struct {
		Abs string `json:"a"`
	}
	sig := struct {
		Tool        string    `json:"t"`
		Action      Action    `json:"x"`
		Paths       []pathSig `json:"p,omitempty"`
		Argv        []string  `json:"v,omitempty"`
		CommandLine string    `json:"l,omitempty"`
		Commands    []Command `json:"c,omitempty"`
		Hosts       []Host    `json:"h,omitempty"`
		Args        string    `json:"a,omitempty"`
		Inputs      []Input   `json:"i,omitempty"`
		Unbound     string    `json:"u,omitempty"`
	}{Tool: op.Tool, Action: op.Action, Argv: op.Argv, CommandLine: op.CommandLine, Commands: op.Commands, Hosts: op.Hosts,
		Args: op.ArgsSHA256, Inputs: op.Inputs, Unbound: op.Unbound}
	for _, p := range op.Paths {
		sig.Paths = append(sig.Paths, pathSig{p.Abs})
	}
	// encoding/json of this struct is deterministic: fixed field order,
	// no maps.
	b, _ := json.Marshal(sig)
	h := sha256.Sum256(append([]byte("fluffy.operation.signature.v2\x00"), b...))
	return hex.EncodeToString(h[:])
}
