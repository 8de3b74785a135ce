package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// MaxManifest bounds fluffy-plugin.yaml's size.
const MaxManifest = 64 << 10

// ErrManifest is matched by every error ParseManifest returns.
var ErrManifest = errors.New("plugin: bad manifest")

// ManifestError is a problem in a manifest at a line (0 when the problem
// is the whole file's).
type ManifestError struct {
	File string
	Line int
	Msg  string
}

func (e *ManifestError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Is makes every ManifestError match ErrManifest.
func (e *ManifestError) Is(target error) bool { return target == ErrManifest }

// MCPVersions are the MCP protocol versions this fluffy speaks: the
// official Go SDK's, newest first. A manifest's requires.mcp must name at
// least one of them.
func MCPVersions() []string { return mcp.SupportedProtocolVersions() }

var (
	nameRE    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)
	versionRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$`)
	mcpVerRE  = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostRE    = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?$`)
	lineRE    = regexp.MustCompile(`^(?:yaml: )?line ([0-9]+): (.*)$`)
)

// ParseManifest reads a manifest strictly: unknown fields, a second
// document, wrong types and invalid values are errors (*ManifestError,
// matching ErrManifest) naming file and line.
func ParseManifest(data []byte, file string) (Manifest, error) {
	var m Manifest
	if len(data) > MaxManifest {
		return m, &ManifestError{File: file, Msg: fmt.Sprintf("larger than %d bytes", MaxManifest)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return m, &ManifestError{File: file, Msg: "empty"}
		}
		return m, yamlError(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return m, &ManifestError{File: file, Line: extra.Line, Msg: "a second YAML document; a manifest is one"}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return m, yamlError(file, data, err)
	}
	if err := validate(m); err != nil {
		var ve *valueError
		if errors.As(err, &ve) {
			return m, &ManifestError{File: file, Line: lineOf(&root, ve.path), Msg: ve.msg}
		}
		return m, &ManifestError{File: file, Msg: err.Error()}
	}
	return m, nil
}

// yamlError turns the YAML library's errors ("line 3: field x not found")
// into ManifestErrors, the first one with its line. A size's own error
// comes without a line: it is placed on the first size that fails.
func yamlError(file string, data []byte, err error) error {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msgs = te.Errors
	}
	first := strings.TrimSpace(msgs[0])
	if m := lineRE.FindStringSubmatch(first); m != nil {
		n, _ := strconv.Atoi(m[1])
		return &ManifestError{File: file, Line: n, Msg: m[2]}
	}
	e := &ManifestError{File: file, Msg: strings.TrimPrefix(first, "yaml: ")}
	var root yaml.Node
	if errors.Is(err, units.ErrSyntax) && yaml.Unmarshal(data, &root) == nil {
		for _, k := range []string{"memory", "output"} {
			p := []string{"sandbox", k}
			if n := nodeAt(&root, p); n != nil {
				if _, perr := units.ParseSize(n.Value); perr != nil {
					e.Line = n.Line
					break
				}
			}
		}
	}
	return e
}

