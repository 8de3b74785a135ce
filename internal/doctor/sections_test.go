package doctor

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Anchors returns the GitHub anchors of the "## " headings of a markdown
// file: lower case, spaces to hyphens, other punctuation dropped.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		h, ok := strings.CutPrefix(line, "## ")
		if !ok {
			continue
		}
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
		out[a] = true
	}
	return out
}

// Every check links to a section of docs/troubleshooting.md that exists,
// and every check Run makes carries its link.
func TestSectionsExist(t *testing.T) {
	have := anchors(t, "../../"+TroubleshootingDoc)
	for name, a := range Sections {
		if !have[a] {
			t.Errorf("check %q links to #%s, which %s has no section for", name, a, TroubleshootingDoc)
		}
	}
	for id, name := range facilityNames {
		if _, ok := Sections[name]; !ok {
			t.Errorf("facility %s (%q) has no section in Sections", id, name)
		}
	}
	rep := Run(t.Context(), Options{Home: t.TempDir(), LookPath: func(string) (string, error) { return "", os.ErrNotExist }})
	for _, c := range rep.Checks {
		if c.Doc == "" || !strings.HasPrefix(c.Doc, TroubleshootingDoc+"#") {
			t.Errorf("check %q has no link (doc %q)", c.Name, c.Doc)
		}
	}
}
