package graphexec

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/weights"
)

// compiled counts the programs compiled through Call and CallOn, process-wide: GoMLX compiles an
// executable at its first call with each set of input shapes and keeps the result in the executable,
// so a call whose graph was never seen before compiled one. (A backend that wraps the real one
// cannot count instead: GoMLX tensors remember the backend of the buffers the real one returns and
// refuse to mix them with the wrapper's.)
var compiled struct {
	mu       sync.Mutex
	seen     map[weak.Pointer[Graph]]struct{}
	programs atomic.Int64
	nanos    atomic.Int64
	byCalls  atomic.Int64 // of programs: those a call compiled, not Compile ahead of it
}

// Compiles returns the programs compiled so far in this process and the time compiling them took
// (graph building included).
func Compiles() (programs int64, took time.Duration) {
	return compiled.programs.Load(), time.Duration(compiled.nanos.Load())
}

// CallCompiles returns the programs that calls (Call, CallOn) compiled so far in this process: those
// of Compiles that no Compile made ahead of their first call, so that the call waited for them.
func CallCompiles() int64 { return compiled.byCalls.Load() }

// noteGraph counts g once, with the time it took to appear; byCall says a call compiled it.
func noteGraph(g *Graph, took time.Duration, byCall bool) {
	if g == nil {
		return
	}
	wp := weak.Make(g)
	compiled.mu.Lock()
	if compiled.seen == nil {
		compiled.seen = map[weak.Pointer[Graph]]struct{}{}
	}
	_, old := compiled.seen[wp]
	if !old {
		compiled.seen[wp] = struct{}{}
	}
	compiled.mu.Unlock()
	if old {
		return
	}
	runtime.AddCleanup(g, func(wp weak.Pointer[Graph]) {
		compiled.mu.Lock()
		delete(compiled.seen, wp)
		compiled.mu.Unlock()
	}, wp)
	compiled.programs.Add(1)
	compiled.nanos.Add(int64(took))
	if byCall {
		compiled.byCalls.Add(1)
	}
}

// precompile compiles e for args' shapes before the call, so that the compile is timed apart from
// the execution. It takes tensors only (a Go value's shape is left to GoMLX's own conversion, so that
// a compile is never made for a shape the call would not use); otherwise it returns nil and the call
// compiles, timed with its execution.
func precompile(e *Exec, args []any) *Graph {
	if len(args) == 1 {
		if list, ok := args[0].([]*tensors.Tensor); ok {
			args = make([]any, len(list))
			for i, t := range list {
				args[i] = t
			}
		}
	}
	in := make([]shapes.Shape, len(args))
	for i, a := range args {
		t, ok := a.(*tensors.Tensor)
		if !ok || t == nil {
			return nil
		}
		in[i] = t.Shape()
	}
	t0 := time.Now()
	g, err := e.Compile(in...)
	if err != nil {
		return nil
	}
	noteGraph(g, time.Since(t0), true)
	return g
}

// Compile compiles e for inputs of shapes in (weights included, in call order) without running it,
// and returns its outputs' shapes (to chain the next program of a decode). The program is counted
// by Compiles like one a call compiles; a later call with these shapes finds it compiled. GoMLX's
// Exec.Compile compiles outside the executable's cache lock and makes a concurrent call for the
// same shapes wait for it (gomlx core/graph/exec.go, findOrCreateGraph), so this may run on a
// goroutine of its own beside the calls of other programs.
func Compile(e *Exec, in ...shapes.Shape) (out []shapes.Shape, err error) {
	defer Recover(&err, e.Name())
	t0 := time.Now()
	g, err := e.Compile(in...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name(), err)
	}
	noteGraph(g, time.Since(t0), false)
	return g.Executable().Outputs(), nil
}

// Shapes lists the shapes of ts, in order (a program's inputs for Compile).
func Shapes(ts ...*tensors.Tensor) []shapes.Shape {
	out := make([]shapes.Shape, len(ts))
	for i, t := range ts {
		out[i] = t.Shape()
	}
	return out
}

// ParamShapes lists the shapes of the bound tensors of ps, in order.
func ParamShapes(ps ...*weights.Param) []shapes.Shape {
	out := make([]shapes.Shape, len(ps))
	for i, p := range ps {
		out[i] = p.T.Shape()
	}
	return out
}
