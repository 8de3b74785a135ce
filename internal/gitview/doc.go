// Package gitview reads and writes a session's git repository through its
// change set's merged view, in the kernel, without ever running git.
//
// A repository's configuration is input the agent (or whoever wrote the
// repository) controls: core.fsmonitor, hooks, clean/smudge filters,
// textconv drivers, aliases and includes name programs that the git binary
// would run with the kernel's rights, outside any sandbox. This package
// uses github.com/go-git/go-git/v5, a pure-Go implementation that runs no
// external program: hooks, filters, fsmonitor, textconv and signing
// programs are never consulted. It reads the repository through FS, a
// billy.Filesystem over changeset.ChangeSet, so the model sees its own
// pending edits (and commits), no host symlink is followed, object
// alternates are ignored, and nothing outside the workspace's view is
// reachable. A panic of the library on malformed repository data is
// recovered as ErrInternal.
//
// go-git v5.19.3 (with go-billy v5.9.2) adds 14 modules to the build
// (`go mod graph | wc -l`: 781 before, 903 after); its transport, SSH and
// OpenPGP parts are linked but never used here.
//
// Commit writes its objects, the index and the branch's ref through the
// same view: they land in the change set's upper layer, and the user's real
// .git changes only when a person applies the change set.
package gitview
