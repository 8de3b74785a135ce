package memory

// MethodReindex is the kernel's IPC method that brings the index it
// holds up to date (`fluffy memory reindex` while the daemon serves):
// params ReindexParams, result ReindexResult.
const MethodReindex = "memory.reindex"

// ReindexParams are MethodReindex's.
type ReindexParams struct {
	// Full rebuilds the index (Rebuild) rather than syncing it.
	Full bool `json:"full,omitempty"`
}

// ReindexResult is MethodReindex's answer.
type ReindexResult struct {
	// Held is false when the kernel holds no index: the caller then
	// reindexes itself, under the index's lock.
	Held bool `json:"held"`
	// PID is the kernel's.
	PID int `json:"pid"`
	// Report is what the sync or rebuild did.
	Report SyncReport `json:"report"`
}
