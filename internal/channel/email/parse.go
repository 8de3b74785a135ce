package email

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/emersion/go-message"
	// Registers the common non-UTF-8 charsets (ISO-8859-*, Windows-125*,
	// Shift_JIS, ...) with go-message; a charset it does not know leaves
	// a part's bytes as they are.
	_ "github.com/emersion/go-message/charset"
	"golang.org/x/net/html"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

// Bounds on a message's MIME structure: the size limit alone would let a
// few megabytes of nested boundaries cost gigabytes of readers.
const (
	maxDepth       = 8   // nested multiparts
	maxParts       = 256 // parts of every kind
	maxAttachments = 64  // stored; the rest are counted as skipped
)

var errTooComplex = errors.New("email: the MIME structure is too deep or has too many parts")

// body is what a message's MIME tree holds for the daemon.
type body struct {
	text        string
	attachments []channel.Attachment
	skipped     int // attachments beyond maxAttachments, not stored
}

// readBody walks e's MIME tree: inline text/plain parts are the text
// (text/html, crudely converted, only when there is no plain part, as in
// a multipart/alternative); every other part is stored in st as an
// attachment.
func readBody(e *message.Entity, st *store) (body, error) {
	w := walker{st: st}
	if err := w.walk(e, 0); err != nil {
		return body{}, err
	}
	b := body{attachments: w.attachments, skipped: w.skipped}
	switch {
	case len(w.plain) > 0:
		b.text = strings.Join(w.plain, "\n\n")
	case len(w.html) > 0:
		b.text = htmlText(strings.Join(w.html, "\n"))
	}
	b.text = strings.ToValidUTF8(b.text, "\uFFFD")
	return b, nil
}

type walker struct {
	st          *store
	parts       int
	plain, html []string
	attachments []channel.Attachment
	skipped     int
}

// usable is whether a part go-message returned with err can be read: an
// unknown charset or transfer encoding leaves its bytes undecoded, which
// is still worth reading.
func usable(err error) bool {
	return err == nil || message.IsUnknownCharset(err) || message.IsUnknownEncoding(err)
}

func (w *walker) walk(e *message.Entity, depth int) error {
	w.parts++
	if w.parts > maxParts || depth > maxDepth {
		return errTooComplex
	}
	if mr := e.MultipartReader(); mr != nil {
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return nil
			}
			if !usable(err) {
				return fmt.Errorf("email: reading a MIME part: %w", err)
			}
			if err := w.walk(p, depth+1); err != nil {
				return err
			}
		}
	}
	return w.leaf(e)
}

func (w *walker) leaf(e *message.Entity) error {
	mediaType, params, _ := e.Header.ContentType()
	disp, dparams, _ := e.Header.ContentDisposition()
	name := dparams["filename"]
	if name == "" {
		name = params["name"]
	}
	inline := disp != "attachment" && name == ""
	switch {
	case inline && (mediaType == "" || mediaType == "text/plain"):
		s, err := readText(e.Body)
		w.plain = append(w.plain, s)
		return err
	case inline && mediaType == "text/html":
		s, err := readText(e.Body)
		w.html = append(w.html, s)
		return err
	}
	if len(w.attachments) >= maxAttachments {
		w.skipped++
		_, err := io.Copy(io.Discard, e.Body)
		return readErr(err)
	}
	a, err := w.st.add(name, mediaType, e.Body)
	if err != nil {
		return err
	}
	w.attachments = append(w.attachments, a)
	return nil
}

func readText(r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	return string(b), readErr(err)
}

func readErr(err error) error {
	if err != nil {
		return fmt.Errorf("email: reading a MIME part's body: %w", err)
	}
	return nil
}

// htmlText turns HTML into text crudely: the text nodes, a line break at
// each block element, script and style dropped. Links, tables and
// entities beyond what the tokenizer decodes get no special treatment.
func htmlText(s string) string {
	z := html.NewTokenizer(strings.NewReader(s))
	var b strings.Builder
	skip := 0
	for {
		switch tt := z.Next(); tt {
		case html.ErrorToken:
			return strings.TrimSpace(collapseBlankLines(b.String()))
		case html.TextToken:
			if skip == 0 {
				b.WriteString(strings.Join(strings.Fields(string(z.Text())), " "))
			}
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "head", "title":
				if tt == html.StartTagToken {
					skip++
				} else if tt == html.EndTagToken && skip > 0 {
					skip--
				}
			case "br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "table", "ul", "ol":
				b.WriteByte('\n')
			default:
				b.WriteByte(' ')
			}
		}
	}
}

func collapseBlankLines(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	blank := 0
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			blank++
			if blank > 1 {
				continue
			}
		} else {
			blank = 0
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
