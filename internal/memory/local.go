package memory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// LocalModelName is the local embedder's model family; Model() adds the
// version of the vectors it learned.
const LocalModelName = "fluffy-ri-v1"

// Random indexing parameters: each word has a fixed sparse random index
// vector (derived from its hash, so nothing is stored for it); a word's
// learned vector is the sum of its neighbours' index vectors within
// localWindow words either side, each weighted by the square of its IDF.
// The window and the squared weights were chosen on the labelled set
// (eval_test.go): windows of 3 and 5 caught fewer paraphrases, 12 and 30
// blurred topics together; squaring the IDF lifts rare, telling words
// over the words every note has.
const (
	localDim     = 256
	localNonZero = 8
	localWindow  = 8
	localMinDocs = 2
)

// Local is the offline embedder: word vectors learned by random
// indexing from the person's own memory corpus, averaged per text
// (IDF-weighted). It needs no download and sends nothing anywhere.
// Until it has learned (Learn), it has no vectors and Embed fails with
// ErrNoModel. Safe for concurrent use: a search embeds its query while
// the daemon's watcher may have the model learn again.
type Local struct {
	// mu guards the model; Learn builds a new one outside it and swaps.
	mu      sync.RWMutex
	words   map[string][]float32
	idf     map[string]float32
	version string
	tokens  int // corpus size it learned from, in tokens
}

var _ Embedder = (*Local)(nil)

// ErrNoModel is Local.Embed's error before it has learned any words.
var ErrNoModel = errors.New("memory: the local embedding model has not learned any words yet")

// Model names the learned vectors: family and a digest of the model.
func (l *Local) Model() string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.version == "" {
		return LocalModelName
	}
	return LocalModelName + "@" + l.version
}

// Tokens is the corpus size, in tokens, the model last learned from.
func (l *Local) Tokens() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tokens
}

// Embed averages each text's known words' vectors; a text with no
// known word gets a zero vector (never similar to anything).
func (l *Local) Embed(_ context.Context, texts []string) ([][]float32, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.words) == 0 {
		return nil, ErrNoModel
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, localDim)
		for _, w := range Tokenize(t) {
			wv, ok := l.words[w]
			if !ok {
				continue
			}
			f := l.idf[w] * l.idf[w]
			for d := range v {
				v[d] += f * wv[d]
			}
		}
		normalize(v)
		out[i] = v
	}
	return out, nil
}

// Learn replaces the model with one learned from corpus (each element a
// document: a chunk).
func (l *Local) Learn(ctx context.Context, corpus []string) error {
	docs := make([][]string, len(corpus))
	df := map[string]int{}
	tokens := 0
	for i, c := range corpus {
		docs[i] = Tokenize(c)
		tokens += len(docs[i])
		seen := map[string]bool{}
		for _, w := range docs[i] {
			if !seen[w] {
				seen[w] = true
				df[w]++
			}
		}
	}
	n := float64(len(corpus))
	idf := make(map[string]float32, len(df))
	for w, c := range df {
		if c >= localMinDocs {
			idf[w] = float32(math.Log(1 + n/float64(c)))
		}
	}
	words := make(map[string][]float32, len(idf))
	for i, doc := range docs {
		if i%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		for p, w := range doc {
			if _, ok := idf[w]; !ok {
				continue
			}
			v := words[w]
			if v == nil {
				v = make([]float32, localDim)
				words[w] = v
			}
			for q := max(0, p-localWindow); q <= min(len(doc)-1, p+localWindow); q++ {
				c := doc[q]
				f, ok := idf[c]
				if q == p || !ok {
					continue
				}
				addIndex(v, c, f*f)
			}
		}
	}
	// Remove the component all words share (frequent contexts), then
	// normalize: otherwise every pair of words looks alike.
	mean := make([]float64, localDim)
	for _, v := range words {
		normalize(v)
		for d, x := range v {
			mean[d] += float64(x)
		}
	}
	for _, v := range words {
		for d := range v {
			v[d] -= float32(mean[d] / float64(len(words)))
		}
		normalize(v)
	}
	sum := sha256.Sum256(encodeLocal(words, idf, tokens))
	l.mu.Lock()
	l.words, l.idf, l.tokens = words, idf, tokens
	l.version = hex.EncodeToString(sum[:6])
	l.mu.Unlock()
	return nil
}

