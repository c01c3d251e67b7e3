package policy

import (
	"context"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"

	"github.com/approvald/approval"
)

// CostLimit bounds a condition's cost, in CEL's cost units (about one per operation and per
// element a function walks): Compile refuses a condition whose worst case, over any context
// approval.MaxContextBytes can hold, exceeds it, and evaluation stops at it. A comparison of
// a few fields costs under 10; one pass over a list in the context stays well inside; a pass
// over a list for each element of another does not.
const CostLimit = 1_000_000

// newEnv returns the CEL environment of a condition: the request's action, title and
// requester (strings) and its context (a JSON object). Each compilation has its own: the race
// detector finds checks of comprehensions racing in a shared one (cel-go v0.33.3), and
// conditions are compiled only at start.
func newEnv() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("action", cel.StringType),
		cel.Variable("title", cel.StringType),
		cel.Variable("requester", cel.StringType),
		cel.Variable("context", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true), // JSON numbers are doubles: context.count > 3 must work
	)
	if err != nil {
		panic(err)
	}
	return e
}

// condition is a compiled match.when.
type condition struct {
	program cel.Program
}

// compileCondition compiles expr, which must be boolean and within CostLimit at worst. An
// error names the line and column within expr.
func compileCondition(expr string) (*condition, error) {
	env := newEnv()
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		var errs conditionErrors
		for _, e := range iss.Errors() {
			errs = append(errs, conditionError{line: e.Location.Line(), column: e.Location.Column() + 1, message: e.Message})
		}
		return nil, errs
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("the condition is of type %s; it must be true or false (bool)", ast.OutputType())
	}
	est, err := env.EstimateCost(ast, boundedSizes{})
	if err != nil {
		return nil, fmt.Errorf("estimate the condition's cost: %w", err)
	}
	if est.Max > CostLimit {
		return nil, fmt.Errorf("the condition may cost up to %d on a large context, more than the limit of %d; avoid nested loops over the context", est.Max, CostLimit)
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("compile the condition: %w", err)
	}
	return &condition{program: prg}, nil
}

// eval evaluates the condition over vars; ctx ends a long evaluation.
func (c *condition) eval(ctx context.Context, vars map[string]any) (bool, error) {
	out, _, err := c.program.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the condition gave %v, not true or false", out.Value())
	}
	return b, nil
}

// boundedSizes tells the cost estimator how large the variables can be: no string, list or
// map in a request is longer than its context may be (approval.MaxContextBytes), which bounds
// every loop a condition can make.
type boundedSizes struct{}

func (boundedSizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if len(n.Path()) == 0 {
		return nil
	}
	e := cost.RangedSizeEstimate(0, approval.MaxContextBytes)
	return &e
}

func (boundedSizes) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	return nil
}

// conditionErrors are the errors CEL found in a condition, each at a line and column of it.
type conditionErrors []conditionError

type conditionError struct {
	line, column int // from 1, within the condition
	message      string
}

func (e conditionErrors) Error() string { return e.at(0) }

// at formats the errors; first is the configuration's line of the condition's first line, or
// 0 when it is not known.
func (e conditionErrors) at(first int) string {
	msgs := make([]string, len(e))
	for i, c := range e {
		msgs[i] = fmt.Sprintf("line %d, column %d of the condition", c.line, c.column)
		if first > 0 {
			msgs[i] = fmt.Sprintf("line %d of the configuration (%s)", first+c.line-1, msgs[i])
		}
		msgs[i] += ": " + c.message
	}
	return strings.Join(msgs, "; ")
}
