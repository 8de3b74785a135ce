package skill

import (
	"path/filepath"
	"strings"
	"testing"
)

func mkSkill(t *testing.T, root, name, manifest string) {
	t.Helper()
	dir := filepath.Join(root, name)
	write(t, dir, "SKILL.md", "---\nname: "+name+"\ndescription: The "+name+" skill.\n---\nHow to use "+name+".\n", 0o644)
	if manifest != "" {
		write(t, dir, "skill.yaml", manifest, 0o644)
	}
}

func problems2(s Set) string {
	var b strings.Builder
	for _, p := range s.Problems {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

func TestDiscoverScopes(t *testing.T) {
	ws, cfg, repo := t.TempDir(), t.TempDir(), t.TempDir()
	roots := Roots(ws, cfg, repo)
	mkSkill(t, roots[0].Dir, "notes", "")
	mkSkill(t, roots[1].Dir, "shop", "network: [shop.example]\ncredentials:\n  - {ref: \"env:SHOP\", as: env, name: SHOP}\nclassification: [spends-money]\n")
	mkSkill(t, roots[1].Dir, "broken", "network: [https://x]\n")
	write(t, filepath.Join(roots[1].Dir, "not-a-skill"), "README", "x", 0o644)
	mkSkill(t, roots[2].Dir, "lint", "entrypoints:\n  - {name: run, command: [/bin/true]}\n")

	set := Discover(roots)
	var names []string
	for _, s := range set.Skills {
		names = append(names, string(s.Scope)+":"+s.Name)
	}
	if got := strings.Join(names, " "); got != "project:lint assistant:notes user:shop" {
		t.Fatalf("skills = %s", got)
	}
	if p := problems2(set); !strings.Contains(p, "broken/skill.yaml:1: network[0]:") || strings.Contains(p, "not-a-skill") {
		t.Fatalf("problems:\n%s", p)
	}
	if s, ok := set.Lookup("shop"); !ok || s.Manifest.Network[0] != "shop.example" {
		t.Fatalf("Lookup(shop) = %+v, %v", s, ok)
	}
	if _, ok := set.Lookup("broken"); ok {
		t.Fatal("an invalid skill was loaded")
	}
}

// A project skill cannot loosen: it may not declare credentials or
// network under a name of its own, nor shadow a person's skill of the
// same name to ask for more or drop a classification.
func TestDiscoverProjectOnlyTightens(t *testing.T) {
	cfg, repo := t.TempDir(), t.TempDir()
	roots := Roots("", cfg, repo)
	user := "network: [shop.example]\ncredentials:\n  - {ref: \"env:SHOP\", as: env, name: SHOP}\nclassification: [spends-money]\nsandbox: {timeout: 30s}\n"
	for _, tc := range []struct {
		name, project, want string
		replaced            bool
	}{
		{"adds a host", "network: [shop.example, evil.example]\nclassification: [spends-money]\n", "adds the host evil.example", false},
		{"adds a credential", "credentials:\n  - {ref: \"env:HOME_TOKEN\", as: env, name: T}\nclassification: [spends-money]\n", "adds the credential env:HOME_TOKEN", false},
		{"drops a classification", "network: [shop.example]\n", "drops the classification spends-money", false},
		{"raises a limit", "classification: [spends-money]\nsandbox: {timeout: 10m}\n", "raises a sandbox limit", false},
		{"unsets a limit", "classification: [spends-money]\n", "raises a sandbox limit", false},
		{"tightens", "network: []\nclassification: [spends-money, sends-messages]\nsandbox: {timeout: 10s}\n", "which it tightens", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, repo := t.TempDir(), t.TempDir()
			roots = Roots("", cfg, repo)
			mkSkill(t, roots[0].Dir, "shop", user)
			mkSkill(t, roots[1].Dir, "shop", tc.project)
			set := Discover(roots)
			s, ok := set.Lookup("shop")
			if !ok {
				t.Fatal("no shop skill")
			}
			if got := s.Scope == ScopeProject; got != tc.replaced {
				t.Fatalf("scope = %s", s.Scope)
			}
			if p := problems2(set); !strings.Contains(p, tc.want) {
				t.Fatalf("problems:\n%s\nwant %q", p, tc.want)
			}
		})
	}
	t.Run("own name with network", func(t *testing.T) {
		roots := Roots("", t.TempDir(), t.TempDir())
		mkSkill(t, roots[1].Dir, "exfil", "network: [evil.example]\n")
		mkSkill(t, roots[1].Dir, "creds", "credentials:\n  - {ref: \"env:AWS_SECRET\", as: env, name: K}\n")
		set := Discover(roots)
		if len(set.Skills) != 0 {
			t.Fatalf("skills = %+v", set.Skills)
		}
		if p := problems2(set); strings.Count(p, "refused: project skill") != 2 {
			t.Fatalf("problems:\n%s", p)
		}
	})
}

func TestDiscoverUserOverAssistant(t *testing.T) {
	ws, cfg := t.TempDir(), t.TempDir()
	roots := Roots(ws, cfg, "")
	mkSkill(t, roots[0].Dir, "mail", "network: [mail.example]\nclassification: [sends-messages]\n")
	mkSkill(t, roots[1].Dir, "mail", "network: [mail.example, other.example]\nclassification: [sends-messages]\n")
	set := Discover(roots)
	s, _ := set.Lookup("mail")
	if s.Scope != ScopeAssistant {
		t.Fatalf("scope = %s", s.Scope)
	}
	if p := problems2(set); !strings.Contains(p, "refused: user skill \"mail\" would loosen the assistant skill") {
		t.Fatalf("problems:\n%s", p)
	}
}

func TestPromptList(t *testing.T) {
	if PromptList(nil) != "" {
		t.Fatal("a list without skills")
	}
	got := PromptList([]Skill{{Name: "shop", Description: "Buys things.\nSecond line."}, {Name: "x", Description: "a\u202eb\x1b[2Jc" + strings.Repeat("y", 300)}})
	if !strings.Contains(got, "- shop: Buys things.\n") || strings.Contains(got, "Second line") || strings.ContainsAny(got, "\u202e\x1b") {
		t.Fatalf("list:\n%s", got)
	}
	if !strings.Contains(got, strings.Repeat("y", 190)+"…") {
		t.Fatalf("not cut:\n%s", got)
	}
	var many []Skill
	for i := range 200 {
		many = append(many, Skill{Name: "s" + strings.Repeat("k", i%50), Description: strings.Repeat("d", 100)})
	}
	if got := PromptList(many); len(got) > maxPromptList+100 || !strings.Contains(got, "more skills not listed") {
		t.Fatalf("unbounded: %d bytes", len(got))
	}
}

func TestHostAllowed(t *testing.T) {
	net := []string{"api.shop.example", "127.0.0.1:8080", "*.cdn.example"}
	for _, tc := range []struct {
		host string
		port int
		want bool
	}{
		{"api.shop.example", 443, true},
		{"API.shop.example.", 80, true},
		{"shop.example", 443, false},
		{"evil.api.shop.example", 443, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 8081, false},
		{"a.cdn.example", 443, true},
		{"cdn.example", 443, false},
		{"xcdn.example", 443, false},
	} {
		if got := HostAllowed(net, tc.host, tc.port); got != tc.want {
			t.Errorf("%s:%d = %v", tc.host, tc.port, got)
		}
	}
}
