package skill

import (
	"fmt"
	"slices"
	"strings"
)

// ChangeKind names how a manifest change widens what a skill may do.
type ChangeKind string

// The ways a manifest widens.
const (
	HostAdded             ChangeKind = "host-added"
	CredentialAdded       ChangeKind = "credential-added"
	CredentialChanged     ChangeKind = "credential-changed"
	ClassificationRemoved ChangeKind = "classification-removed"
	SandboxLoosened       ChangeKind = "sandbox-loosened"
	EntrypointAdded       ChangeKind = "entrypoint-added"
	EntrypointChanged     ChangeKind = "entrypoint-changed"
	ImageChanged          ChangeKind = "image-changed"
)

// Change is one way a new manifest widens an old one.
type Change struct {
	Kind ChangeKind `json:"kind"`
	// What names the host, credential, classification, limit or
	// entrypoint, with the old and new values where both exist.
	What string `json:"what"`
}

func (c Change) String() string { return string(c.Kind) + ": " + c.What }

// Widening lists how next widens prev: hosts and credentials added (or a
// credential bound to more hosts or entering another way), classification
// hints removed (policy sees less caution), the sandbox loosened (another
// template or runtime, a limit raised or lifted), entrypoints added or
// their commands changed, the image changed. Narrowing is not listed. The
// order is stable: by kind as above, then by what.
func Widening(prev, next Manifest) []Change {
	var out []Change
	add := func(k ChangeKind, format string, args ...any) {
		out = append(out, Change{Kind: k, What: fmt.Sprintf(format, args...)})
	}
	for _, h := range next.Network {
		if !slices.Contains(prev.Network, h) {
			add(HostAdded, "%s", h)
		}
	}
	for _, c := range next.Credentials {
		i := slices.IndexFunc(prev.Credentials, func(o Credential) bool { return o.Ref == c.Ref })
		if i < 0 {
			add(CredentialAdded, "%s", credentialLine(c))
			continue
		}
		o := prev.Credentials[i]
		var more []string
		for _, h := range c.Bind {
			if !slices.Contains(o.Bind, h) {
				more = append(more, h)
			}
		}
		switch {
		case o.As != c.As || o.Name != c.Name:
			add(CredentialChanged, "%s (was %s)", credentialLine(c), credentialLine(o))
		case len(more) > 0:
			add(CredentialChanged, "%s now also sent to %s", c.Ref, strings.Join(more, ", "))
		}
	}
	for _, h := range prev.Classification {
		if !slices.Contains(next.Classification, h) {
			add(ClassificationRemoved, "%s", h)
		}
	}
	out = append(out, sandboxWidening(prev.Sandbox, next.Sandbox)...)
	for _, e := range next.Entrypoints {
		i := slices.IndexFunc(prev.Entrypoints, func(o Entrypoint) bool { return o.Name == e.Name })
		switch {
		case i < 0:
			add(EntrypointAdded, "%s: %s", e.Name, strings.Join(e.Command, " "))
		case !slices.Equal(prev.Entrypoints[i].Command, e.Command):
			add(EntrypointChanged, "%s: %s (was %s)", e.Name, strings.Join(e.Command, " "), strings.Join(prev.Entrypoints[i].Command, " "))
		}
	}
	if prev.Image.Dockerfile != next.Image.Dockerfile {
		add(ImageChanged, "dockerfile %s (was %s)", orDefault(next.Image.Dockerfile), orDefault(prev.Image.Dockerfile))
	}
	slices.SortStableFunc(out, func(a, b Change) int {
		if a.Kind != b.Kind {
			return slices.Index(kindOrder, a.Kind) - slices.Index(kindOrder, b.Kind)
		}
		return strings.Compare(a.What, b.What)
	})
	return out
}

var kindOrder = []ChangeKind{HostAdded, CredentialAdded, CredentialChanged, ClassificationRemoved, SandboxLoosened, EntrypointAdded, EntrypointChanged, ImageChanged}

func sandboxWidening(prev, next Sandbox) []Change {
	var out []Change
	loose := func(format string, args ...any) {
		out = append(out, Change{Kind: SandboxLoosened, What: fmt.Sprintf(format, args...)})
	}
	if prev.Template != next.Template {
		loose("template %s (was %s)", orDefault(next.Template), orDefault(prev.Template))
	}
	if prev.Runtime != next.Runtime {
		loose("runtime %s (was %s)", orDefault(next.Runtime), orDefault(prev.Runtime))
	}
	// Zero is the template's default, which may be larger than any
	// stated limit: dropping a limit loosens it.
	if raised(int64(prev.Memory), int64(next.Memory)) {
		loose("memory %s (was %s)", limit(next.Memory.String(), next.Memory == 0), limit(prev.Memory.String(), prev.Memory == 0))
	}
	if raised(int64(prev.Timeout), int64(next.Timeout)) {
		loose("timeout %s (was %s)", limit(next.Timeout.String(), next.Timeout == 0), limit(prev.Timeout.String(), prev.Timeout == 0))
	}
	if raised(int64(prev.PIDs), int64(next.PIDs)) {
		loose("pids %s (was %s)", limit(fmt.Sprint(next.PIDs), next.PIDs == 0), limit(fmt.Sprint(prev.PIDs), prev.PIDs == 0))
	}
	return out
}

// raised: a stated limit went up, or was dropped (0: the default).
func raised(prev, next int64) bool {
	return prev != 0 && (next == 0 || next > prev)
}

func limit(s string, dflt bool) string {
	if dflt {
		return "the default"
	}
	return s
}

func orDefault(s string) string {
	if s == "" {
		return "the default"
	}
	return s
}

func credentialLine(c Credential) string {
	s := c.Ref + " as " + orDefault(c.As)
	if c.Name != "" {
		s += " " + c.Name
	}
	if len(c.Bind) > 0 {
		s += " for " + strings.Join(c.Bind, ", ")
	}
	return s
}

// WideningSummary is the flag a person sees on a change that widens a
// skill: one headline and a line per change; "" when nothing widens.
func WideningSummary(name string, changes []Change) string {
	if len(changes) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "WIDENS skill %s:\n", name)
	for _, c := range changes {
		b.WriteString("  + " + c.String() + "\n")
	}
	return b.String()
}

// IsManifestFile reports whether base is a file name a skill's manifest
// is read from (skill.yaml, carapace.yaml).
func IsManifestFile(base string) bool { return slices.Contains(manifestFiles, base) }

// EffectiveManifest is the manifest a folder's files give, as discovery
// reads it: skill.yaml, else carapace.yaml, else none (the zero
// Manifest). read returns a file's contents and whether it exists.
func EffectiveManifest(read func(name string) ([]byte, bool, error)) (Manifest, error) {
	for _, n := range manifestFiles {
		b, ok, err := read(n)
		if err != nil {
			return Manifest{}, err
		}
		if ok {
			return decodeManifest(n, b)
		}
	}
	return Manifest{}, nil
}
