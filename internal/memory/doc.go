// Package memory owns the memory index: the assistant's memory files
// (MEMORY.md and memory/**/*.md in the assistant workspace) cut into
// chunks by Markdown heading and paragraph, indexed for full text
// (SQLite FTS5, BM25) and for meaning (a vector per chunk), and searched
// with both scores fused. The files are the truth: the index is derived
// data under the data directory (memory/index.db), rebuilt from them at
// any time. Folders named by memory.sources are indexed beside them,
// read-only, as sources/NAME/... (Source).
//
// Sync compares each file's content hash with the index's and chunks
// again only the files that changed; Watch (fsnotify) does the same for
// the files its events name. Vectors are cached by the chunk's hash and
// the model's name, so a renamed file or an unchanged passage is not
// embedded again, and a new model embeds everything again.
//
// An index has one writer: Open holds its lock file (LockPath; the
// daemon for as long as it serves, a command while it syncs), and a
// process that finds it held reads beside the holder (OpenReader), which
// keeps the index current. MethodReindex names the kernel's IPC method
// by which `fluffy memory reindex` has the holder do the work.
//
// The default embedder, Local, needs no download and sends nothing
// anywhere: it learns word vectors from the person's own memory corpus
// by random indexing and averages them per chunk, weighted by the square
// of their inverse document frequency (docs/memory.md says how, and
// docs/benchmarks.md what it scores). No Go word-embedding
// library is among the modules available here, and random indexing is a
// few dozen lines, learns in one pass, and relearns cheaply as the corpus
// grows.
//
// Fusion is a weighted sum of min-max normalized scores, full text 0.3
// and vectors 0.7 (DefaultTextWeight). Reciprocal rank fusion was
// measured too and lost (docs/benchmarks.md): a paraphrase's passage is
// in the vector ranking only, while the passages sharing one of the
// query's words are in both, so ranks summed push it below them; the
// weighted sum keeps full text's exact-word precision (the same recall@5
// on literal questions) and most of the vectors' paraphrase recall. The
// weight was chosen on the labelled set (eval_test.go); 0.3 rather than
// the set's best 0.2 leans towards exact words, which a person's real
// notes (names, codes, dates) need more than this set does. Another
// seed of the generator ranks the modes the same way.
package memory
