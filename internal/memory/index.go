package memory

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// CoreFile is the core memory file at the workspace root; Dir holds the
// daily logs (Dir/YYYY-MM-DD.md) and any other note.
const (
	CoreFile = "MEMORY.md"
	Dir      = "memory"
)

// Embedder turns texts into vectors, one per text, all of one length.
// Model names the model and its version: a vector stored under another
// name is made again. Embed returns an error for the whole batch or
// none; the index then searches full text alone.
type Embedder interface {
	Model() string
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Options configure an Index. Root and DB are required.
type Options struct {
	// Root is the assistant workspace: CoreFile and Dir are in it.
	Root string
	// DB is the index's database file (<data>/memory/index.db).
	DB string
	// Embedder makes the vectors; nil means full text only. The
	// default, *Local, learns from the indexed chunks, and learns again
	// when the corpus has grown or shrunk by a quarter since.
	Embedder Embedder
	// Logger, optional.
	Logger *slog.Logger
	// Sources are folders indexed read-only besides the memory files
	// (memory.sources), as sources/NAME/...; Sync scans them and the
	// watcher follows them.
	Sources []Source
	// Lock, optional, is the index's lock (Lock) the caller already
	// holds and keeps after Close; without it Open takes the lock
	// itself, trying once, and Close lets it go.
	Lock *lockfile.Lock
}

// Index is the memory index: files, chunks, full text and vectors.
// Safe for concurrent use.
type Index struct {
	o   Options
	db  *store.DB
	log *slog.Logger
	// lock is the lock Open took (nil when the caller holds it, or for
	// a reader); readOnly refuses every write.
	lock     *lockfile.Lock
	readOnly bool

	// mu guards the fields below and serializes writes.
	mu       sync.Mutex
	vecs     *vecTable // vecModel's vectors by chunk id
	vecModel string
}

// Skip is a file the index left out, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// SyncReport says what a Sync did.
type SyncReport struct {
	Indexed   int `json:"indexed"`
	Removed   int `json:"removed"`
	Unchanged int `json:"unchanged"`
	// Chunks is the number of chunks written.
	Chunks int `json:"chunks"`
	// Embedded is the number of vectors made (cache misses).
	Embedded int `json:"embedded"`
	// Learned is set when the local model learned again.
	Learned bool   `json:"learned,omitempty"`
	Skipped []Skip `json:"skipped,omitempty"`
}

// ErrOutside is returned for a path that is not a memory file: not
// CoreFile and not a Markdown file under Dir.
var ErrOutside = errors.New("not a memory file (MEMORY.md or memory/**/*.md)")

// ErrTooLarge is the reason a file over MaxFileBytes is refused.
var ErrTooLarge = fmt.Errorf("over the %d MiB limit for a memory file: split it into smaller notes", MaxFileBytes>>20)

// Open opens (creating) the index as its one writer: it holds the
// index's lock (Options.Lock, or one it takes, trying once: a
// *HeldError when another process holds it). It does not scan: call
// Sync.
func Open(ctx context.Context, o Options) (*Index, error) {
	if o.Root == "" || o.DB == "" {
		return nil, errors.New("memory: Options.Root and Options.DB are required")
	}
	var own *lockfile.Lock
	if o.Lock == nil {
		l, err := Lock(ctx, o.DB, 0)
		if err != nil {
			return nil, err
		}
		own = l
	}
	x, err := openDB(ctx, o)
	if err != nil {
		own.Release()
		return nil, err
	}
	x.lock = own
	return x, nil
}

// OpenReader opens the index held by another process (Open's
// *HeldError) to read it as it is: the holder keeps it current, and
// every write (Sync, SyncPaths, Rebuild, Watch) is ErrReadOnly.
func OpenReader(ctx context.Context, o Options) (*Index, error) {
	if o.Root == "" || o.DB == "" {
		return nil, errors.New("memory: Options.Root and Options.DB are required")
	}
	x, err := openDB(ctx, o)
	if err != nil {
		return nil, err
	}
	x.readOnly = true
	return x, nil
}

func openDB(ctx context.Context, o Options) (*Index, error) {
	sub, _ := fs.Sub(migrations, "migrations")
	db, err := store.Open(ctx, o.DB, store.Options{Migrations: sub, Synchronous: "NORMAL"})
	if err != nil {
		return nil, fmt.Errorf("memory: open the index: %w", err)
	}
	x := &Index{o: o, db: db, log: o.Logger}
	if x.log == nil {
		x.log = slog.New(slog.DiscardHandler)
	}
	if l, ok := o.Embedder.(*Local); ok {
		var blob []byte
		err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'local_model'`).Scan(&blob)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			db.Close()
			return nil, fmt.Errorf("memory: read the local model: %w", err)
		default:
			if err := l.UnmarshalBinary(blob); err != nil {
				x.log.Warn("memory: stored local model unreadable; it will learn again", "err", err)
			}
		}
	}
	if err := x.loadVectors(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return x, nil
}

// Close closes the database and lets go of the lock Open took.
func (x *Index) Close() error {
	err := x.db.Close()
	x.lock.Release()
	return err
}

// Root is the memory's workspace directory.
func (x *Index) Root() string { return x.o.Root }

// IsMemoryPath reports whether rel (slash-separated, relative to the
// workspace) names a memory file.
func IsMemoryPath(rel string) bool {
	if rel == CoreFile {
		return true
	}
	clean := path.Clean(rel)
	return clean == rel && strings.HasPrefix(rel, Dir+"/") && strings.HasSuffix(rel, ".md") && !strings.Contains(rel, "/../")
}

var dayRE = regexp.MustCompile(`^memory/(\d{4}-\d{2}-\d{2})\.md$`)

// dayOf is a daily log's date, "" for other files.
func dayOf(rel string) string {
	if m := dayRE.FindStringSubmatch(rel); m != nil {
		return m[1]
	}
	return ""
}

// list walks the memory files: CoreFile and Dir's Markdown files,
// regular files only (a symbolic link is not followed out).
func (x *Index) list(root *os.Root) ([]string, error) {
	var out []string
	if fi, err := root.Lstat(CoreFile); err == nil && fi.Mode().IsRegular() {
		out = append(out, CoreFile)
	}
	err := fs.WalkDir(root.FS(), Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		if d.Type().IsRegular() && IsMemoryPath(p) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// Sync brings the index in line with the files: a file whose content
// hash changed is chunked again, a file gone is removed, the others are
// left alone. Then vectors are made for chunks that have none under the
// current model (the local model relearning first when the corpus has
// changed enough).
func (x *Index) Sync(ctx context.Context) (SyncReport, error) {
	if x.readOnly {
		return SyncReport{}, ErrReadOnly
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.sync(ctx)
}

// sync is Sync with x.mu held.
func (x *Index) sync(ctx context.Context) (SyncReport, error) {
	var rep SyncReport
	root, err := os.OpenRoot(x.o.Root)
	if errors.Is(err, fs.ErrNotExist) {
		root = nil
	} else if err != nil {
		return rep, fmt.Errorf("memory: open the workspace: %w", err)
	}
	var files []string
	if root != nil {
		defer root.Close()
		if files, err = x.list(root); err != nil {
			return rep, fmt.Errorf("memory: list the memory files: %w", err)
		}
	}
	known, err := x.knownFiles(ctx)
	if err != nil {
		return rep, err
	}
	for _, rel := range files {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		changed, n, err := x.syncFile(ctx, root, rel, rel, known[rel])
		delete(known, rel)
		if err := x.count(ctx, &rep, rel, changed, n, err); err != nil {
			return rep, err
		}
	}
	if err := x.syncSources(ctx, &rep, known); err != nil {
		return rep, err
	}
	for rel := range known {
		if _, err := x.removeFile(ctx, rel); err != nil {
			return rep, err
		}
		rep.Removed++
	}
	if err := x.embed(ctx, &rep, nil); err != nil {
		return rep, err
	}
	return rep, nil
}

// count adds one file's sync outcome to rep: a file refused (too large)
// is reported and leaves the index; any other error stops the sync.
func (x *Index) count(ctx context.Context, rep *SyncReport, rel string, changed bool, chunks int, err error) error {
	var skip *skipError
	switch {
	case errors.As(err, &skip):
		rep.Skipped = append(rep.Skipped, Skip{Path: rel, Reason: skip.Error()})
		_, err := x.removeFile(ctx, rel)
		return err
	case err != nil:
		return err
	case changed:
		rep.Indexed++
		rep.Chunks += chunks
	default:
		rep.Unchanged++
	}
	return nil
}

// SyncPaths updates the given files only (a watcher's events): each is
// indexed again if its content changed, or removed if it is gone. A
// path is a memory file's or a source's (sources/NAME/...).
func (x *Index) SyncPaths(ctx context.Context, rels []string) (SyncReport, error) {
	if x.readOnly {
		return SyncReport{}, ErrReadOnly
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var rep SyncReport
	roots := map[string]*os.Root{}
	defer func() {
		for _, r := range roots {
			r.Close()
		}
	}()
	known, err := x.knownFiles(ctx)
	if err != nil {
		return rep, err
	}
	for _, rel := range rels {
		dir, in := x.o.Root, rel
		if s, p, ok := findSource(x.o.Sources, rel); ok {
			dir, in = s.Dir, p
		} else if !IsMemoryPath(rel) {
			continue
		}
		root, err := openRoot(roots, dir)
		if err != nil {
			return rep, err
		}
		var fi fs.FileInfo
		if root != nil {
			fi, err = root.Lstat(in)
		}
		if root == nil || err != nil || !fi.Mode().IsRegular() {
			if ok, err := x.removeFile(ctx, rel); err != nil {
				return rep, err
			} else if ok {
				rep.Removed++
			}
			continue
		}
		changed, n, err := x.syncFile(ctx, root, in, rel, known[rel])
		if err := x.count(ctx, &rep, rel, changed, n, err); err != nil {
			return rep, err
		}
	}
	if err := x.embed(ctx, &rep, rels); err != nil {
		return rep, err
	}
	return rep, nil
}

// openRoot opens dir once per SyncPaths (roots caches it); a folder
// that does not exist is a nil root: its files are gone.
func openRoot(roots map[string]*os.Root, dir string) (*os.Root, error) {
	if r, ok := roots[dir]; ok {
		return r, nil
	}
	r, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		r, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("memory: open %s: %w", dir, err)
	}
	roots[dir] = r
	return r, nil
}

// Rebuild empties the index and builds it again from the files: every
// chunk is made and embedded anew and the local model learns from
// scratch. It is `fluffy memory reindex --full` for a process that holds
// the index open (the daemon), which cannot delete the file under
// itself.
func (x *Index) Rebuild(ctx context.Context) (SyncReport, error) {
	if x.readOnly {
		return SyncReport{}, ErrReadOnly
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	err := x.db.Tx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{`DELETE FROM chunks_fts`, `DELETE FROM vectors`, `DELETE FROM chunks`, `DELETE FROM files`, `DELETE FROM meta`} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return SyncReport{}, fmt.Errorf("memory: empty the index: %w", err)
	}
	if l, ok := x.o.Embedder.(*Local); ok {
		l.forget()
	}
	x.vecs = newVecTable()
	if x.o.Embedder != nil {
		x.vecModel = x.o.Embedder.Model()
	}
	return x.sync(ctx)
}

func (x *Index) knownFiles(ctx context.Context) (map[string]string, error) {
	rows, err := x.db.QueryContext(ctx, `SELECT path, hash FROM files`)
	if err != nil {
		return nil, fmt.Errorf("memory: read the index: %w", err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var p, h string
		if err := rows.Scan(&p, &h); err != nil {
			return nil, fmt.Errorf("memory: read the index: %w", err)
		}
		m[p] = h
	}
	return m, rows.Err()
}

type skipError struct{ err error }

func (e *skipError) Error() string { return e.err.Error() }
func (e *skipError) Unwrap() error { return e.err }

// readFile reads a memory file through root, refusing one over the cap.
func readFile(root *os.Root, rel string) ([]byte, error) {
	f, err := root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &skipError{errors.New("not a regular file")}
	}
	if fi.Size() > MaxFileBytes {
		return nil, &skipError{fmt.Errorf("%s is %d MiB, %w", rel, fi.Size()>>20, ErrTooLarge)}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, &skipError{fmt.Errorf("%s grew while read, %w", rel, ErrTooLarge)}
	}
	return b, nil
}

// syncFile indexes the file in (read through root) as rel again when its
// hash is not old; it reports whether it did and how many chunks it
// wrote. in and rel differ for a source's file.
func (x *Index) syncFile(ctx context.Context, root *os.Root, in, rel, old string) (bool, int, error) {
	b, err := readFile(root, in)
	if err != nil {
		var skip *skipError
		if errors.As(err, &skip) {
			return false, 0, err
		}
		return false, 0, fmt.Errorf("memory: read %s: %w", rel, err)
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	if h == old {
		return false, 0, nil
	}
	chunks := Split(string(b), MaxChunkBytes)
	err = x.db.Tx(ctx, func(tx *sql.Tx) error {
		if err := deleteFile(ctx, tx, rel); err != nil {
			return err
		}
		tokens := 0
		for _, c := range chunks {
			tokens += len(Tokenize(c.Heading + "\n" + c.Text))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO files(path, hash, size, tokens, day) VALUES (?, ?, ?, ?, ?)`, rel, h, len(b), tokens, dayOf(rel)); err != nil {
			return err
		}
		for _, c := range chunks {
			ch := sha256.Sum256([]byte(c.Heading + "\x00" + c.Text))
			res, err := tx.ExecContext(ctx, `INSERT INTO chunks(path, heading, start_line, end_line, text, hash) VALUES (?, ?, ?, ?, ?, ?)`,
				rel, c.Heading, c.StartLine, c.EndLine, c.Text, hex.EncodeToString(ch[:]))
			if err != nil {
				return err
			}
			id, _ := res.LastInsertId()
			if _, err := tx.ExecContext(ctx, `INSERT INTO chunks_fts(rowid, heading, text) VALUES (?, ?, ?)`, id, c.Heading, c.Text); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("memory: index %s: %w", rel, err)
	}
	x.dropVectors(rel)
	return true, len(chunks), nil
}

func deleteFile(ctx context.Context, tx *sql.Tx, rel string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE path = ?)`, rel); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE path = ?`, rel); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM files WHERE path = ?`, rel)
	return err
}

// removeFile drops rel from the index, reporting whether it was there.
func (x *Index) removeFile(ctx context.Context, rel string) (bool, error) {
	var n int
	if err := x.db.QueryRowContext(ctx, `SELECT count(*) FROM files WHERE path = ?`, rel).Scan(&n); err != nil {
		return false, fmt.Errorf("memory: remove %s: %w", rel, err)
	}
	if n == 0 {
		return false, nil
	}
	if err := x.db.Tx(ctx, func(tx *sql.Tx) error { return deleteFile(ctx, tx, rel) }); err != nil {
		return false, fmt.Errorf("memory: remove %s: %w", rel, err)
	}
	x.dropVectors(rel)
	return true, nil
}

func (x *Index) dropVectors(rel string) {
	x.vecs.dropPath(rel)
}

// relearn is how far the corpus may drift (in tokens, either way) from
// what the local model learned before it learns again.
const relearn = 0.25

// embed makes the vectors chunks lack under the current model, after
// the local model learns again if the corpus drifted. Without an
// embedder it does nothing; an embedder's failure is logged and leaves
// search on full text.
func (x *Index) embed(ctx context.Context, rep *SyncReport, paths []string) error {
	e := x.o.Embedder
	if e == nil {
		return nil
	}
	if l, ok := e.(*Local); ok {
		learned, err := x.maybeLearn(ctx, l)
		if err != nil {
			return err
		}
		rep.Learned = learned
		if learned {
			x.vecs = newVecTable()
			paths = nil // every chunk needs the new model's vector
		}
		if l.Tokens() == 0 {
			return nil // nothing learned yet: full text only
		}
	}
	model := e.Model()
	if model != x.vecModel {
		x.vecs, x.vecModel = newVecTable(), model
		paths = nil
	} else if paths == nil && rep.Indexed == 0 && rep.Removed == 0 {
		// A scan that changed nothing: when every chunk has its vector
		// in memory, there is nothing to read (a session's search
		// scans at every call).
		var n int
		if err := x.db.QueryRowContext(ctx, `SELECT count(*) FROM chunks`).Scan(&n); err != nil {
			return fmt.Errorf("memory: count chunks: %w", err)
		}
		if n == x.vecs.len() {
			return nil
		}
	}
	q, args := `SELECT c.id, c.path, c.heading, c.text, c.hash, f.day, v.vec FROM chunks c JOIN files f ON f.path = c.path
		LEFT JOIN vectors v ON v.hash = c.hash AND v.model = ?`, []any{model}
	if paths != nil {
		// Only the files synced: the others' vectors are in x.vecs.
		q += ` WHERE c.path IN (SELECT value FROM json_each(?))`
		js, _ := json.Marshal(paths)
		args = append(args, string(js))
	}
	rows, err := x.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("memory: read chunks: %w", err)
	}
	type want struct {
		id              int64
		path, day, hash string
		text            string
	}
	var todo []want
	for rows.Next() {
		var (
			w             want
			heading, text string
			blob          []byte
		)
		if err := rows.Scan(&w.id, &w.path, &heading, &text, &w.hash, &w.day, &blob); err != nil {
			rows.Close()
			return fmt.Errorf("memory: read chunks: %w", err)
		}
		if x.vecs.has(w.id) {
			continue
		}
		if blob != nil {
			x.vecs.put(w.id, w.path, w.day, decodeVec(blob))
			continue
		}
		w.text = heading + "\n" + text
		todo = append(todo, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("memory: read chunks: %w", err)
	}
	const batch = 256
	for i := 0; i < len(todo); i += batch {
		part := todo[i:min(i+batch, len(todo))]
		texts := make([]string, len(part))
		for j, w := range part {
			texts[j] = w.text
		}
		vs, err := e.Embed(ctx, texts)
		if errors.Is(err, ErrNoModel) {
			return nil // nothing learned yet (no word in two passages): full text only, as Search says
		}
		if err != nil || len(vs) != len(part) {
			x.log.Warn("memory: embedding failed; search uses full text for the chunks without vectors", "model", model, "err", err)
			return nil
		}
		err = x.db.Tx(ctx, func(tx *sql.Tx) error {
			for j, w := range part {
				if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO vectors(hash, model, vec) VALUES (?, ?, ?)`, w.hash, model, encodeVec(vs[j])); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("memory: store vectors: %w", err)
		}
		for j, w := range part {
			x.vecs.put(w.id, w.path, w.day, vs[j])
		}
		rep.Embedded += len(part)
	}
	if paths != nil {
		return nil
	}
	// Vectors no chunk uses under the current model are dropped: an old
	// model's, or a deleted passage's (at a full Sync only: a watcher's
	// update leaves them, so a file moved in two steps keeps its cache).
	if _, err := x.db.ExecContext(ctx, `DELETE FROM vectors WHERE model != ? OR hash NOT IN (SELECT hash FROM chunks)`, model); err != nil {
		return fmt.Errorf("memory: drop stale vectors: %w", err)
	}
	return nil
}

