// Package changeset owns a session's change set: an overlayfs upper
// directory over the workspace, which is the read-only lower layer. Every
// write a session makes lands in the upper directory, whether a sandbox
// wrote it through an overlay mount or the kernel wrote it here; the real
// working tree changes only through Apply.
//
// The package reads the upper directory the way overlayfs does: a character
// device 0/0 (or a zero-size file carrying the overlay.whiteout xattr) is a
// whiteout that hides the lower entry, and a directory whose
// trusted.overlay.opaque or user.overlay.opaque xattr is "y" hides the
// lower directory's contents. Kernel-side writes create the same structures
// overlayfs would, so a sandbox mounting the same upper sees the same view.
// Upper directories that use overlay features this package does not model
// (redirect_dir, metacopy) are refused with ErrUnsupported: mount with
// redirect_dir=off,metacopy=off.
//
// Every path given to this package is relative to the workspace root,
// slash-separated and local (no "..", no absolute paths, no NUL). Opens go
// through openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so no operation
// here follows a symbolic link, in either layer or in the real tree.
//
// Apply is all-or-nothing: each file is staged next to its destination and
// renamed into place, the previous entry kept as a hard-linked backup until
// every step succeeded; any failure rolls every step back, and a journal
// in the change set directory lets Open finish or undo an apply a crash
// interrupted. Before touching anything, Apply compares each destination with the base recorded when
// the change set began (size, times and inode, then SHA-256) and refuses
// with a *ConflictError naming every path that changed underneath.
//
// Unified diffs come from github.com/aymanbagabas/go-udiff, an exported copy
// of the Myers diff inside golang.org/x/tools (the one gopls uses), kept in
// step with it.
package changeset
