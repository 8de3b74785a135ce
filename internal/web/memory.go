package web

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"
)

// memoryPageSize is how many memory files one page lists.
const memoryPageSize = 100

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

// memoryView is the memory page: a page of the files in path order,
// from the first path after After; Next is the After of the page
// following, "" on the last.
type memoryView struct {
	Files       []MemoryFile
	Total       int
	After, Next string
	Query       string
	Asked       bool
	Result      MemoryResult
	Error       string
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
	v := memoryView{Total: len(files), After: r.URL.Query().Get("after"), Query: strings.TrimSpace(r.URL.Query().Get("q"))}
	v.Files, v.Next = memoryPage(files, v.After)
	if v.Query != "" {
		v.Asked = true
		if v.Result, err = s.o.Memory.Search(r.Context(), v.Query); err != nil {
			v.Error = err.Error()
		}
	}
	s.render(w, r, http.StatusOK, "memory", "Memory", v)
}

// memoryPage is the page of files after path after, in path order, and
// the after of the next page ("" when none). A path, not an offset,
// marks the place: a file added or removed between two pages moves no
// other file to or from the next one.
func memoryPage(files []MemoryFile, after string) ([]MemoryFile, string) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b MemoryFile) int { return strings.Compare(a.Path, b.Path) })
	i, found := slices.BinarySearchFunc(files, after, func(f MemoryFile, p string) int { return strings.Compare(f.Path, p) })
	if found {
		i++
	}
	files = files[i:]
	if len(files) > memoryPageSize {
		return files[:memoryPageSize], files[memoryPageSize-1].Path
	}
	return files, ""
}
