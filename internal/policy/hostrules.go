package policy

import (
	"fmt"
	"strconv"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// HostRule is a default-layer rule the configuration generates rather
// than a file: effect approve for net operations to Hosts (the package
// registries of config net.registries). It is evaluated before the
// default rule set's own rules, and a user or project rule overrides it
// as it overrides them.
type HostRule struct {
	// ID names it (default.registry.go).
	ID string
	// Description is what explain shows and, with the host, what the
	// person is told.
	Description string
	// Hosts are "name:port" patterns, as in a rule's host matcher.
	Hosts []string
	// Origin is where it comes from (the configuration key and its file
	// and line), shown as the rule's source.
	Origin string
}

// compileHostRules builds the rules of opts.HostRules.
func compileHostRules(hrs []HostRule) ([]*rule, []error) {
	var out []*rule
	var errs []error
	for _, hr := range hrs {
		r := &rule{id: hr.ID, description: hr.Description, message: hr.Description, effect: Approve, layer: LayerDefault,
			source: hr.Origin, match: &matcher{actions: []operation.Action{operation.Net}}}
		if hr.ID == "" || len(hr.Hosts) == 0 {
			errs = append(errs, fmt.Errorf("%s: %w: a generated rule needs an id and hosts", hr.Origin, ErrInvalid))
			continue
		}
		for _, h := range hr.Hosts {
			p, err := compileHost(h)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w: rule %s: %w", hr.Origin, ErrInvalid, hr.ID, err))
				continue
			}
			r.match.hosts = append(r.match.hosts, p)
		}
		r.index()
		out = append(out, r)
	}
	return out, errs
}

// digestHostRules feeds opts.HostRules to a digest.
func digestHostRules(hrs []HostRule, str func(string)) {
	str(strconv.Itoa(len(hrs)))
	for _, hr := range hrs {
		str(hr.ID)
		str(hr.Description)
		str(hr.Origin)
		str(strconv.Itoa(len(hr.Hosts)))
		for _, h := range hr.Hosts {
			str(h)
		}
	}
}
