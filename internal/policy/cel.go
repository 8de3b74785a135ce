package policy

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/fluffy-agent/fluffy/internal/units"
)

// CELOp is what a when expression sees as op: one atom of the operation.
// Field names are the cel tags.
type CELOp struct {
	Tool        string   `cel:"tool"`
	Action      string   `cel:"action"`
	Path        string   `cel:"path"`
	InWorkspace bool     `cel:"in_workspace"`
	Argv        []string `cel:"argv"`
	Env         []string `cel:"env"`
	Wrapper     bool     `cel:"wrapper"`
	Dynamic     bool     `cel:"dynamic"`
	// ExecCapable: the command runs code the exec-capable table cannot
	// model; AgentWritten: it runs a file the agent wrote.
	ExecCapable  bool       `cel:"exec_capable"`
	AgentWritten bool       `cel:"agent_written"`
	Host         string     `cel:"host"`
	Port         int64      `cel:"port"`
	Size         int64      `cel:"size"`
	Tags         []string   `cel:"tags"`
	Session      CELSession `cel:"session"`
}

// CELSession is op.session in a when expression. Untrusted: the session
// has read untrusted data (operation.Session.Untrusted).
type CELSession struct {
	ID              string `cel:"id"`
	Mode            string `cel:"mode"`
	State           string `cel:"state"`
	Workspace       string `cel:"workspace"`
	Untrusted       bool   `cel:"untrusted"`
	UntrustedSource string `cel:"untrusted_source"`
}

// Limits on when expressions.
const (
	maxWhenLen = 4096
	// celCostLimit bounds one evaluation (CEL's abstract cost units).
	celCostLimit = 100_000
)

type celEnv struct {
	env *cel.Env
}

type celProgram struct {
	prg cel.Program
}

// unitMacro rewrites size("10MiB") into the number of bytes and
// duration("7d") into duration("168h") at parse time, so that a wrong unit
// is an error when the policy loads, not when a rule is evaluated. A
// literal that does not start with a digit is left alone (CEL's own
// size(string) is its length).
func unitMacro(kind string) cel.Macro {
	return cel.GlobalMacro(kind, 1, func(eh cel.MacroExprFactory, _ ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
		if args[0].Kind() != ast.LiteralKind {
			return nil, nil
		}
		s, ok := args[0].AsLiteral().(types.String)
		if !ok || len(s) == 0 || s[0] < '0' || s[0] > '9' {
			return nil, nil
		}
		switch kind {
		case "size":
			n, err := units.ParseSize(string(s))
			if err != nil {
				return nil, eh.NewError(args[0].ID(), err.Error())
			}
			return eh.NewLiteral(types.Int(n)), nil
		default:
			d, err := units.ParseDuration(string(s))
			if err != nil {
				return nil, eh.NewError(args[0].ID(), err.Error())
			}
			return eh.NewCall("duration", eh.NewLiteral(types.String(d.Std().String()))), nil
		}
	})
}

func newCELEnv() (*celEnv, error) {
	env, err := cel.NewEnv(
		ext.NativeTypes(ext.ParseStructTags(true), reflect.TypeFor[CELOp](), reflect.TypeFor[CELSession]()),
		cel.Variable("op", cel.ObjectType("policy.CELOp")),
		cel.Macros(unitMacro("size"), unitMacro("duration")),
		ext.Strings(),
		cel.ParserRecursionLimit(64),
		cel.ParserExpressionSizeLimit(maxWhenLen),
	)
	if err != nil {
		return nil, fmt.Errorf("policy: CEL environment: %w", err)
	}
	return &celEnv{env: env}, nil
}

var errNotBool = errors.New("a when expression must be a boolean")

// compile parses, type-checks and plans one when expression.
func (c *celEnv) compile(src string) (*celProgram, error) {
	if len(src) > maxWhenLen {
		return nil, fmt.Errorf("longer than %d bytes", maxWhenLen)
	}
	a, iss := c.env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, errors.New(strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if !a.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("%w, this one is %s", errNotBool, a.OutputType())
	}
	// When the cost has a static bound under the limit, runtime tracking
	// is pure overhead; otherwise (lists, regexes, string functions over
	// input of unknown size) every evaluation is tracked and cut off.
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	est, err := c.env.EstimateCost(a, noSizeHints{})
	if err != nil || est.Max > celCostLimit {
		opts = append(opts, cel.CostLimit(celCostLimit))
	}
	prg, err := c.env.Program(a, opts...)
	if err != nil {
		return nil, err
	}
	return &celProgram{prg: prg}, nil
}

// noSizeHints gives CEL's cost estimator no knowledge of input sizes, so
// any cost that depends on them is unbounded.
type noSizeHints struct{}

func (noSizeHints) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (noSizeHints) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

// opActivation binds the one variable, op, without allocating a map.
type opActivation struct{ op *CELOp }

func (a opActivation) ResolveName(name string) (any, bool) {
	if name == "op" {
		return a.op, true
	}
	return nil, false
}

func (a opActivation) Parent() interpreter.Activation { return nil }

func (p *celProgram) eval(op *CELOp) (bool, error) {
	out, _, err := p.prg.Eval(opActivation{op})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errNotBool
	}
	return b, nil
}