// nodeAt is the value at a path of mapping keys, nil when absent.
func nodeAt(root *yaml.Node, p []string) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range p {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// valueError is a validation failure at a path of keys (indices as
// numbers), placed on a line by lineOf.
type valueError struct {
	path []string
	msg  string
}

func (e *valueError) Error() string { return strings.Join(e.path, ".") + ": " + e.msg }

func bad(msg string, p ...string) error { return &valueError{path: p, msg: msg} }

// lineOf finds the line of the deepest node of p that exists.
func lineOf(root *yaml.Node, p []string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, k := range p {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					line = n.Content[i].Line
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(k); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// validate checks the values the YAML types cannot.
func validate(m Manifest) error {
	if !nameRE.MatchString(m.Name) {
		return bad(fmt.Sprintf("name %q: want a lower-case letter, then [a-z0-9_], at most 40 (its tools are mcp.NAME.TOOL)", m.Name), "name")
	}
	if !versionRE.MatchString(m.Version) {
		return bad(fmt.Sprintf("version %q: want 1-64 of [0-9A-Za-z.+_-]", m.Version), "version")
	}
	if err := validateRequires(m.Requires); err != nil {
		return err
	}
	if err := validateRun(m.Run); err != nil {
		return err
	}
	switch m.Sandbox.Runtime {
	case "", "native", "docker", "podman":
	default:
		return bad(fmt.Sprintf("sandbox.runtime %q: want native, docker or podman", m.Sandbox.Runtime), "sandbox", "runtime")
	}
	if m.Run.Image != "" && m.Sandbox.Runtime == "native" {
		return bad("an image runs in a container: sandbox.runtime must be docker, podman or empty", "sandbox", "runtime")
	}
	if m.Sandbox.PIDs < 0 {
		return bad("sandbox.pids must not be negative", "sandbox", "pids")
	}
	for i, h := range m.Network {
		if !hostRE.MatchString(h) {
			return bad(fmt.Sprintf("network %q: want host, host:port or *.suffix, lower case", h), "network", strconv.Itoa(i))
		}
	}
	for i, c := range m.Credentials {
		if err := validateCredential(c, i); err != nil {
			return err
		}
	}
	return validateCapabilities(m)
}

func validateRequires(r Requires) error {
	if r.Fluffy != APIVersion {
		return bad(fmt.Sprintf("requires.fluffy %q: this fluffy offers plugin API %q", r.Fluffy, APIVersion), "requires", "fluffy")
	}
	if len(r.MCP) == 0 {
		return bad("requires.mcp: name the MCP protocol versions the server speaks ("+strings.Join(MCPVersions(), ", ")+")", "requires", "mcp")
	}
	known := false
	for i, v := range r.MCP {
		if !mcpVerRE.MatchString(v) {
			return bad(fmt.Sprintf("requires.mcp %q: want a protocol version, YYYY-MM-DD", v), "requires", "mcp", strconv.Itoa(i))
		}
		known = known || slices.Contains(MCPVersions(), v)
	}
	if !known {
		return bad(fmt.Sprintf("requires.mcp: none of %s is a version this fluffy speaks (%s)", strings.Join(r.MCP, ", "), strings.Join(MCPVersions(), ", ")), "requires", "mcp")
	}
	return nil
}

func validateRun(r Run) error {
	switch {
	case len(r.Command) == 0 && r.Image == "":
		return bad("run: give a command (in the plugin's folder) or an image", "run")
	case len(r.Command) > 0 && r.Command[0] == "":
		return bad("run.command: the program is empty", "run", "command", "0")
	}
	if len(r.Command) > 0 {
		// A relative program is the plugin's own file: it must stay in
		// its folder, which the digest covers.
		p := r.Command[0]
		if !path.IsAbs(p) && strings.Contains(p, "/") {
			if c := path.Clean(p); c == ".." || strings.HasPrefix(c, "../") {
				return bad(fmt.Sprintf("run.command %q leaves the plugin's folder", p), "run", "command", "0")
			}
		}
	}
	if r.Image != "" && !strings.Contains(r.Image, "@sha256:") {
		return bad(fmt.Sprintf("run.image %q: pin it by digest (NAME@sha256:HEX): a tag can change under the approved plugin", r.Image), "run", "image")
	}
	for i, e := range r.Env {
		name, _, _ := strings.Cut(e, "=")
		if !envNameRE.MatchString(name) {
			return bad(fmt.Sprintf("run.env %q: want NAME=value", e), "run", "env", strconv.Itoa(i))
		}
	}
	switch r.Transport {
	case "", "stdio", "http":
	default:
		return bad(fmt.Sprintf("run.transport %q: want stdio or http", r.Transport), "run", "transport")
	}
	return nil
}

func validateCredential(c Credential, i int) error {
	at := []string{"credentials", strconv.Itoa(i)}
	if _, err := secret.ParseRef(c.Ref); err != nil {
		return bad(err.Error(), append(at, "ref")...)
	}
	switch c.As {
	case "env", "file", "proxy":
		if c.Name == "" {
			return bad("credentials: as "+c.As+" needs a name", at...)
		}
	case "stdin":
	default:
		return bad(fmt.Sprintf("credentials: as %q: want env, file, stdin or proxy", c.As), append(at, "as")...)
	}
	if c.As == "env" && !envNameRE.MatchString(c.Name) {
		return bad(fmt.Sprintf("credentials: name %q is not an environment variable", c.Name), append(at, "name")...)
	}
	if c.As == "proxy" && len(c.Bind) == 0 {
		return bad("credentials: as proxy needs bind (the hosts it is sent to)", at...)
	}
	if c.As != "proxy" && (len(c.Bind) > 0 || c.TLS) {
		return bad("credentials: bind and tls are for as proxy only", at...)
	}
	if c.As == "stdin" {
		// The server's standard input is its MCP stream.
		return bad("credentials: as stdin is not offered to a plugin (its standard input is the MCP stream): use env, file or proxy", append(at, "as")...)
	}
	return nil
}

// validateCapabilities checks the capabilities are known, once each, and
// cover what the rest of the manifest uses: hosts need network,
// credentials need secrets.
func validateCapabilities(m Manifest) error {
	seen := map[Capability]bool{}
	for i, c := range m.Capabilities {
		if !slices.Contains(Capabilities(), c) {
			return bad(fmt.Sprintf("capabilities: unknown %q (want %s)", c, capNames()), "capabilities", strconv.Itoa(i))
		}
		if seen[c] {
			return bad(fmt.Sprintf("capabilities: %q twice", c), "capabilities", strconv.Itoa(i))
		}
		seen[c] = true
	}
	if len(m.Network) > 0 && !seen[CapNetwork] {
		return bad("network names hosts: add the capability network", "network")
	}
	if seen[CapNetwork] && len(m.Network) == 0 {
		return bad("capability network without hosts: list them under network", "capabilities")
	}
	if len(m.Credentials) > 0 && !seen[CapSecrets] {
		return bad("credentials are declared: add the capability secrets", "credentials")
	}
	for i, c := range m.Credentials {
		if c.As == "proxy" && !seen[CapNetwork] {
			// Only the egress proxy swaps it in: without one the
			// placeholder goes nowhere.
			return bad("credentials: as proxy needs the capability network and its bind hosts under network", "credentials", strconv.Itoa(i))
		}
	}
	return nil
}

// Capabilities lists every capability, in a stable order.
func Capabilities() []Capability {
	return []Capability{CapReadWorkspace, CapWriteChangeSet, CapNetwork, CapSecrets, CapMessages}
}

func capNames() string {
	var s []string
	for _, c := range Capabilities() {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ")
}
