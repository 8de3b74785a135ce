// Package memory owns the memory index: the assistant's memory files
// (MEMORY.md and memory/**/*.md in the assistant workspace) cut into
// chunks by Markdown heading and paragraph, indexed for full text
// (SQLite FTS5, BM25) and for meaning (a vector per chunk), and searched
// with both ranks fused. The files are the truth: the index is derived
// data under the data directory (memory/index.db), rebuilt from them at
// any time.
//
// Sync compares each file's content hash with the index's and chunks
// again only the files that changed; Watch (fsnotify) does the same for
// the files its events name. Vectors are cached by the chunk's hash and
// the model's name, so a renamed file or an unchanged passage is not
// embedded again, and a new model embeds everything again.
//
// The default embedder, Local, needs no download and sends nothing
// anywhere: it learns word vectors from the person's own memory corpus
// by random indexing and averages them per chunk (docs/memory.md says
// how, and docs/benchmarks.md what it scores). No Go word-embedding
// library is among the modules available here, and random indexing is a
// few dozen lines, learns in one pass, and relearns cheaply as the corpus
// grows.
//
// Fusion is reciprocal rank fusion (k = 60): on the labelled retrieval
// set (eval_test.go) it scored as well as the best weighted sum of
// min-max normalized scores without a weight to tune, and ranks fuse
// scores of different scales (BM25, cosine) without calibration.
package memory
