package skill

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Rule names what a scanner finding is about. The rules are the tricks
// supply-chain attacks on skill registries used (docs/skills.md).
type Rule string

// The scanner's rules.
const (
	// RuleEncodedPipe: decoded text piped into a shell (base64 -d | sh,
	// xxd -r | bash, echo ... | sh).
	RuleEncodedPipe Rule = "encoded-pipe"
	// RuleFetchRun: something fetched and run at once (curl ... | sh,
	// wget -O- ... | bash, bash <(curl ...), pip install from a URL).
	RuleFetchRun Rule = "fetch-and-run"
	// RuleEval: eval of a command's output (eval "$(...)").
	RuleEval Rule = "eval"
	// RuleEncryptedArchive: a password-protected archive, or one fluffy
	// cannot look inside (7z, rar).
	RuleEncryptedArchive Rule = "encrypted-archive"
	// RuleBinary: an executable binary (ELF, Mach-O, PE).
	RuleBinary Rule = "binary"
	// RuleHiddenExec: a hidden file that is executable.
	RuleHiddenExec Rule = "hidden-executable"
)

// Finding is one thing the scanner flags: where and why.
type Finding struct {
	// File is the path inside the skill's folder, slash-separated.
	File string `json:"file"`
	// Line is 1-based; 0 for a finding about the whole file.
	Line int    `json:"line,omitempty"`
	Rule Rule   `json:"rule"`
	Why  string `json:"why"`
}

func (f Finding) String() string {
	if f.Line > 0 {
		return fmt.Sprintf("%s:%d: %s: %s", f.File, f.Line, f.Rule, f.Why)
	}
	return fmt.Sprintf("%s: %s: %s", f.File, f.Rule, f.Why)
}

// maxScanBytes bounds how much of one file the scanner reads for its
// text rules; magic numbers are at the start, and a skill's instructions
// and scripts are far smaller.
const maxScanBytes = 4 << 20

// Scan walks fsys (a skill's folder) and returns what it flags, sorted by
// file and line. It reads files only; it runs nothing. A file it cannot
// read is an error: a folder the scanner did not see whole is not clean.
func Scan(fsys fs.FS) ([]Finding, error) {
	var out []Finding
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && d.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			// Links and devices are the installer's to refuse; the
			// scanner judges contents.
			return nil
		}
		data, err := readPrefix(fsys, p, maxScanBytes)
		if err != nil {
			return err
		}
		out = append(out, ScanFile(p, info.Mode(), data)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("skill: scan: %w", err)
	}
	sortFindings(out)
	return out, nil
}

func readPrefix(fsys fs.FS, p string, n int) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	buf := make([]byte, 32<<10)
	for b.Len() < n {
		k, err := f.Read(buf[:min(len(buf), n-b.Len())])
		b.Write(buf[:k])
		if err != nil {
			break
		}
	}
	return b.Bytes(), nil
}

func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(string(a.Rule), string(b.Rule))
	})
}

// ScanFile judges one file: name is its slash path inside the folder,
// mode its mode, data its contents (or their first maxScanBytes).
func ScanFile(name string, mode fs.FileMode, data []byte) []Finding {
	var out []Finding
	kind := magic(data)
	hidden := strings.HasPrefix(path.Base(name), ".")
	switch kind {
	case "":
	case "zip":
		if why := zipEncrypted(data); why != "" {
			out = append(out, Finding{File: name, Rule: RuleEncryptedArchive, Why: why})
		}
	case "7z", "rar":
		out = append(out, Finding{File: name, Rule: RuleEncryptedArchive, Why: "a " + kind + " archive: it can be password-protected and fluffy cannot look inside it"})
	default:
		out = append(out, Finding{File: name, Rule: RuleBinary, Why: "an executable binary (" + kind + "): what it does cannot be read"})
	}
	executable := mode&0o111 != 0 || bytes.HasPrefix(data, []byte("#!")) || (kind != "" && kind != "zip" && kind != "7z" && kind != "rar")
	if hidden && executable {
		out = append(out, Finding{File: name, Rule: RuleHiddenExec, Why: "a hidden file that is executable"})
	}
	if kind == "" && isText(data) {
		out = append(out, scanText(name, string(data))...)
	}
	return out
}

// magic names the file type its first bytes declare, "" for none the
// scanner cares about.
func magic(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x7fELF")):
		return "ELF"
	case len(b) >= 4 && machO(binary.BigEndian.Uint32(b)):
		return "Mach-O"
	case bytes.HasPrefix(b, []byte("MZ")) && isPE(b):
		return "PE"
	case bytes.HasPrefix(b, []byte("PK\x03\x04")), bytes.HasPrefix(b, []byte("PK\x05\x06")):
		return "zip"
	case bytes.HasPrefix(b, []byte("7z\xbc\xaf\x27\x1c")):
		return "7z"
	case bytes.HasPrefix(b, []byte("Rar!\x1a\x07")):
		return "rar"
	}
	return ""
}

