package embed

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/memory"
)

var update = flag.Bool("update", false, "rewrite the golden request files in testdata/")

// standIn is a local stand-in for a provider's embeddings endpoint: it
// keeps every request and answers each with answer(body).
type standIn struct {
	mu       sync.Mutex
	paths    []string
	bodies   [][]byte
	keys     []string
	answer   func(body []byte) []byte
	srv      *httptest.Server
	requests int
}

func newStandIn(t *testing.T, answer func([]byte) []byte) *standIn {
	s := &standIn{answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.paths = append(s.paths, r.Method+" "+r.URL.Path)
		s.bodies = append(s.bodies, body)
		s.keys = append(s.keys, r.Header.Get("Authorization")+r.Header.Get("X-Goog-Api-Key"))
		s.requests++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(s.answer(body))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *standIn) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// golden compares got (JSON) with testdata/name, indented.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, got, "", "  "); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", name, err, got)
	}
	b.WriteByte('\n')
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("%s differs:\n%s\nwant:\n%s", name, b.Bytes(), want)
	}
}

func file(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpenAIWireFormat(t *testing.T) {
	resp := file(t, "openai_response.json")
	s := newStandIn(t, func([]byte) []byte { return resp })
	e, err := New(t.Context(), Options{Provider: OpenAI, BaseURL: s.srv.URL + "/v1", APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Model() != "openai:text-embedding-3-small" {
		t.Errorf("model %q", e.Model())
	}
	vs, err := e.Embed(t.Context(), []string{"The cat is called Miso.", "Dentist on Elm Street."})
	if err != nil {
		t.Fatal(err)
	}
	// The answer lists the second text first: vectors follow the index.
	if fmt.Sprint(vs) != "[[0.1 0.2 0.3] [0.4 0.5 0.6]]" {
		t.Errorf("vectors %v", vs)
	}
	if s.paths[0] != "POST /v1/embeddings" || s.keys[0] != "Bearer sk-test" {
		t.Errorf("request %s, key %q", s.paths[0], s.keys[0])
	}
	golden(t, "openai_request.json", s.bodies[0])
}

func TestOllamaNeedsNoKey(t *testing.T) {
	resp := file(t, "openai_response.json")
	s := newStandIn(t, func([]byte) []byte { return resp })
	e, err := New(t.Context(), Options{Provider: Ollama, Model: "nomic-embed-text", BaseURL: s.srv.URL + "/v1/"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Model() != "ollama:nomic-embed-text" {
		t.Errorf("model %q", e.Model())
	}
	if _, err := e.Embed(t.Context(), []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), Options{Provider: OpenAI}); err == nil {
		t.Error("openai without a key")
	}
}

func TestGeminiWireFormat(t *testing.T) {
	resp := file(t, "gemini_response.json")
	s := newStandIn(t, func([]byte) []byte { return resp })
	e, err := New(t.Context(), Options{Provider: Gemini, BaseURL: s.srv.URL + "/", APIKey: "g-test"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Model() != "gemini:gemini-embedding-001" {
		t.Errorf("model %q", e.Model())
	}
	vs, err := e.Embed(t.Context(), []string{"The cat is called Miso.", "Dentist on Elm Street."})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(vs) != "[[0.1 0.2 0.3] [0.4 0.5 0.6]]" {
		t.Errorf("vectors %v", vs)
	}
	if s.paths[0] != "POST /v1beta/models/gemini-embedding-001:batchEmbedContents" || s.keys[0] != "g-test" {
		t.Errorf("request %s, key %q", s.paths[0], s.keys[0])
	}
	golden(t, "gemini_request.json", s.bodies[0])
}

// fakeVectors answers an OpenAI embeddings request with one vector per
// input (its length and a constant), listed in reverse.
func fakeVectors(body []byte) []byte {
	var req struct {
		Input []string `json:"input"`
	}
	json.Unmarshal(body, &req)
	var data []string
	for i := len(req.Input) - 1; i >= 0; i-- {
		data = append(data, fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":[%d,1]}`, i, len(req.Input[i])))
	}
	return fmt.Appendf(nil, `{"object":"list","model":"m","data":[%s],"usage":{"prompt_tokens":1,"total_tokens":1}}`, strings.Join(data, ","))
}

func TestBatches(t *testing.T) {
	s := newStandIn(t, fakeVectors)
	e, err := New(t.Context(), Options{Provider: OpenAI, BaseURL: s.srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, 130)
	for i := range texts {
		texts[i] = strings.Repeat("x", i+1)
	}
	vs, err := e.Embed(t.Context(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if s.count() != 3 {
		t.Errorf("%d requests for 130 texts, want 3 (64, 64, 2)", s.count())
	}
	for i, v := range vs {
		if int(v[0]) != i+1 {
			t.Fatalf("vector %d is text %v's", i, v[0])
		}
	}
}

// TestIndexReembedsOnAModelChange: through the memory index, an unchanged
// passage is not sent again (the cache by content hash and model), and a
// new model name sends every passage again.
func TestIndexReembedsOnAModelChange(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "MEMORY.md"), []byte("# Memory\n\n## Pets\n\nA cat named Miso.\n\n## Work\n\nWrites Go.\n"), 0o600)
	db := filepath.Join(t.TempDir(), "index.db")
	s := newStandIn(t, fakeVectors)
	sync := func(model string) int {
		t.Helper()
		before := s.count()
		e, err := New(t.Context(), Options{Provider: OpenAI, Model: model, BaseURL: s.srv.URL, APIKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		x, err := memory.Open(t.Context(), memory.Options{Root: root, DB: db, Embedder: e})
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if _, err := x.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		st, err := x.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Vectors == 0 || st.Model != "openai:"+model {
			t.Fatalf("stats %+v", st)
		}
		return s.count() - before
	}
	if n := sync("text-embedding-3-small"); n == 0 {
		t.Fatal("the first sync embedded nothing")
	}
	if n := sync("text-embedding-3-small"); n != 0 {
		t.Errorf("the same model embedded again (%d requests)", n)
	}
	if n := sync("text-embedding-3-large"); n == 0 {
		t.Error("a new model did not embed again")
	}
}
