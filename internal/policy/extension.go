package policy

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// An extension is a Starlark file that defines decide(op) for what YAML
// cannot say. It runs with no I/O (no load, print discarded, no builtins
// beyond Starlark's own), a step limit and a wall-time limit. decide
// returns None (no opinion), an effect name, or (effect, message).
type extension struct {
	name   string
	fn     *starlark.Function
	limits extLimits
}

type extLimits struct {
	steps   uint64
	timeout time.Duration
}

const maxExtensionSize = 256 << 10

func compileExtension(src Source, ref extRef, limits extLimits) (*extension, error) {
	fail := func(format string, args ...any) error {
		return &Error{File: src.Name, Line: ref.line, Column: ref.col, Msg: "extension " + ref.name + ": " + fmt.Sprintf(format, args...)}
	}
	if filepath.IsAbs(ref.name) || filepath.Clean(ref.name) != ref.name || filepath.Ext(ref.name) != ".star" || ref.name[0] == '.' {
		return nil, fail("name a .star file next to the policy file (no '..', not absolute)")
	}
	code, ok := src.Extensions[ref.name]
	if !ok {
		return nil, fail("file not found")
	}
	if len(code) > maxExtensionSize {
		return nil, fail("larger than %d bytes", maxExtensionSize)
	}
	th := newThread(ref.name, limits)
	stop := time.AfterFunc(limits.timeout*10, func() { th.Cancel("load took too long") })
	defer stop.Stop()
	opts := &syntax.FileOptions{}
	globals, err := starlark.ExecFileOptions(opts, th, ref.name, code, nil)
	if err != nil {
		return nil, fail("%v", err)
	}
	fn, ok := globals["decide"].(*starlark.Function)
	if !ok {
		return nil, fail("defines no decide(op) function")
	}
	if fn.NumParams() != 1 {
		return nil, fail("decide must take exactly one parameter (op)")
	}
	globals.Freeze()
	return &extension{name: ref.name, fn: fn, limits: limits}, nil
}

func newThread(name string, limits extLimits) *starlark.Thread {
	th := &starlark.Thread{
		Name:  "policy:" + name,
		Print: func(*starlark.Thread, string) {},
		Load: func(*starlark.Thread, string) (starlark.StringDict, error) {
			return nil, fmt.Errorf("load is not available to policy extensions")
		},
	}
	th.SetMaxExecutionSteps(limits.steps)
	return th
}

func strList(l []string) *starlark.List {
	vals := make([]starlark.Value, len(l))
	for i, s := range l {
		vals[i] = starlark.String(s)
	}
	return starlark.NewList(vals)
}

func opValue(c *CELOp) starlark.Value {
	session := starlarkstruct.FromStringDict(starlark.String("session"), starlark.StringDict{
		"id": starlark.String(c.Session.ID), "mode": starlark.String(c.Session.Mode),
		"state": starlark.String(c.Session.State), "workspace": starlark.String(c.Session.Workspace),
		"untrusted": starlark.Bool(c.Session.Untrusted), "untrusted_source": starlark.String(c.Session.UntrustedSource),
	})
	return starlarkstruct.FromStringDict(starlark.String("op"), starlark.StringDict{
		"tool": starlark.String(c.Tool), "action": starlark.String(c.Action), "path": starlark.String(c.Path),
		"in_workspace": starlark.Bool(c.InWorkspace), "argv": strList(c.Argv), "env": strList(c.Env),
		"wrapper": starlark.Bool(c.Wrapper), "dynamic": starlark.Bool(c.Dynamic),
		"host": starlark.String(c.Host), "port": starlark.MakeInt64(c.Port), "size": starlark.MakeInt64(c.Size),
		"tags": strList(c.Tags), "session": session,
	})
}

// decide calls decide(op). Effect 0 means no opinion.
func (x *extension) decide(ctx context.Context, c *CELOp) (Effect, string, error) {
	th := newThread(x.name, x.limits)
	timer := time.AfterFunc(x.limits.timeout, func() { th.Cancel("time limit exceeded") })
	defer timer.Stop()
	if done := ctx.Done(); done != nil {
		stop := context.AfterFunc(ctx, func() { th.Cancel("context cancelled") })
		defer stop()
	}
	v, err := starlark.Call(th, x.fn, starlark.Tuple{opValue(c)}, nil)
	if err != nil {
		return 0, "", fmt.Errorf("extension %s: %w", x.name, err)
	}
	var effName, msg starlark.Value = v, starlark.String("")
	if t, ok := v.(starlark.Tuple); ok {
		if len(t) != 2 {
			return 0, "", fmt.Errorf("extension %s: decide returned a tuple of %d, want (effect, message)", x.name, len(t))
		}
		effName, msg = t[0], t[1]
	}
	if effName == starlark.None {
		return 0, "", nil
	}
	s, ok := starlark.AsString(effName)
	m, ok2 := starlark.AsString(msg)
	if !ok || !ok2 {
		return 0, "", fmt.Errorf("extension %s: decide returned %s, want None, an effect or (effect, message)", x.name, v.Type())
	}
	eff, err := ParseEffect(s)
	if err != nil {
		return 0, "", fmt.Errorf("extension %s: %w", x.name, err)
	}
	return eff, m, nil
}