// addIndex adds f times word's sparse random index vector to v.
func addIndex(v []float32, word string, f float32) {
	h := fnv.New64a()
	h.Write([]byte(word))
	s := h.Sum64()
	for range localNonZero {
		s = s*6364136223846793005 + 1442695040888963407
		pos := int((s >> 33) % localDim)
		if s&(1<<20) != 0 {
			v[pos] += f
		} else {
			v[pos] -= f
		}
	}
}

// marshal is the model's bytes: words in order, each with IDF and vector.
func (l *Local) marshal() []byte {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return encodeLocal(l.words, l.idf, l.tokens)
}

// encodeLocal is marshal's encoding of a model's parts.
func encodeLocal(words map[string][]float32, idf map[string]float32, tokens int) []byte {
	ws := make([]string, 0, len(words))
	for w := range words {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	var b bytes.Buffer
	b.WriteString(LocalModelName + "\n")
	binary.Write(&b, binary.LittleEndian, uint32(tokens))
	binary.Write(&b, binary.LittleEndian, uint32(len(ws)))
	for _, w := range ws {
		binary.Write(&b, binary.LittleEndian, uint16(len(w)))
		b.WriteString(w)
		binary.Write(&b, binary.LittleEndian, idf[w])
		binary.Write(&b, binary.LittleEndian, words[w])
	}
	return b.Bytes()
}

// MarshalBinary encodes the learned model, for the index to keep.
func (l *Local) MarshalBinary() ([]byte, error) { return l.marshal(), nil }

// UnmarshalBinary restores a model MarshalBinary encoded.
func (l *Local) UnmarshalBinary(data []byte) error {
	r := bytes.NewReader(data)
	head := LocalModelName + "\n"
	if !bytes.HasPrefix(data, []byte(head)) {
		return fmt.Errorf("memory: stored local model is not %s", LocalModelName)
	}
	r.Seek(int64(len(head)), 0)
	var tokens, n uint32
	if err := binary.Read(r, binary.LittleEndian, &tokens); err != nil {
		return fmt.Errorf("memory: stored local model: %w", err)
	}
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return fmt.Errorf("memory: stored local model: %w", err)
	}
	words := make(map[string][]float32, n)
	idf := make(map[string]float32, n)
	for range n {
		var wl uint16
		if err := binary.Read(r, binary.LittleEndian, &wl); err != nil {
			return fmt.Errorf("memory: stored local model: %w", err)
		}
		w := make([]byte, wl)
		if _, err := r.Read(w); err != nil && wl > 0 {
			return fmt.Errorf("memory: stored local model: %w", err)
		}
		var f float32
		v := make([]float32, localDim)
		if err := binary.Read(r, binary.LittleEndian, &f); err != nil {
			return fmt.Errorf("memory: stored local model: %w", err)
		}
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			return fmt.Errorf("memory: stored local model: %w", err)
		}
		words[string(w)], idf[string(w)] = v, f
	}
	sum := sha256.Sum256(data)
	l.mu.Lock()
	l.words, l.idf, l.tokens = words, idf, int(tokens)
	l.version = hex.EncodeToString(sum[:6])
	l.mu.Unlock()
	return nil
}

func normalize(v []float32) {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
}

// dot is a·b for vectors of one length, four sums at a time.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

// Tokenize is the local model's view of a text: lower-case words of
// letters and digits, two characters or more, without stop words.
func Tokenize(s string) []string {
	f := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	out := f[:0]
	for _, w := range f {
		if len(w) < 2 || stopWords[w] {
			continue
		}
		out = append(out, w)
	}
	return out
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again all also am an and any are as at be because been
before being below between both but by can could did do does doing done down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours
yourself get got going let lets may might must shall us ll ve re don didn doesn isn wasn won`) {
		m[w] = true
	}
	return m
}()

// forget drops what l learned, as if it never had (a full rebuild).
func (l *Local) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.words, l.idf, l.version, l.tokens = nil, nil, "", 0
}
