package policy

import (
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// Protected lists what the built-in rules protect. Every path must be
// absolute; give both the configured and the symlink-resolved form when
// they differ (Canonicalize does that).
type Protected struct {
	// Paths may never be written, created, renamed or deleted by the
	// agent, nor named as an argument of a command: the data directory
	// (audit and state databases, keys), the policy and configuration
	// files and directories, fluffy's own binaries.
	Paths []string
	// Secret may not even be read: the keys directory.
	Secret []string
}

// Covers reports whether abs (absolute, canonical) is one of the
// protected or secret paths or lies below one, compared as the built-in
// rules compare them (fold). Change-set apply uses it so that what the
// agent may not write and what may not land in the real tree are the
// same list.
func (p Protected) Covers(abs string) bool {
	return newProtectedSet(p.Paths).covers(abs) || newProtectedSet(p.Secret).covers(abs)
}

// BuiltinRule describes one built-in rule, for explain and the docs.
type BuiltinRule struct {
	ID      string `json:"id"`
	Effect  Effect `json:"effect"`
	Message string `json:"message"`
}

// The built-in rules' ids.
const (
	RuleMalformed      = "builtin.malformed"
	RuleLimits         = "builtin.limits"
	RuleProtectedWrite = "builtin.protected-write"
	RuleProtectedRead  = "builtin.protected-read"
	RuleProtectedArg   = "builtin.protected-argument"
	RuleOutsideWrite   = "builtin.write-outside-workspace"
	RuleUnresolved     = "builtin.unresolved-command"
	// RuleUntrustedMemory holds a memory write (an operation tagged
	// TagMemory that writes) of a session that has read untrusted data
	// for a person, every time: no rule, token or approval "for
	// session" lets it through unasked (AskedEachTime).
	RuleUntrustedMemory = "builtin.untrusted-memory-write"
	// RuleSkillWidening holds a write that widens a skill's manifest
	// (an operation tagged TagSkillWidens: hosts, credentials or
	// entrypoints added, classification hints removed, the sandbox
	// loosened, the image changed) for a person, every time, in every
	// session.
	RuleSkillWidening = "builtin.skill-widening"
)

// TagSkillWidens is the tag the write tools give a write that widens a
// skill's manifest (docs/skills.md).
const TagSkillWidens = "skill.widens"

// TagMemory is the tag of the tools that write the assistant's memory
// (memory.write).
const TagMemory = "memory"

// AskedEachTime reports whether an operation decided by rule needs a
// person's approval at every call: an approval "for session" or a
// capability token never covers it.
func AskedEachTime(rule string) bool { return rule == RuleUntrustedMemory || rule == RuleSkillWidening }

// Builtins returns the built-in rules. They cannot be disabled; an approve
// built-in is a floor (a YAML rule can make the atom block, never allow).
func Builtins() []BuiltinRule {
	return []BuiltinRule{
		{RuleMalformed, Block, "the operation is malformed (NUL byte, relative or unclean path, unknown action); nothing malformed runs"},
		{RuleLimits, Block, "the operation is larger than fluffy analyses (path, argument or command line too long, too many parts)"},
		{RuleProtectedWrite, Block, "the agent may never write or delete fluffy's policy, configuration, audit and state databases, keys or binaries"},
		{RuleProtectedRead, Block, "the agent may never read fluffy's keys"},
		{RuleProtectedArg, Block, "a command may not name fluffy's protected files"},
		{RuleOutsideWrite, Block, "writes outside the workspace are not allowed"},
		{RuleUnresolved, Approve, "the command cannot be resolved statically (a variable, substitution, eval, source, a script or stdin, or unparseable text): a person must look at it"},
		{RuleUntrustedMemory, Approve, "a session that has read untrusted data writes the assistant's memory only with a person's approval of that write: no rule allows it, no approval for the session or token covers it"},
		{RuleSkillWidening, Approve, "a write that widens what a skill may reach, hold or run needs a person's approval of that write, every time"},
		{RuleExecCapable, Approve, "the command is told to run code the policy cannot see (an inline script, an expression language, an editor command); only an allow rule with exec_capable: true covers it"},
	}
}

func builtinMessage(id string) string {
	for _, b := range Builtins() {
		if b.ID == id {
			return b.Message
		}
	}
	return id
}

// Input limits: beyond them the operation is blocked, never truncated.
const (
	maxPathLen  = 4096
	maxArgLen   = 128 << 10
	maxArgvLen  = 1 << 20
	maxParts    = 4096
	maxToolLen  = 128
	maxStrField = 4096
)

// fold maps a path to the form protected paths are compared in: Unicode
// compatibility-normalized (NFKC: "ﬂ" is "fl", fullwidth letters are
// ASCII), lower-cased, and with trailing dots and spaces of each component
// removed. It is deliberately wider than Linux's byte equality: a file
// system that folds case or normalizes Unicode (macOS, a mounted FAT or
// SMB share) must not open a way around the protection.
func fold(p string) string {
	if foldClean(p) {
		return p
	}
	return foldSlow(p)
}

func foldSlow(p string) string {
	if !utf8.ValidString(p) {
		p = strings.ToValidUTF8(p, "\uFFFD")
	}
	p = strings.ToLower(norm.NFKC.String(p))
	if !strings.ContainsAny(p, ". ") {
		return p
	}
	parts := strings.Split(p, "/")
	for i, c := range parts {
		if c == "." || c == ".." {
			continue
		}
		if t := strings.TrimRight(c, ". "); t != "" {
			parts[i] = t
		}
	}
	return strings.Join(parts, "/")
}

// foldClean reports whether fold(p) == p without computing it: ASCII, no
// upper case, no component ending in a dot or a space.
func foldClean(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= 0x80 || c >= 'A' && c <= 'Z' {
			return false
		}
		if (c == '.' || c == ' ') && (i+1 == len(p) || p[i+1] == '/') {
			// "." and ".." components are left alone by fold.
			if c == '.' && (i == 0 || p[i-1] == '/' || p[i-1] == '.' && (i == 1 || p[i-2] == '/')) {
				continue
			}
			return false
		}
	}
	return true
}

