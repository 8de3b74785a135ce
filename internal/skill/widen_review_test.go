package skill

import (
	"strings"
	"testing"
)

func TestReviewWidening(t *testing.T) {
	before := map[string]string{
		"skills/a/SKILL.md":   "x",
		"skills/a/skill.yaml": "network: [a.example]\n",
		"skills/b/skill.yaml": "network: [a.example]\n", // no SKILL.md: not a skill
		"skills/c/SKILL.md":   "x",
		"skills/c/skill.yaml": "netwrk: [bad]\n", // invalid before: had nothing
	}
	after := map[string]string{
		"skills/a/SKILL.md":   "x",
		"skills/a/skill.yaml": "network: [a.example, b.example]\n",
		"skills/b/skill.yaml": "network: [b.example]\n",
		"skills/c/SKILL.md":   "x",
		"skills/c/skill.yaml": "network: [c.example]\n",
		"skills/d/SKILL.md":   "x",
		"skills/d/skill.yaml": "sandbox: {memory: [}\n",
	}
	reader := func(m map[string]string) func(string) ([]byte, bool, error) {
		return func(rel string) ([]byte, bool, error) {
			s, ok := m[rel]
			return []byte(s), ok, nil
		}
	}
	ws, err := ReviewWidening([]string{"skills/a/skill.yaml", "skills/b/skill.yaml", "skills/c/skill.yaml", "skills/d/skill.yaml", "skills/a/SKILL.md"}, reader(before), reader(after))
	if err != nil {
		t.Fatal(err)
	}
	got := ReviewText(ws)
	want := "WIDENS skill a:\n  + host-added: b.example\nWIDENS skill c:\n  + host-added: c.example\nskill d: the new manifest does not parse"
	if !strings.HasPrefix(got, want) {
		t.Errorf("got\n%s\nwant prefix\n%s", got, want)
	}
}
