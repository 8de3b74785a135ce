// Package assistant owns the assistant's workspace files: SOUL.md (the
// persona), USER.md (the person), AGENTS.md (how to work), TOOLS.md (tool
// notes), HEARTBEAT.md (the periodic checklist), MEMORY.md and the daily
// logs memory/YYYY-MM-DD.md. It scaffolds them for a first run and turns
// them into the assistant's part of the system prompt within a token
// budget. The files are the person's (and, through approved change sets,
// the agent's) words: they are read as regular files inside the workspace
// only, never followed out of it, and quoted as the workspace's content.
package assistant

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// The workspace's files, in the order the prompt shows them.
const (
	Soul      = "SOUL.md"
	User      = "USER.md"
	Agents    = "AGENTS.md"
	Tools     = "TOOLS.md"
	Heartbeat = "HEARTBEAT.md"
	Memory    = "MEMORY.md"
	// MemoryDir holds the daily logs, memory/YYYY-MM-DD.md.
	MemoryDir = "memory"
)

// coreFiles are the files every turn's prompt carries, most important
// first: when the budget runs short, the later ones are cut. HEARTBEAT.md
// is not among them: the heartbeat delivers it when it runs.
var coreFiles = []struct{ name, title string }{
	{Soul, "Persona"},
	{User, "The person"},
	{Agents, "How to work"},
	{Tools, "Tool notes"},
	{Memory, "Long-term memory"},
}

// fileLimit bounds what is read of one file, whatever the budget.
const fileLimit = 256 << 10

// bytesPerToken matches the estimate the agent's context budget uses.
const bytesPerToken = 4

// Loaded is the assistant's part of a system prompt and what went into it.
type Loaded struct {
	// Prompt is the text to add to the system prompt.
	Prompt string
	// Files are the workspace-relative names included, in order.
	Files []string
	// Cut names files shortened to fit the budget; Left names daily logs
	// left out (older ones first out).
	Cut, Left []string
	// Tokens is the prompt's estimated size.
	Tokens int
}

// Load reads the workspace dir and assembles its prompt within budget
// tokens: the core files in order (a file that does not fit is cut from
// its end), then the daily logs, most recent first, each whole, while
// they fit. A missing file is skipped; a file that is not a regular file
// (a FIFO, a symlink out of the workspace) is an error naming it.
func Load(dir string, budget int) (Loaded, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Loaded{}, fmt.Errorf("assistant workspace: %w", err)
	}
	defer root.Close()
	var l Loaded
	var b strings.Builder
	left := budget * bytesPerToken
	// add appends one file; a core file is cut to fit, a daily log
	// (whole) goes in whole or not at all: a fragment of a day reads as
	// the whole of it.
	add := func(name, title, text string, whole bool) {
		text = strings.TrimSpace(text)
		if text == "" {
			return
		}
		head := fmt.Sprintf("\n## %s (%s)\n\n", title, name)
		room := left - len(head) - 1
		if room <= 0 {
			l.Left = append(l.Left, name)
			return
		}
		if len(text) > room {
			if whole {
				l.Left = append(l.Left, name)
				return
			}
			text = cut(text, room)
			l.Cut = append(l.Cut, name)
		}
		b.WriteString(head)
		b.WriteString(text)
		b.WriteString("\n")
		left -= len(head) + len(text) + 1
		l.Files = append(l.Files, name)
	}
	for _, f := range coreFiles {
		text, err := read(root, f.name)
		if err != nil {
			return Loaded{}, fmt.Errorf("assistant workspace %s: %w", path.Join(dir, f.name), err)
		}
		add(f.name, f.title, text, false)
	}
	logs, err := DailyLogs(root)
	if err != nil {
		return Loaded{}, fmt.Errorf("assistant workspace %s: %w", path.Join(dir, MemoryDir), err)
	}
	for i, name := range logs {
		text, err := read(root, name)
		if err != nil {
			return Loaded{}, fmt.Errorf("assistant workspace %s: %w", path.Join(dir, name), err)
		}
		before := len(l.Files)
		add(name, "Daily log "+strings.TrimSuffix(path.Base(name), ".md"), text, true)
		if len(l.Files) == before && strings.TrimSpace(text) != "" {
			// The budget is spent: the older logs stay on disk.
			l.Left = append(l.Left, logs[i+1:]...)
			break
		}
	}
	if b.Len() == 0 {
		return l, nil
	}
	var p strings.Builder
	p.WriteString("# Your assistant workspace\n\nThese files are your workspace (")
	p.WriteString(dir)
	p.WriteString("). Edit them only through your tools: each edit lands in the change set and the person sees the diff before it applies.\n")
	p.WriteString(b.String())
	if len(l.Left) > 0 {
		fmt.Fprintf(&p, "\n(%d older file(s) left out for space: %s. Read them with your file tools when you need them.)\n", len(l.Left), strings.Join(l.Left, ", "))
	}
	l.Prompt = p.String()
	l.Tokens = (len(l.Prompt) + bytesPerToken - 1) / bytesPerToken
	return l, nil
}

// DailyLogs lists memory/YYYY-MM-DD.md, most recent first. Other names
// in memory/ are not daily logs and are left alone.
func DailyLogs(root *os.Root) ([]string, error) {
	ents, err := fs.ReadDir(root.FS(), MemoryDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var days []string
	for _, e := range ents {
		day, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if _, err := time.Parse(time.DateOnly, day); err != nil {
			continue
		}
		days = append(days, day)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(days)))
	names := make([]string, len(days))
	for i, d := range days {
		names[i] = path.Join(MemoryDir, d+".md")
	}
	return names, nil
}

// read returns name's text, "" when it does not exist.
func read(root *os.Root, name string) (string, error) {
	data, err := regfile.ReadFileIn(root, name, fileLimit)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !utf8.Valid(data) {
		return "", fmt.Errorf("not UTF-8 text")
	}
	return string(data), nil
}

// cut shortens s to at most n bytes on a line or rune boundary, marking
// the cut.
func cut(s string, n int) string {
	const mark = "\n[… cut to fit the prompt budget]"
	if n <= len(mark) {
		return ""
	}
	s = s[:n-len(mark)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	if i := strings.LastIndexByte(s, '\n'); i > len(s)/2 {
		s = s[:i]
	}
	return s + mark
}
