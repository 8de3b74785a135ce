package email

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

// maxNameLen bounds a stored attachment's name in bytes, well under the
// 255 most file systems allow.
const maxNameLen = 100

// store holds one message's attachments: a directory of its own under the
// channel's attachments directory, written only through an os.Root so no
// name can reach outside it, every file 0600 (never executable).
type store struct {
	dir   string
	root  *os.Root
	names map[string]bool
	n     int
}

// newStore makes the directory of a message received at now.
func newStore(base string, now time.Time) (*store, error) {
	dir, err := os.MkdirTemp(base, now.UTC().Format("20060102T150405Z")+"-")
	if err != nil {
		return nil, fmt.Errorf("email: attachment directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("email: attachment directory: %w", err)
	}
	return &store{dir: dir, root: root, names: map[string]bool{}}, nil
}

// add stores one attachment under a safe form of the name the message
// gave it.
func (s *store) add(name, mediaType string, r io.Reader) (channel.Attachment, error) {
	s.n++
	safe := s.unique(safeName(name, mediaType, s.n))
	f, err := s.root.OpenFile(safe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return channel.Attachment{}, fmt.Errorf("email: storing an attachment: %w", err)
	}
	n, err := io.Copy(f, r)
	if err == nil {
		// The file must outlive a crash once the message is accepted
		// (250): the session it is delivered to refers to it.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("email: storing an attachment: %w", cerr)
	}
	if err != nil {
		return channel.Attachment{}, readErr(err)
	}
	return channel.Attachment{Name: safe, Path: filepath.Join(s.dir, safe), Type: mediaType, Size: n}, nil
}

// unique makes name distinct from the message's earlier attachments
// ("a.pdf", "a-2.pdf", ...).
func (s *store) unique(name string) string {
	base, ext := splitExt(name)
	if len(ext) > 16 {
		base, ext = name, ""
	}
	for i := 2; s.names[name]; i++ {
		suffix := "-" + strconv.Itoa(i)
		b := base
		if len(b)+len(suffix)+len(ext) > maxNameLen {
			b = b[:maxNameLen-len(suffix)-len(ext)]
		}
		name = b + suffix + ext
	}
	s.names[name] = true
	return name
}

func (s *store) close() { s.root.Close() }

// sync makes the message's directory entries durable: its files' names
// and its own name in the attachments directory.
func (s *store) sync() error {
	for _, d := range []string{s.dir, filepath.Dir(s.dir)} {
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("email: syncing the attachment directory: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("email: syncing the attachment directory: %w", err)
		}
	}
	return nil
}

// discard removes the message's directory (a message refused or not
// delivered leaves nothing behind).
func (s *store) discard() { os.RemoveAll(s.dir) }

// safeName turns a name a message gave an attachment into one that is
// safe as a file name and as a shell word: its last path element only,
// ASCII letters, digits and "._+-" (anything else becomes "_", so no
// NUL, separator, control or look-alike character survives), no leading
// dot (no dotfiles, no ".."), no leading "-" (no option look-alikes), at
// most maxNameLen bytes with the extension kept. An empty result becomes
// "attachment-N" with an extension from the media type.
func safeName(name, mediaType string, n int) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	under := false
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' || r == '+'
		if !ok {
			if !under {
				b.WriteByte('_')
			}
			under = true
			continue
		}
		under = false
		b.WriteRune(r)
	}
	safe := strings.TrimLeft(b.String(), "._-+")
	if strings.Trim(safe, "_") == "" {
		return "attachment-" + strconv.Itoa(n) + extFor(mediaType)
	}
	if len(safe) > maxNameLen {
		base, ext := splitExt(safe)
		if len(ext) > 16 {
			base, ext = safe, ""
		}
		safe = base[:maxNameLen-len(ext)] + ext
	}
	return safe
}

// splitExt splits "a.tar.gz" into "a.tar" and ".gz"; a name without a
// dot past its first byte has no extension.
func splitExt(name string) (string, string) {
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		return name[:i], name[i:]
	}
	return name, ""
}

func extFor(mediaType string) string {
	switch mediaType {
	case "message/rfc822":
		return ".eml"
	case "text/plain":
		return ".txt"
	case "text/html":
		return ".html"
	case "application/pdf":
		return ".pdf"
	}
	return ".bin"
}
