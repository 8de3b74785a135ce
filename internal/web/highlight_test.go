package web_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestDiffHighlighted(t *testing.T) {
	c := newConsole(t)
	c.changes.diff = "--- a/a.go\n+++ b/a.go\n@@ -1,4 +1,5 @@\n package main\n-var n = 1\n+/* a block\n+comment */\n+func f() string { return \"s\" }\n"
	cl, _ := c.login()
	for _, view := range []string{"unified", "split"} {
		page := c.get(cl, "/sessions/s1/changes?view="+view, http.StatusOK)
		for _, want := range []string{
			`<span class="hl-k">package</span>`,
			`<span class="hl-f">f</span>`,
			`<span class="hl-s">&#34;s&#34;</span>`,
			// The second line of the comment, lexed with its hunk.
			`<span class="hl-c">comment */</span>`,
			`<span class="hl-n">1</span>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("%s view: no %s in\n%s", view, want, page)
			}
		}
		if strings.Contains(page, "style=") {
			t.Errorf("%s view: an inline style", view)
		}
	}
}

// spanTags are the highlighter's tags, to read a page's text.
var spanTags = regexp.MustCompile(`<span class="hl-[a-z]">|</span>`)

func TestDiffHighlightEscapes(t *testing.T) {
	c := newConsole(t)
	c.changes.diff = "--- a/x.js\n+++ b/x.js\n@@ -1 +1,2 @@\n-let a = '<script>window.pwned=1</script>'\n+// </span><script>window.pwned=2</script>\n+document.write(\"<img src=x onerror=alert(1)>\")\n" +
		"--- a/p.html\n+++ b/p.html\n@@ -0,0 +1 @@\n+<script>window.pwned=3</script>\n" +
		"--- a/notes\n+++ b/notes\n@@ -0,0 +1 @@\n+<script>window.pwned=4</script>\n"
	cl, _ := c.login()
	for _, view := range []string{"unified", "split"} {
		page := c.get(cl, "/sessions/s1/changes?view="+view, http.StatusOK)
		if strings.Contains(page, "<script>window") || strings.Contains(page, "<img") || strings.Contains(page, "</span><script>") {
			t.Errorf("%s view: markup from the diff is live:\n%s", view, page)
		}
		text := spanTags.ReplaceAllString(page, "")
		for i := 1; i <= 4; i++ {
			if !strings.Contains(text, "window.pwned="+strconv.Itoa(i)) {
				t.Errorf("%s view: line %d is missing", view, i)
			}
		}
		if !strings.Contains(page, `class="hl-c"`) || !strings.Contains(page, `class="hl-s"`) {
			t.Errorf("%s view: the JavaScript is not highlighted", view)
		}
	}
}

func TestDiffHighlightLaterPage(t *testing.T) {
	c := newConsole(t)
	var d strings.Builder
	d.WriteString("--- a/big.go\n+++ b/big.go\n@@ -1,1200 +1,1200 @@\n")
	for range 1200 {
		d.WriteString("+return nil\n")
	}
	c.changes.diff = d.String()
	cl, _ := c.login()
	page := c.get(cl, "/sessions/s1/changes?page=2", http.StatusOK)
	if !strings.Contains(page, `<span class="hl-k">return</span>`) {
		t.Errorf("page 2, inside big.go's hunk, is not highlighted:\n%.2000s", page)
	}
}