func machO(m uint32) bool {
	switch m {
	case 0xfeedface, 0xfeedfacf, 0xcefaedfe, 0xcffaedfe:
		return true
	case 0xcafebabe:
		// A fat binary; Java class files share the magic, and are just as
		// unreadable.
		return true
	}
	return false
}

// isPE: a DOS header whose e_lfanew points at "PE\0\0".
func isPE(b []byte) bool {
	if len(b) < 0x40 {
		return false
	}
	off := int(binary.LittleEndian.Uint32(b[0x3c:]))
	return off >= 0x40 && off+4 <= len(b) && string(b[off:off+4]) == "PE\x00\x00"
}

// zipEncrypted says why a zip archive is flagged, "" when it is not: an
// entry with the encryption bit set, or an archive too malformed to list
// (its entries cannot be checked).
func zipEncrypted(b []byte) string {
	r, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		// Fall back to the local headers, which precede each entry.
		for i := 0; i+8 <= len(b); {
			j := bytes.Index(b[i:], []byte("PK\x03\x04"))
			if j < 0 || i+j+8 > len(b) {
				break
			}
			if binary.LittleEndian.Uint16(b[i+j+6:])&1 != 0 {
				return "a password-protected zip archive: fluffy cannot look inside it"
			}
			i += j + 4
		}
		return "a zip archive fluffy cannot list (" + err.Error() + "), so cannot look inside"
	}
	for _, f := range r.File {
		if f.Flags&1 != 0 {
			return fmt.Sprintf("a password-protected zip archive (entry %q is encrypted): fluffy cannot look inside it", f.Name)
		}
	}
	return ""
}

// isText: no NUL byte in the first 8 KiB, the test git and diff use.
func isText(b []byte) bool {
	return !bytes.Contains(b[:min(len(b), 8<<10)], []byte{0})
}

// A textRule flags a (logical) line matching re.
type textRule struct {
	rule Rule
	re   *regexp.Regexp
	why  string
	// notMarkdown: in Markdown a backquote opens a code span, not a
	// command substitution.
	notMarkdown bool
}

// shells are the interpreters a pipe into which runs the text.
const shells = `(?:sudo\s+(?:-\S+\s+)*)?(?:/usr)?(?:/bin/)?(?:ba|z|da|k|fi)?sh|(?:sudo\s+)?(?:python[0-9.]*|perl|ruby|node|php)`

var textRules = []textRule{
	{rule: RuleEncodedPipe, re: regexp.MustCompile(`(?i)\b(?:base64\s+(?:-\S*d\S*|--decode)|base32\s+(?:-\S*d\S*|--decode)|xxd\s+(?:-\S+\s+)*-r|openssl\s+(?:enc\s+)?-?base64\s+-d)\b[^|\n]*\|\s*(?:` + shells + `)\b`),
		why: "decoded text is piped into an interpreter: what runs cannot be read here"},
	{rule: RuleEncodedPipe, re: regexp.MustCompile(`\b(?:echo|printf)\s[^|\n]*\|\s*(?:` + shells + `)\b`),
		why: "text is piped into a shell: the instruction hides the command it runs"},
	{rule: RuleFetchRun, re: regexp.MustCompile(`(?i)\b(?:curl|wget|fetch|iwr|invoke-webrequest)\b[^|\n]*\|\s*(?:` + shells + `|iex)\b`),
		why: "a download is piped into an interpreter: it runs whatever the server sends"},
	{rule: RuleFetchRun, re: regexp.MustCompile(`(?i)(?:<\(|\$\()\s*(?:curl|wget)\b`),
		why: "a download runs through a command substitution: it runs whatever the server sends"},
	{rule: RuleFetchRun, re: regexp.MustCompile("(?i)`\\s*(?:curl|wget)\\b"), notMarkdown: true,
		why: "a download runs through a command substitution: it runs whatever the server sends"},
	{rule: RuleFetchRun, re: regexp.MustCompile(`(?i)\bpip[0-9.]*\s+install\b[^\n]*?(?:https?://|git\+|ftp://|--index-url|--extra-index-url|-i\s+https?:)`),
		why: "a package is installed from a URL or another index: the registry's checks do not apply"},
	{rule: RuleEval, re: regexp.MustCompile(`\beval\s+["']?(?:\$\(|` + "`" + `)`),
		why: "eval runs a command's output: what runs is decided when it runs"},
}

// scanText applies the text rules to each logical line (backslash-newline
// continuations joined; the finding names the first line).
func scanText(name, s string) []Finding {
	var out []Finding
	markdown := strings.HasSuffix(strings.ToLower(name), ".md")
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		start := i
		line := lines[i]
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + lines[i]
		}
		seen := map[Rule]bool{}
		for _, r := range textRules {
			if seen[r.rule] || (markdown && r.notMarkdown) || !r.re.MatchString(line) {
				continue
			}
			seen[r.rule] = true
			out = append(out, Finding{File: name, Line: start + 1, Rule: r.rule, Why: r.why})
		}
	}
	return out
}
