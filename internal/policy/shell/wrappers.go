package shell

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// unwrapped is what a wrapper runs: its own part, the commands it wraps, and
// shell text it evaluates (sh -c).
type unwrapped struct {
	own    operation.Command
	inner  []operation.Command
	script *string
}

type unwrapper func(c operation.Command) (unwrapped, error)

// opts describes a wrapper's options: which take an argument, which do not.
// Anything else starting with '-' is an error (the command is then Dynamic),
// because guessing wrongly whether an option takes an argument would shift
// which word is the wrapped command.
type opts struct {
	shortArg  string // letters that take an argument (attached or next word)
	shortOpt  string // letters whose argument can only be attached (-i{})
	shortFlag string // letters without argument
	longArg   []string
	longFlag  []string // may also be written --name=value when listed in longOptEq
	longOptEq []string // long options with an optional =value
	digits    bool     // -10 (nice) is a flag
	envAssign bool     // NAME=value words after the options are assignments
	plusFlags bool     // +o opt, +x as in shells
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parse splits args (after the program name) into options, assignments and
// the rest. onFlag sees each short flag letter and long option name.
func (o opts) parse(args []string, onOpt func(name, val string) error) (env []string, rest []string, err error) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "-" || len(a) < 2 || (a[0] != '-' && !(o.plusFlags && a[0] == '+')) {
			break
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			switch {
			case contains(o.longArg, name):
				if !hasVal {
					if i+1 >= len(args) {
						return nil, nil, fmt.Errorf("option --%s needs a value", name)
					}
					i++
					val = args[i]
				}
			case contains(o.longFlag, name) && !hasVal:
			case contains(o.longOptEq, name):
			default:
				return nil, nil, fmt.Errorf("unknown option %q", a)
			}
			if onOpt != nil {
				if err := onOpt("--"+name, val); err != nil {
					return nil, nil, err
				}
			}
			continue
		}
		if o.digits && isDigits(a[1:]) {
			continue
		}
		letters := a[1:]
		for j := 0; j < len(letters); j++ {
			l := letters[j]
			switch {
			case strings.IndexByte(o.shortArg, l) >= 0:
				val := letters[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, nil, fmt.Errorf("option -%c needs a value", l)
					}
					i++
					val = args[i]
				}
				if onOpt != nil {
					if err := onOpt("-"+string(l), val); err != nil {
						return nil, nil, err
					}
				}
				j = len(letters)
			case strings.IndexByte(o.shortOpt, l) >= 0:
				if onOpt != nil {
					if err := onOpt("-"+string(l), letters[j+1:]); err != nil {
						return nil, nil, err
					}
				}
				j = len(letters)
			case strings.IndexByte(o.shortFlag, l) >= 0:
				if onOpt != nil {
					if err := onOpt(string(a[0])+string(l), ""); err != nil {
						return nil, nil, err
					}
				}
			default:
				return nil, nil, fmt.Errorf("unknown option -%c", l)
			}
		}
	}
	if o.envAssign {
		for ; i < len(args); i++ {
			if !IsAssign(args[i]) {
				break
			}
			env = append(env, args[i])
		}
	}
	return env, args[i:], nil
}

