package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"
)

// Imported is one MCP server of a client's configuration as a plugin: a
// generated manifest (Manifest, and its text YAML with the comments a
// person reviews), or Skipped saying why it is not one.
type Imported struct {
	// Server is the server's name in the configuration.
	Server   string
	Manifest Manifest
	YAML     []byte
	// Notes are what the person must know: secrets turned into
	// references, arguments left out.
	Notes   []string
	Skipped string
}

// server is an mcpServers entry, in any client's spelling.
type server struct {
	Command string            `json:"command" toml:"command"`
	Args    []string          `json:"args" toml:"args"`
	Env     map[string]string `json:"env" toml:"env"`
	Type    string            `json:"type" toml:"type"`
	URL     string            `json:"url" toml:"url"`
}

// ParseClientConfig reads the MCP servers of a client's configuration:
// Claude Desktop's claude_desktop_config.json, Claude Code's .mcp.json and
// ~/.claude.json (its "mcpServers" and each project's), Cursor's
// .cursor/mcp.json (all JSON with "mcpServers"), or Codex's config.toml
// ([mcp_servers.NAME]), told apart by the file's extension. Each server
// becomes a plugin named after it (lower case, [a-z0-9_]); servers
// reached by URL are skipped (a plugin is a process fluffy runs in its
// sandbox). file names the origin in the manifests' comments.
func ParseClientConfig(data []byte, file string) ([]Imported, error) {
	servers := map[string]server{}
	var order []string
	add := func(prefix string, m map[string]server) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			key := prefix + n
			if _, dup := servers[key]; !dup {
				order = append(order, key)
			}
			servers[key] = m[n]
		}
	}
	if strings.EqualFold(filepath.Ext(file), ".toml") {
		var c struct {
			MCPServers map[string]server `toml:"mcp_servers"`
		}
		if _, err := toml.Decode(string(data), &c); err != nil {
			return nil, fmt.Errorf("plugin: %s: %w", file, err)
		}
		add("", c.MCPServers)
	} else {
		var c struct {
			MCPServers map[string]server `json:"mcpServers"`
			Projects   map[string]struct {
				MCPServers map[string]server `json:"mcpServers"`
			} `json:"projects"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("plugin: %s: %w", file, err)
		}
		add("", c.MCPServers)
		var projects []string
		for p := range c.Projects {
			projects = append(projects, p)
		}
		slices.Sort(projects)
		for _, p := range projects {
			add(filepath.Base(p)+"_", c.Projects[p].MCPServers)
		}
	}
	var out []Imported
	taken := map[string]bool{}
	for _, key := range order {
		out = append(out, importServer(key, servers[key], file, taken))
	}
	return out, nil
}

// PluginName makes a server's name a plugin name: lower case, [a-z0-9_],
// starting with a letter, at most 40.
func PluginName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	n := strings.Trim(b.String(), "_")
	if n == "" || n[0] < 'a' || n[0] > 'z' {
		n = "mcp_" + n
	}
	if len(n) > 40 {
		n = strings.TrimRight(n[:40], "_")
	}
	return n
}

func importServer(key string, s server, file string, taken map[string]bool) Imported {
	im := Imported{Server: key}
	if s.Command == "" {
		im.Skipped = "no command: a server reached by URL is not a process fluffy can sandbox"
		if s.URL != "" {
			im.Skipped = "reached by URL (" + s.URL + "), not a command: fluffy runs plugins as processes in its sandbox"
		}
		return im
	}
	name := PluginName(key)
	for i := 2; taken[name]; i++ {
		name = PluginName(key) + "_" + strconv.Itoa(i)
	}
	taken[name] = true
	m := Manifest{Name: name, Version: "imported", Requires: Requires{Fluffy: APIVersion, MCP: MCPVersions()}}
	m.Run.Command = []string{s.Command}
	for i, a := range s.Args {
		if looksLikeToken(a) {
			im.Notes = append(im.Notes, fmt.Sprintf("argument %d looks like a secret and was left out: pass it through a credential (env) instead", i+1))
			continue
		}
		m.Run.Command = append(m.Run.Command, a)
	}
	envs := make([]string, 0, len(s.Env))
	for k := range s.Env {
		envs = append(envs, k)
	}
	slices.Sort(envs)
	for _, k := range envs {
		v := s.Env[k]
		if !envNameRE.MatchString(k) {
			im.Notes = append(im.Notes, fmt.Sprintf("environment variable %q is not a valid name and was left out", k))
			continue
		}
		if isSecret(k, v) {
			ref := "secret://age/plugin/" + name + "/" + k
			m.Credentials = append(m.Credentials, Credential{Ref: ref, As: "env", Name: k})
			im.Notes = append(im.Notes, fmt.Sprintf("%s looked like a secret: not copied; store it with 'fluffy secret set %s'", k, ref))
			continue
		}
		m.Run.Env = append(m.Run.Env, k+"="+v)
	}
	if len(m.Credentials) > 0 {
		m.Capabilities = append(m.Capabilities, CapSecrets)
	}
	y, err := manifestYAML(m, key, file)
	if err == nil {
		_, err = ParseManifest(y, ManifestName)
	}
	if err != nil {
		im.Skipped = "the generated manifest does not parse: " + err.Error()
		return im
	}
	im.Manifest, im.YAML = m, y
	return im
}

// manifestYAML writes m with a header for the person reviewing it; only
// the fields set appear.
func manifestYAML(m Manifest, server, file string) ([]byte, error) {
	type run struct {
		Command []string `yaml:"command"`
		Env     []string `yaml:"env,omitempty"`
	}
	type out struct {
		Name         string       `yaml:"name"`
		Version      string       `yaml:"version"`
		Requires     Requires     `yaml:"requires"`
		Run          run          `yaml:"run"`
		Credentials  []Credential `yaml:"credentials,omitempty"`
		Capabilities []Capability `yaml:"capabilities"`
	}
	type cred struct {
		Ref  string `yaml:"ref"`
		As   string `yaml:"as"`
		Name string `yaml:"name"`
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated by 'fluffy plugin import' from %s (server %q).\n", filepath.Base(file), server)
	b.WriteString(`# Review it before 'fluffy plugin enable': the command runs in fluffy's
# sandbox with no network and no capabilities until you add them here
# (network: hosts it may reach, with the capability network;
# capabilities: read-workspace, write-changeset, secrets, messages).
`)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	o := out{Name: m.Name, Version: m.Version, Requires: m.Requires, Run: run{Command: m.Run.Command, Env: m.Run.Env},
		Credentials: m.Credentials, Capabilities: m.Capabilities}
	if o.Capabilities == nil {
		o.Capabilities = []Capability{}
	}
	// Credentials without the empty bind list.
	var node yaml.Node
	if err := node.Encode(o); err != nil {
		return nil, err
	}
	if len(m.Credentials) > 0 {
		cs := make([]cred, len(m.Credentials))
		for i, c := range m.Credentials {
			cs[i] = cred{c.Ref, c.As, c.Name}
		}
		var cn yaml.Node
		if err := cn.Encode(cs); err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == "credentials" {
				node.Content[i+1] = &cn
			}
		}
	}
	if err := enc.Encode(&node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

var (
	// secretNameRE: variable names that hold secrets by convention.
	secretNameRE = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION|(^|_)KEY$|(^|_)PAT$)`)
	// tokenPrefixRE: the prefixes of well-known credential formats.
	tokenPrefixRE = regexp.MustCompile(`^(sk-|sk_|rk_|pk_live_|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|glpat-|xox[abprs]-|AKIA|ASIA|AIza|ya29\.|npm_|hf_|eyJ|Bearer )`)
	userinfoRE    = regexp.MustCompile(`^[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]+@`)
	randomRE      = regexp.MustCompile(`^[A-Za-z0-9_\-+/=.]{20,}$`)
)

// isSecret says whether an environment value must not be copied into a
// manifest in clear: its variable's name says secret, or the value looks
// like one. It errs towards secret: a reference costs the person one
// 'fluffy secret set'; a copied token stays in a file for good.
func isSecret(name, value string) bool {
	if value == "" {
		return false
	}
	return secretNameRE.MatchString(name) || looksLikeToken(value)
}

// looksLikeToken: a known credential format, a URL with a password, or
// a long run of token characters with letters and digits mixed (a path or
// a word rarely is).
func looksLikeToken(v string) bool {
	if tokenPrefixRE.MatchString(v) || userinfoRE.MatchString(v) {
		return true
	}
	if !randomRE.MatchString(v) || strings.Contains(v, "/") && !strings.ContainsAny(v, "+=") {
		return false
	}
	var lower, upper, digit bool
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= '0' && r <= '9':
			digit = true
		}
	}
	return digit && (lower || upper) && (lower && upper || len(v) >= 32)
}