// protectedSet is a list of folded, cleaned absolute paths.
type protectedSet []string

func newProtectedSet(paths []string) protectedSet {
	var s protectedSet
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		s = append(s, fold(filepath.Clean(p)))
	}
	return s
}

// covers reports whether abs (canonical) is a protected path or below one.
func (s protectedSet) covers(abs string) bool {
	if len(s) == 0 {
		return false
	}
	f := fold(abs)
	for _, p := range s {
		if within(f, p) {
			return true
		}
	}
	return false
}

// hasDotDot reports whether a relative path has a ".." component.
func hasDotDot(p string) bool {
	return p == ".." || strings.HasPrefix(p, "../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/../")
}

// touches reports whether a protected path lies inside dir, or dir inside
// a protected path.
func (s protectedSet) touches(dir string) bool {
	f := fold(dir)
	for _, p := range s {
		if within(p, f) || within(f, p) {
			return true
		}
	}
	return false
}

// malformed checks the operation as a whole. It returns the rule id and a
// detail, or "".
func malformed(op *operation.Operation) (string, string) {
	if len(op.Tool) > maxToolLen {
		return RuleLimits, "tool name too long"
	}
	if op.Tool == "" || hasNUL(op.Tool) {
		return RuleMalformed, "missing or invalid tool name"
	}
	if !op.Action.Valid() {
		return RuleMalformed, "unknown action " + quoteArgv([]string{string(op.Action)})
	}
	if len(op.Paths)+len(op.Hosts)+len(op.Commands) > maxParts || len(op.Argv) > maxParts {
		return RuleLimits, "too many paths, hosts or commands"
	}
	if len(op.CommandLine) > shell.MaxLine {
		return RuleLimits, "command line too long"
	}
	if hasNUL(op.CommandLine) {
		return RuleMalformed, "NUL byte in the command line"
	}
	for _, p := range op.Paths {
		if len(p.Abs) > maxPathLen {
			return RuleLimits, "path too long"
		}
		if hasNUL(p.Abs) {
			return RuleMalformed, "NUL byte in a path"
		}
		if !filepath.IsAbs(p.Abs) || filepath.Clean(p.Abs) != p.Abs {
			return RuleMalformed, "path is not canonical: " + quoteArgv([]string{p.Abs})
		}
	}
	total := 0
	check := func(argv []string) (string, string) {
		for _, a := range argv {
			total += len(a)
			if len(a) > maxArgLen || total > maxArgvLen {
				return RuleLimits, "command arguments too long"
			}
			if hasNUL(a) {
				return RuleMalformed, "NUL byte in a command argument"
			}
		}
		return "", ""
	}
	if id, d := check(op.Argv); id != "" {
		return id, d
	}
	for _, c := range op.Commands {
		if id, d := check(c.Argv); id != "" {
			return id, d
		}
		if id, d := check(c.Writes); id != "" {
			return id, d
		}
	}
	for _, h := range op.Hosts {
		if len(h.Name) > 253 || h.Name == "" || hasNUL(h.Name) || strings.ContainsAny(h.Name, "/@ ") || h.Port < 0 || h.Port > 65535 {
			return RuleMalformed, "invalid host"
		}
	}
	for _, s := range []string{op.Session.ID, op.Session.Mode, op.Session.State, op.Session.Workspace} {
		if len(s) > maxStrField || hasNUL(s) {
			return RuleMalformed, "invalid session field"
		}
	}
	if ws := op.Session.Workspace; ws != "" && (!filepath.IsAbs(ws) || filepath.Clean(ws) != ws) {
		return RuleMalformed, "workspace is not canonical"
	}
	return "", ""
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// builtinAtom runs the per-atom built-in rules; it returns the matches
// (strictest first is not guaranteed).
func (e *Engine) builtinAtom(op *operation.Operation, a *atom, ws string, ms *[]Match) {
	hit := func(id string) {
		*ms = append(*ms, Match{Rule: id, Effect: builtinEffect(id), Layer: LayerBuiltin, Subject: a.subject(), Message: builtinMessage(id)})
	}
	writes := a.action == operation.Write || (a.cmd == nil && (op.HasTag("writes") || op.HasTag("destructive")))
	if a.path != "" {
		if e.secret.covers(a.path) {
			hit(RuleProtectedRead)
		}
		if writes && e.protected.covers(a.path) {
			hit(RuleProtectedWrite)
		}
		if writes && !a.inWS {
			hit(RuleOutsideWrite)
		}
	} else if writes && a.cmd == nil && a.host == nil && op.Action == operation.Write {
		// A write that names no path cannot be placed in the workspace.
		hit(RuleOutsideWrite)
	}
	if writes && op.Session.Untrusted && op.HasTag(TagMemory) {
		hit(RuleUntrustedMemory)
	}
	if writes && op.HasTag(TagSkillWidens) {
		hit(RuleSkillWidening)
	}
	if a.cmd != nil {
		if a.cmd.Dynamic {
			hit(RuleUnresolved)
		}
		base := ws
		if d := a.cmd.Dir; d != "" && ws != "" {
			if filepath.IsAbs(d) {
				base = filepath.Clean(d)
			} else {
				base = filepath.Join(ws, d)
			}
		}
		if e.argNamesProtected(a.cmd.Argv, base) {
			hit(RuleProtectedArg)
		}
	}
}

func builtinEffect(id string) Effect {
	if id == RuleUnresolved || id == RuleUntrustedMemory || id == RuleSkillWidening {
		return Approve
	}
	return Block
}

// argNamesProtected reports whether any argument, read as a path (relative
// ones against the workspace), or the value of a --flag=value, falls inside
// a protected or secret path. It is lexical: the normalizer resolves
// symlinks before the engine sees the operation.
func (e *Engine) argNamesProtected(argv []string, ws string) bool {
	if len(e.protected) == 0 && len(e.secret) == 0 {
		return false
	}
	// Relative arguments without ".." stay below the workspace: they can
	// only name a protected path when one lies inside the workspace (or
	// the workspace inside one).
	wsRelevant := ws != "" && (e.protected.touches(ws) || e.secret.touches(ws))
	for i, a := range argv {
		if i == 0 {
			continue // running a program is not writing it
		}
		cands := []string{a}
		if _, v, ok := strings.Cut(a, "="); ok {
			cands = append(cands, v)
		}
		if strings.HasPrefix(a, "-") && len(a) > 2 && a[1] != '-' {
			cands = append(cands, a[2:]) // -o/path
		}
		for _, c := range cands {
			if c == "" {
				continue
			}
			switch {
			case c == "~" || strings.HasPrefix(c, "~/"):
				if e.opts.Home == "" {
					continue
				}
				c = e.opts.Home + c[1:]
			case !filepath.IsAbs(c):
				if ws == "" || !wsRelevant && !hasDotDot(c) {
					continue
				}
				c = filepath.Join(ws, c)
			}
			c = filepath.Clean(c)
			if e.protected.covers(c) || e.secret.covers(c) {
				return true
			}
		}
	}
	return false
}
