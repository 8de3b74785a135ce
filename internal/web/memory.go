package web

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// MemoryFile is one of the assistant's memory files (MEMORY.md,
// memory/**/*.md, sources/NAME/...).
type MemoryFile struct {
	Path     string
	Size     int64
	Modified time.Time
}

// MemoryHit is a passage a search found: its file and lines, and a
// snippet of it. The text is memory content: hostile like model output.
type MemoryHit struct {
	Path          string
	Line, EndLine int
	Heading       string
	Snippet       string
}

// MemoryResult is a search's hits; Note says how they were ranked when
// not as asked (full text only).
type MemoryResult struct {
	Hits []MemoryHit
	Note string
}

// Memory is the assistant's memory: its files and their search
// (docs/memory.md).
type Memory interface {
	Files(ctx context.Context) ([]MemoryFile, error)
	Search(ctx context.Context, q string) (MemoryResult, error)
}

// memoryView is the memory page.
type memoryView struct {
	Files  []MemoryFile
	Query  string
	Asked  bool
	Result MemoryResult
	Error  string
}

// memoryPage lists the memory files and, with q, searches them (a read:
// GET).
func (s *Server) memoryPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Memory == nil {
		s.renderStatus(w, r, http.StatusOK, "Memory", "the memory is not available on this console")
		return
	}
	files, err := s.o.Memory.Files(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := memoryView{Files: files, Query: strings.TrimSpace(r.URL.Query().Get("q"))}
	if v.Query != "" {
		v.Asked = true
		if v.Result, err = s.o.Memory.Search(r.Context(), v.Query); err != nil {
			v.Error = err.Error()
		}
	}
	s.render(w, r, http.StatusOK, "memory", "Memory", v)
}
