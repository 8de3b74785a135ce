package kernel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// lineage is where a session sits in its tree: its parent and root, ""
// for a top-level session.
type lineage struct{ parent, root string }

// treeLog is the kernel's audit log: it places every entry of a
// sub-agent's session in its tree (audit.Entry Parent and Root) before
// the entry is written, whoever writes it (the kernel, the session's
// tool router, its egress proxy), so the log links parent and child in
// every entry.
type treeLog struct {
	AuditLog
	k *Kernel
}

func (l treeLog) Append(ctx context.Context, e audit.Entry) (uint64, error) {
	if err := l.k.Place(ctx, &e); err != nil {
		return 0, err
	}
	return l.AuditLog.Append(ctx, e)
}

// lineages caches each session's lineage: it never changes once the
// session exists.
type lineages struct {
	mu sync.Mutex // guards m
	m  map[string]lineage
}

func (c *lineages) get(id string) (lineage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[id]
	return l, ok
}

func (c *lineages) put(id string, l lineage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]lineage{}
	}
	c.m[id] = l
}

// Place fills in e's Parent and Root when e.Session is a sub-agent (a
// top-level session's entries and entries outside sessions are left
// as they are). Audit writers outside the kernel's own log (the approval
// broker's recorder) call it on their entries. An error (fluffy.db could
// not be read) means the entry cannot be placed: it must not be written
// without its place.
func (k *Kernel) Place(ctx context.Context, e *audit.Entry) error {
	if e.Session == "" || e.Parent != "" {
		return nil
	}
	l, ok := k.tree.get(e.Session)
	if !ok {
		err := k.o.DB.QueryRowContext(ctx, `SELECT parent, root FROM sessions WHERE id = ?`, e.Session).Scan(&l.parent, &l.root)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil // a removed session, or one the log names from outside
		case err != nil:
			return fmt.Errorf("kernel: place session %s's audit entry in its tree: %w", e.Session, err)
		}
		k.tree.put(e.Session, l)
	}
	e.Parent, e.Root = l.parent, l.root
	return nil
}

// MethodTree returns a session with its sub-agents at every depth
// (IDParams → TreeNode).
const MethodTree = "session.tree"

// TreeNode is a session and its sub-agents, oldest first.
type TreeNode struct {
	Info
	Children []TreeNode `json:"children,omitempty"`
}

// Tree returns session id with its sub-agents at every depth.
func (k *Kernel) Tree(ctx context.Context, id string) (TreeNode, error) {
	info, err := k.Get(ctx, id)
	if err != nil {
		return TreeNode{}, err
	}
	return k.subtree(ctx, info, 0)
}

func (k *Kernel) subtree(ctx context.Context, info Info, depth int) (TreeNode, error) {
	n := TreeNode{Info: info}
	if depth >= maxTreeWalk {
		return n, nil
	}
	kids, err := k.Children(ctx, info.ID)
	if err != nil {
		return TreeNode{}, err
	}
	for _, c := range kids {
		cn, err := k.subtree(ctx, c, depth+1)
		if err != nil {
			return TreeNode{}, err
		}
		n.Children = append(n.Children, cn)
	}
	return n, nil
}