// IsAssign reports whether a word is an environment assignment NAME=value
// as env(1) and a shell's prefix take it (a name of letters, digits and
// underscores, not starting with a digit).
func IsAssign(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// simple builds the unwrapper of a wrapper that takes options, then
// (optionally) a fixed number of positional words, then the command.
func simple(o opts, positional int) unwrapper {
	return func(c operation.Command) (unwrapped, error) {
		return wrap(c, o, positional, nil)
	}
}

func wrap(c operation.Command, o opts, positional int, onOpt func(name, val string) error) (unwrapped, error) {
	env, rest, err := o.parse(c.Argv[1:], onOpt)
	if err != nil {
		return unwrapped{own: c}, err
	}
	if len(rest) < positional {
		return unwrapped{own: c}, nil // nothing wrapped: the wrapper alone
	}
	rest = rest[positional:]
	ownLen := len(c.Argv) - len(rest)
	own := c
	own.Argv = c.Argv[:ownLen]
	own.Writes = nil
	u := unwrapped{own: own}
	if len(rest) > 0 {
		inner := operation.Command{
			Argv:    rest,
			Env:     append(append([]string(nil), c.Env...), env...),
			Writes:  c.Writes,
			Dynamic: c.Dynamic, Unresolved: c.Unresolved,
		}
		u.inner = append(u.inner, inner)
	}
	return u, nil
}

var wrappers map[string]unwrapper

func init() {
	shellOpts := opts{
		shortArg:  "oO",
		shortFlag: "abefhikmnprstuvxBCEHPlcT",
		longFlag:  []string{"login", "noprofile", "norc", "posix", "restricted", "noediting", "verbose", "debugger", "dump-strings", "dump-po-strings", "protected"},
		longArg:   []string{"rcfile", "init-file"},
		plusFlags: true,
	}
	shellU := func(c operation.Command) (unwrapped, error) {
		var hasC, stdin bool
		_, rest, err := shellOpts.parse(c.Argv[1:], func(name, _ string) error {
			switch name {
			case "-c":
				hasC = true
			case "-s", "-i":
				stdin = true
			}
			return nil
		})
		if err != nil {
			return unwrapped{own: c}, err
		}
		own := c
		own.Writes = nil
		switch {
		case hasC && len(rest) > 0:
			own.Argv = c.Argv[:len(c.Argv)-len(rest)]
			script := rest[0]
			return unwrapped{own: own, script: &script}, nil
		case hasC:
			return unwrapped{own: c}, errors.New("-c without a command string")
		case stdin || len(rest) == 0:
			return unwrapped{own: c}, errors.New("the shell reads its commands from stdin")
		default:
			return unwrapped{own: c}, fmt.Errorf("the shell runs the script file %q, whose content is not known", rest[0])
		}
	}
	findU := func(c operation.Command) (unwrapped, error) {
		own := c
		own.Argv = nil
		own.Writes = nil
		var u unwrapped
		args := c.Argv
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "-exec", "-execdir", "-ok", "-okdir":
				j := i + 1
				for j < len(args) && args[j] != ";" && args[j] != "+" {
					j++
				}
				if j >= len(args) {
					own.Argv = c.Argv
					u.own = own
					return u, fmt.Errorf("%s without a closing ';' or '+'", args[i])
				}
				inner := operation.Command{Argv: args[i+1 : j], Env: c.Env, Writes: c.Writes, Dynamic: c.Dynamic, Unresolved: c.Unresolved}
				for _, a := range inner.Argv {
					if strings.Contains(a, "{}") && !inner.Dynamic {
						inner.Dynamic, inner.Unresolved = true, "find substitutes file names at run time"
					}
				}
				if len(inner.Argv) == 0 {
					own.Argv = c.Argv
					u.own = own
					return u, fmt.Errorf("%s without a command", args[i])
				}
				u.inner = append(u.inner, inner)
				i = j
			default:
				own.Argv = append(own.Argv, args[i])
			}
		}
		u.own = own
		return u, nil
	}
	xargsO := opts{
		shortArg:  "adEILnPs",
		shortOpt:  "eil",
		shortFlag: "0oprtx",
		longArg:   []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"},
		longFlag:  []string{"null", "open-tty", "interactive", "no-run-if-empty", "verbose", "exit", "show-limits"},
		longOptEq: []string{"eof", "replace", "max-lines"},
	}
	xargsU := func(c operation.Command) (unwrapped, error) {
		u, err := wrap(c, xargsO, 0, nil)
		if err != nil {
			return u, err
		}
		if len(u.inner) == 0 {
			u.inner = []operation.Command{{Argv: []string{"echo"}, Env: c.Env, Writes: c.Writes}}
		}
		for i := range u.inner {
			if !u.inner[i].Dynamic {
				u.inner[i].Dynamic, u.inner[i].Unresolved = true, "xargs adds arguments read at run time"
			}
		}
		return u, nil
	}
	envO := opts{
		shortArg:  "uCS",
		shortFlag: "i0v",
		longArg:   []string{"unset", "chdir", "split-string"},
		longFlag:  []string{"ignore-environment", "null", "debug", "list-signal-handling"},
		longOptEq: []string{"default-signal", "ignore-signal", "block-signal"},
		envAssign: true,
	}
	envU := func(c operation.Command) (unwrapped, error) {
		var split []string
		var splitErr error
		u, err := wrap(c, envO, 0, func(name, val string) error {
			if name == "-S" || name == "--split-string" {
				f, err := syntax.NewParser().Parse(strings.NewReader(val), "")
				if err != nil || len(f.Stmts) != 1 {
					return errors.New("env -S string is not one simple command")
				}
				ce, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
				if !ok || len(ce.Assigns) > 0 || len(f.Stmts[0].Redirs) > 0 {
					return errors.New("env -S string is not one simple command")
				}
				for _, w := range ce.Args {
					vals, ok := static(w)
					if !ok {
						splitErr = errors.New("env -S string is not static")
					}
					split = append(split, vals...)
				}
			}
			return nil
		})
		if err != nil {
			return u, err
		}
		if splitErr != nil {
			return u, splitErr
		}
		if len(split) > 0 {
			if len(u.inner) == 0 {
				u.inner = []operation.Command{{Env: c.Env, Writes: c.Writes}}
			}
			u.inner[0].Argv = append(split, u.inner[0].Argv...)
		}
		return u, nil
	}
	sudoO := opts{
		shortArg:  "ugCDhprtTU",
		shortFlag: "AbEHiKklnPSsBNVe",
		longArg:   []string{"user", "group", "close-from", "chdir", "host", "prompt", "role", "type", "command-timeout", "other-user"},
		longFlag:  []string{"askpass", "background", "bell", "login", "non-interactive", "preserve-groups", "remove-timestamp", "reset-timestamp", "shell", "stdin", "validate", "list", "edit", "set-home", "version", "help"},
		longOptEq: []string{"preserve-env"},
		envAssign: true,
	}
	sudoU := func(c operation.Command) (unwrapped, error) {
		edit := false
		u, err := wrap(c, sudoO, 0, func(name, _ string) error {
			if name == "-e" || name == "--edit" {
				edit = true
			}
			return nil
		})
		if err == nil && edit {
			err = errors.New("sudoedit edits files chosen at run time")
		}
		return u, err
	}
	timeU := func(c operation.Command) (unwrapped, error) {
		var writes []string
		u, err := wrap(c, opts{shortArg: "fo", shortFlag: "pvaq", longArg: []string{"format", "output"}, longFlag: []string{"portability", "verbose", "append", "quiet"}}, 0, func(name, val string) error {
			if name == "-o" || name == "--output" {
				writes = append(writes, val)
			}
			return nil
		})
		u.own.Writes = writes
		return u, err
	}
	busyboxU := func(c operation.Command) (unwrapped, error) {
		return wrap(c, opts{}, 0, nil)
	}
	wrappers = map[string]unwrapper{
		"env":     envU,
		"nice":    simple(opts{shortArg: "n", longArg: []string{"adjustment"}, digits: true}, 0),
		"timeout": simple(opts{shortArg: "sk", shortFlag: "v", longArg: []string{"signal", "kill-after"}, longFlag: []string{"preserve-status", "foreground", "verbose"}}, 1),
		"nohup":   simple(opts{}, 0),
		"setsid":  simple(opts{shortFlag: "cfw", longFlag: []string{"ctty", "fork", "wait"}}, 0),
		"time":    timeU,
		"stdbuf":  simple(opts{shortArg: "ioe", longArg: []string{"input", "output", "error"}}, 0),
		"ionice":  simple(opts{shortArg: "cnp", shortFlag: "t", longArg: []string{"class", "classdata", "pid"}, longFlag: []string{"ignore"}}, 0),
		"command": simple(opts{shortFlag: "pvV"}, 0),
		"builtin": simple(opts{}, 0),
		"exec":    simple(opts{shortArg: "a", shortFlag: "cl"}, 0),
		"sudo":    sudoU,
		"doas":    simple(opts{shortArg: "uC", shortFlag: "ns"}, 0),
		"xargs":   xargsU,
		"find":    findU,
		"busybox": busyboxU,
	}
	for _, sh := range []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "rbash"} {
		wrappers[sh] = shellU
	}
}
