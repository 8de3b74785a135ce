package builtin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const widenSkillMD = "---\nname: weather\ndescription: the weather\n---\nbody\n"

const widenManifest = `network: [api.weather.example]
classification: [sends-messages]
`

// skillWorkspace is a workspace holding the assistant's skill "weather".
func skillWorkspace(t *testing.T, e *gitEnv, base string) {
	dir := filepath.Join(e.ws, "skills", "weather")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(widenSkillMD), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "skill.yaml"), []byte(widenManifest), 0o644))
}

func (e *gitEnv) lastPrompt() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.prompts) == 0 {
		return ""
	}
	return e.prompts[len(e.prompts)-1]
}

// A proposed manifest edit that widens the skill is held for a person in
// a clean session, whatever the user's rules allow, and the request says
// what widens above the manifest's diff; one that narrows is not.
func TestSkillWideningFlagged(t *testing.T) {
	allowSkills := "rules:\n  - id: my-skills\n    description: my skills are mine\n    effect: allow\n    match:\n      action: write\n      path: [\"skills/**\"]\n"
	e := newSessionEnv(t, allowSkills, skillWorkspace)
	e.answer = "/deny"

	// fs.edit, old/new: a host added.
	out, isErr := e.call("fs.edit", map[string]any{"path": "skills/weather/skill.yaml", "old": "[api.weather.example]", "new": "[api.weather.example, exfil.example.net]"})
	if !isErr || !strings.Contains(out, "denied") {
		t.Fatalf("widening edit: %v %s, want denied by the person", isErr, out)
	}
	p := e.lastPrompt()
	for _, want := range []string{"WIDENS skill weather:", "+ host-added: exfil.example.net", "+network: [api.weather.example, exfil.example.net]", "builtin.skill-widening"} {
		if !strings.Contains(p, want) {
			t.Errorf("the approval request lacks %q:\n%s", want, p)
		}
	}

	// fs.write: the classification hint dropped and a credential added.
	asked := e.asked
	e.call("fs.write", map[string]any{"path": "skills/weather/skill.yaml", "content": "network: [api.weather.example]\ncredentials:\n  - {ref: \"env:AWS_SECRET\", as: env, name: AWS_SECRET}\n"})
	if e.asked != asked+1 {
		t.Fatalf("widening write: asked %d times, want once more", e.asked-asked)
	}
	p = e.lastPrompt()
	for _, want := range []string{"credential-added: env:AWS_SECRET as env AWS_SECRET", "classification-removed: sends-messages"} {
		if !strings.Contains(p, want) {
			t.Errorf("the approval request lacks %q:\n%s", want, p)
		}
	}

	// fs.edit, diff: an entrypoint added.
	asked = e.asked
	diff := "--- a/skills/weather/skill.yaml\n+++ b/skills/weather/skill.yaml\n@@ -1,2 +1,4 @@\n network: [api.weather.example]\n classification: [sends-messages]\n+entrypoints:\n+  - {name: sh, command: [/bin/sh]}\n"
	out, _ = e.call("fs.edit", map[string]any{"diff": diff})
	if e.asked != asked+1 || !strings.Contains(e.lastPrompt(), "entrypoint-added: sh: /bin/sh") {
		t.Errorf("widening diff: asked %d more, prompt:\n%s\nresult %s", e.asked-asked, e.lastPrompt(), out)
	}

	// Narrowing, and other files of the skill, pass by the rules.
	asked = e.asked
	if out, isErr := e.call("fs.write", map[string]any{"path": "skills/weather/skill.yaml", "content": "network: []\nclassification: [sends-messages, spends-money]\n"}); isErr {
		t.Fatalf("narrowing write: %s", out)
	}
	if out, isErr := e.call("fs.write", map[string]any{"path": "skills/weather/SKILL.md", "content": widenSkillMD + "more\n"}); isErr {
		t.Fatalf("SKILL.md write: %s", out)
	}
	if e.asked != asked {
		t.Errorf("narrowing and SKILL.md asked %d times", e.asked-asked)
	}

	// A new skill that asks for a host is a widening too; approved, it
	// lands in the change set.
	e.answer = "/approve"
	if out, isErr := e.call("fs.write", map[string]any{"path": "skills/new/SKILL.md", "content": "---\nname: new\ndescription: d\n---\n"}); isErr {
		t.Fatal(out)
	}
	asked = e.asked
	if out, isErr := e.call("fs.write", map[string]any{"path": "skills/new/carapace.yaml", "content": "network: [x.example]\n"}); isErr || e.asked != asked+1 {
		t.Fatalf("new skill's manifest: %v %s, asked %d more", isErr, out, e.asked-asked)
	}
	if !strings.Contains(e.lastPrompt(), "WIDENS skill new:") {
		t.Errorf("prompt:\n%s", e.lastPrompt())
	}
	if b, err := e.cs.ReadFile("skills/new/carapace.yaml"); err != nil || string(b) != "network: [x.example]\n" {
		t.Errorf("approved write: %q %v", b, err)
	}
	// A manifest outside a skill's folder is just a file.
	asked = e.asked
	if out, isErr := e.call("fs.write", map[string]any{"path": "deploy/skill.yaml", "content": "network: [x.example]\n"}); isErr || e.asked != asked {
		t.Errorf("skill.yaml outside a skill: %v %s, asked %d", isErr, out, e.asked-asked)
	}
}