// maybeLearn has l learn from all chunks when it has no model or the
// corpus drifted by more than relearn since; it stores what l learned.
func (x *Index) maybeLearn(ctx context.Context, l *Local) (bool, error) {
	var tokens int
	if err := x.db.QueryRowContext(ctx, `SELECT coalesce(sum(tokens), 0) FROM files`).Scan(&tokens); err != nil {
		return false, fmt.Errorf("memory: count the corpus: %w", err)
	}
	old := l.Tokens()
	if tokens == 0 || old > 0 && math.Abs(float64(tokens-old)) <= relearn*float64(old) {
		return false, nil
	}
	rows, err := x.db.QueryContext(ctx, `SELECT heading, text FROM chunks ORDER BY path, start_line`)
	if err != nil {
		return false, fmt.Errorf("memory: read chunks: %w", err)
	}
	var corpus []string
	for rows.Next() {
		var h, t string
		if err := rows.Scan(&h, &t); err != nil {
			rows.Close()
			return false, fmt.Errorf("memory: read chunks: %w", err)
		}
		corpus = append(corpus, h+"\n"+t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("memory: read chunks: %w", err)
	}
	if err := l.Learn(ctx, corpus); err != nil {
		return false, fmt.Errorf("memory: learn word vectors: %w", err)
	}
	blob, err := l.MarshalBinary()
	if err != nil {
		return false, fmt.Errorf("memory: store the local model: %w", err)
	}
	if _, err := x.db.ExecContext(ctx, `INSERT OR REPLACE INTO meta(key, value) VALUES ('local_model', ?)`, blob); err != nil {
		return false, fmt.Errorf("memory: store the local model: %w", err)
	}
	x.log.Debug("memory: local model learned", "model", l.Model(), "tokens", tokens)
	return true, nil
}

// loadVectors reads the current model's vectors into memory.
func (x *Index) loadVectors(ctx context.Context) error {
	x.vecs = newVecTable()
	if x.o.Embedder == nil {
		return nil
	}
	x.vecModel = x.o.Embedder.Model()
	var n int
	if err := x.db.QueryRowContext(ctx, `SELECT count(*) FROM chunks`).Scan(&n); err != nil {
		return fmt.Errorf("memory: read vectors: %w", err)
	}
	x.vecs.grow(n, localDim) // a capacity hint: the local model's length
	rows, err := x.db.QueryContext(ctx, `SELECT c.id, c.path, f.day, v.vec FROM chunks c JOIN files f ON f.path = c.path
		JOIN vectors v ON v.hash = c.hash AND v.model = ?`, x.o.Embedder.Model())
	if err != nil {
		return fmt.Errorf("memory: read vectors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id        int64
			path, day string
			blob      []byte
		)
		if err := rows.Scan(&id, &path, &day, &blob); err != nil {
			return fmt.Errorf("memory: read vectors: %w", err)
		}
		x.vecs.putBlob(id, path, day, blob)
	}
	return rows.Err()
}

func encodeVec(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func decodeVec(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Stats describes the index.
type Stats struct {
	Files, Chunks, Vectors int
	// Model is the embedder's model; "" when search is full text only.
	Model string
	Bytes int64
}

// Stats counts what the index holds.
func (x *Index) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := x.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM files), (SELECT count(*) FROM chunks), (SELECT coalesce(sum(size), 0) FROM files)`).Scan(&s.Files, &s.Chunks, &s.Bytes)
	if err != nil {
		return s, fmt.Errorf("memory: stats: %w", err)
	}
	x.mu.Lock()
	s.Vectors = x.vecs.len()
	x.mu.Unlock()
	if x.o.Embedder != nil {
		s.Model = x.o.Embedder.Model()
	}
	return s, nil
}

// Files lists the indexed files, sorted.
func (x *Index) Files(ctx context.Context) ([]string, error) {
	m, err := x.knownFiles(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// DBPath is the index's database file.
func (x *Index) DBPath() string { return x.o.DB }
