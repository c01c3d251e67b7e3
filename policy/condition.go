package policy

import (
	"context"
	"errors"
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

// env is the CEL environment of every condition: the request's action, title and requester
// (strings) and its context (a JSON object).
var env = func() *cel.Env {
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
}()

// condition is a compiled match.when.
type condition struct {
	program cel.Program
}

// compileCondition compiles expr, which must be boolean and within CostLimit at worst. An
// error names the line and column within expr.
func compileCondition(expr string) (*condition, error) {
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		var msgs []string
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("line %d, column %d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return nil, errors.New(strings.Join(msgs, "; "))
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
