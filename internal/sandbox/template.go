package sandbox

import (
	"fmt"
	"strings"
)

// Template is a named way to run things: which seccomp profile, which
// network, whether the workspace is mounted. Callers apply a template to a
// Spec and then fill in the command, limits and paths.
type Template struct {
	Name        string
	Description string
	Seccomp     string
	Network     Network
	// Workspace says whether the workspace is mounted (as an overlay over
	// the change set). Without it the sandbox sees no project files.
	Workspace bool
	// Pending names what the template is still waiting for, when part of
	// its intent needs a facility that does not exist yet.
	Pending string
}

// Templates returns the built-in templates.
func Templates() []Template {
	return []Template{
		{Name: "code-executor", Description: "the model's commands: standard seccomp, no network, workspace through the overlay", Seccomp: "standard", Network: NetworkNone, Workspace: true},
		{Name: "integration-test", Description: "tests that need sockets: standard-net seccomp; network only to allow-listed hosts through the egress proxy", Seccomp: "standard-net", Network: NetworkProxy, Workspace: true},
		{Name: "policy-sandbox", Description: "policy extensions: strict seccomp, no network, no workspace", Seccomp: "strict", Network: NetworkNone, Workspace: false},
		{Name: "ai-provider", Description: "provider clients: strict seccomp (AF_UNIX only: they speak to the proxy socket); network to allow-listed hosts through the egress proxy", Seccomp: "strict", Network: NetworkProxy, Workspace: false},
	}
}

// TemplateByName returns a built-in template.
func TemplateByName(name string) (Template, error) {
	var names []string
	for _, t := range Templates() {
		if t.Name == name {
			return t, nil
		}
		names = append(names, t.Name)
	}
	return Template{}, fmt.Errorf("unknown sandbox template %q (have %s)", name, strings.Join(names, ", "))
}

// Apply sets the template's fields on spec. Without Workspace in the
// template, the spec's workspace and change set are cleared.
func (t Template) Apply(spec *Spec) {
	spec.Seccomp = t.Seccomp
	spec.Network = t.Network
	if !t.Workspace {
		spec.Workspace, spec.ChangeSet = "", ""
	}
}
