package userenv

import (
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// Registry is a package registry config net.registries turns on.
type Registry struct {
	// Key is the runner's key under net.registries: go, pypi, npm.
	Key string
	// URL is the registry's address ("default" resolved).
	URL string
	// Hosts are the "name:port" destinations the tool reaches for it.
	Hosts []string
	// Origin is where the key was set.
	Origin string
}

// Registries lists the enabled registries, by key.
func (e *Env) Registries() ([]Registry, error) {
	l, err := e.Config()
	if err != nil {
		return nil, err
	}
	var out []Registry
	for key, raw := range l.Config.Net.Registries.Enabled() {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err // config.Load checked it
		}
		r := Registry{Key: key, URL: raw, Hosts: []string{hostPort(u)},
			Origin: "config net.registries." + key + " (" + l.Origins["net.registries."+key].String() + ")"}
		// The public registries serve from a second host: Go's checksum
		// database, PyPI's files.
		switch {
		case key == "go" && strings.EqualFold(u.Hostname(), "proxy.golang.org"):
			r.Hosts = append(r.Hosts, "sum.golang.org:443")
		case key == "pypi" && strings.EqualFold(u.Hostname(), "pypi.org"):
			r.Hosts = append(r.Hosts, "files.pythonhosted.org:443")
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Registry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// hostPort is u's host and port as a policy host pattern names it.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// registryRules are the default-layer policy rules of the enabled
// registries: a person approves reaching each registry's hosts.
func registryRules(regs []Registry) []policy.HostRule {
	names := map[string]string{"go": "the Go module proxy", "pypi": "the Python package index", "npm": "the npm registry"}
	var out []policy.HostRule
	for _, r := range regs {
		out = append(out, policy.HostRule{ID: "default.registry." + r.Key,
			Description: names[r.Key] + " " + r.URL + " (net.registries." + r.Key + ") needs a person's approval",
			Hosts:       r.Hosts, Origin: r.Origin})
	}
	return out
}

// RegistryEnv is what makes each runner's tool use its enabled registry
// in a sandbox over ws with network: Go's GOPROXY (the person's module
// cache first, see sandbox.GoProxyList) and GOSUMDB, pip's
// PIP_INDEX_URL, npm's npm_config_registry. Each replaces the variable's
// offline value.
//
// GOSUMDB: with the public proxy, Go checks modules that go.sum does not
// list against sum.golang.org (whose host the registry's rule names);
// with another proxy the checksum database is off, as offline: go.sum
// still verifies every module it lists, and what go get or go mod tidy
// adds is trusted as that proxy serves it (docs/network.md).
func (e *Env) RegistryEnv(ws string) ([]string, error) {
	regs, err := e.Registries()
	if err != nil || len(regs) == 0 {
		return nil, err
	}
	var env []string
	for _, r := range regs {
		switch r.Key {
		case "go":
			env = append(env, "GOPROXY="+sandbox.GoProxyList(e.UserCaches(ws), r.URL))
			if slices.Contains(r.Hosts, "sum.golang.org:443") {
				env = append(env, "GOSUMDB=sum.golang.org")
			} else {
				env = append(env, "GOSUMDB=off")
			}
		case "pypi":
			env = append(env, "PIP_INDEX_URL="+r.URL)
		case "npm":
			env = append(env, "npm_config_registry="+r.URL)
		}
	}
	return env, nil
}
