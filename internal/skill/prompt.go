package skill

import (
	"fmt"
	"strings"
	"unicode"
)

// Bounds of the list a session's system prompt carries: each skill is
// one line, and the list stops at a size whatever the number of skills.
const (
	maxPromptLine = 200
	maxPromptList = 4 << 10
)

// PromptList is the system prompt's section on skills: each skill's
// name and the first line of its description (control and invisible
// characters dropped, cut at a bound), the whole list bounded; "" when
// there are none. The bodies are not in it: the model loads one with
// skill.load when it decides to use that skill.
func PromptList(skills []Skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Skills\n\nSkills are instructions and scripts for a task. When one fits, read it with skill.load (its instructions and entrypoints), then run an entrypoint with skill.run.\n\n")
	for i, s := range skills {
		line := fmt.Sprintf("- %s: %s\n", s.Name, oneLine(s.Description))
		if b.Len()+len(line) > maxPromptList {
			fmt.Fprintf(&b, "- (%d more skills not listed)\n", len(skills)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// oneLine is the first line of s, printable characters only, cut at
// maxPromptLine runes.
func oneLine(s string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	var b strings.Builder
	n := 0
	for _, r := range first {
		if !unicode.IsPrint(r) && r != ' ' {
			continue
		}
		if n == maxPromptLine {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
		n++
	}
	return strings.TrimSpace(b.String())
}
