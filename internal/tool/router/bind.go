package router

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// bind completes op with what an approval of it binds beyond the
// normalized form: the digest of the decoded arguments (tools that write
// or run) and the content of the files its commands run
// (approval.BindInputs). A call and the plan step approving it are bound
// the same way, here, so a token minted for one covers the other only
// when nothing of it changed.
func (r *Router) bind(t *tool.Tool, op *operation.Operation, args tool.Args) error {
	if t.Execution().Class == tool.FastPath {
		return nil // in-kernel reads: path, action and tool say it all
	}
	b, err := json.Marshal(args.Value())
	if err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	sum := sha256.Sum256(b)
	op.ArgsSHA256 = hex.EncodeToString(sum[:])
	if len(op.Commands) > 0 {
		approval.BindInputs(op, inputSource{res: r.o.Resolver, cs: r.o.ChangeSet})
	}
	return nil
}

// inputSource reads the workspace as a sandboxed command sees it: the
// session's change set when there is one, the real files otherwise.
type inputSource struct {
	res *tool.Resolver
	cs  ChangeSet
}

func (s inputSource) Resolve(abs string) (string, bool, error) {
	for c := range strings.SplitSeq(abs, "/") {
		if len(c) > maxNameBytes {
			// An argument no file can be named after (python3 -c
			// with a long program): not an input.
			return "", false, fs.ErrNotExist
		}
	}
	p, err := s.res.Resolve(abs)
	if errors.Is(err, tool.ErrPathLoop) {
		return "", false, fs.ErrNotExist // nothing can be opened there
	}
	if err != nil {
		return "", false, err
	}
	return p.Abs, p.InWorkspace, nil
}

// maxNameBytes is NAME_MAX.
const maxNameBytes = 255

func (s inputSource) Open(abs string) (io.ReadCloser, error) {
	ws := s.res.Workspace()
	rel, err := filepath.Rel(ws, abs)
	if err != nil {
		return nil, err
	}
	if cs, ok := s.cs.(*changeset.ChangeSet); ok && cs != nil {
		e, err := cs.Stat(rel)
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, fs.ErrNotExist // x.py/y: under a file
		}
		if err != nil {
			return nil, err
		}
		if e.Kind != changeset.KindFile {
			return nil, approval.ErrNotRegular
		}
		return cs.Open(rel)
	}
	// The real tree: opened without waiting and judged on the descriptor
	// (a FIFO named on the command line would otherwise hang the call
	// before its gates), never through a final symlink.
	f, err := regfile.Open(abs, true)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return nil, fs.ErrNotExist
	case errors.Is(err, regfile.ErrNotRegular), errors.Is(err, syscall.ELOOP):
		return nil, approval.ErrNotRegular
	case err != nil:
		return nil, err
	}
	return f, nil
}
