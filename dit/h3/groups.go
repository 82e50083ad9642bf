package h3

import (
	"fmt"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
)

// DefaultBlockGroup is how many consecutive joint blocks one XLA program runs when
// Options.BlockGroup is 0. go-xla waits for each execution to finish before it returns (its
// ExecuteAndWait), so between two programs the GPU idles while the host returns and launches the
// next one: about 1 ms per program on the H200 (BENCHMARKS.md, "Where the time goes"), 50 ms of a
// release forward with one block per program. Grouping cuts the waits by the group size; the
// program's compile time grows with it, and its memory too: the allocator's peak beside the release
// weights grew from 2.2 to 2.7 GiB for five dense blocks. A VSA forward keeps one block per program
// unless Options.BlockGroup asks otherwise: five per program measured 2.574 against 2.594 s, within
// the spread between processes, for 1.04 GiB more peak memory (3.5 -> 4.5 GiB beside the weights).
const DefaultBlockGroup = 5

// groupedRunner runs the joint blocks on one device, runs of consecutive blocks per program.
type groupedRunner struct {
	backend compute.Backend
	spec    blockSpec
	// blocks are the bound weights of every joint block, its VSA gate included (taken as an input by
	// the VSA programs only).
	blocks []*blockWeights[*tensors.Tensor]
	group  int // Options.BlockGroup (0: blockGroup decides)
	// execs are the programs met so far.
	execs map[groupKey]*Exec
}

// blockKind is what one joint block's graph depends on besides its weights: dense attention, or VSA
// with the geometry and routing of vsa (graph constants), and the shape of its weight inputs.
type blockKind struct {
	sparse bool
	vsa    vsaKey
	shape  blockShape
}

// groupKey identifies a program of consecutive joint blocks.
type groupKey struct {
	kinds  string
	blocks int
	vsa    bool // VSA's sparse attention in the program
	trace  bool
}

// groupInputs feed a program of consecutive joint blocks, followed by each block's modulation table
// and weights (groupBlockInputs).
type groupInputs[T any] struct{ X, RowIdx, Cos, Sin T }

func (a *groupInputs[T]) Fields() []*T { return []*T{&a.X, &a.RowIdx, &a.Cos, &a.Sin} }

// groupBlockInputs are one block's inputs of such a program: its modulation table, then its weights.
type groupBlockInputs[T any] struct {
	Mod     T
	Weights *blockWeights[T]
}

func (a *groupBlockInputs[T]) Fields() []*T { return append([]*T{&a.Mod}, a.Weights.Fields()...) }

// blockGroup is the number of joint blocks per program: Options.BlockGroup, else DefaultBlockGroup
// for a dense forward and 1 for a VSA one; 1 while tracing (the tests read every block's outputs).
func (r *groupedRunner) blockGroup(f *blockForward) int {
	switch {
	case f.trace != nil:
		return 1
	case r.group > 0:
		return r.group
	case f.vsa != nil:
		return 1
	}
	return DefaultBlockGroup
}

func (r *groupedRunner) run(x *tensors.Tensor, f *blockForward) (*tensors.Tensor, error) {
	group := r.blockGroup(f)
	return chainBlocks(x, f, func(b int, x *tensors.Tensor) (int, []*tensors.Tensor, error) {
		next := min(b+group, len(r.blocks))
		res, err := r.runGroup(f, b, next, x)
		return next, res, err
	})
}

// kindOf is joint block b's kind under the forward's VSA plan p (nil: dense) and its weights as that
// kind takes them (the gate only where the VSA program reads it).
func (r *groupedRunner) kindOf(p *vsaPlan, b int) (blockKind, *blockWeights[*tensors.Tensor]) {
	w := r.blocks[b] // its gate, if any, is not an input (boundWeights)
	k := blockKind{shape: w.shape}
	if p == nil {
		return k, w
	}
	k.sparse = true
	k.vsa = p.key(b, r.blocks[b].Gate != nil)
	k.shape.gate = k.vsa.gate
	return k, w.withGate(k.vsa.gate)
}

// runGroup runs joint blocks [b0, b1) on x as one program.
func (r *groupedRunner) runGroup(f *blockForward, b0, b1 int, x *tensors.Tensor) ([]*tensors.Tensor, error) {
	kinds := make([]blockKind, 0, b1-b0)
	head := groupInputs[*tensors.Tensor]{X: x, RowIdx: f.args.RowIdx, Cos: f.args.Cos, Sin: f.args.Sin}
	var blocks []*tensors.Tensor
	for b := b0; b < b1; b++ {
		k, w := r.kindOf(f.vsa, b)
		kinds = append(kinds, k)
		blocks = append(blocks, graphexec.Values(&groupBlockInputs[*tensors.Tensor]{Mod: f.tables[b], Weights: w})...)
	}
	return graphexec.Call(r.exec(kinds, f.vsa, f.trace != nil), graphexec.Pack(&head, blocks...)...)
}

// exec returns (compiling at first use) the program of consecutive blocks of these kinds.
func (r *groupedRunner) exec(kinds []blockKind, p *vsaPlan, trace bool) *Exec {
	key := groupKey{kinds: fmt.Sprint(kinds), blocks: len(kinds), vsa: p != nil, trace: trace}
	if e, ok := r.execs[key]; ok {
		return e
	}
	spec := r.spec
	e := graphexec.MustExec(r.backend, fmt.Sprintf("h3.joint_blocks_%d", len(kinds)), func(in []*Node) []*Node {
		var head groupInputs[*Node]
		in = graphexec.Unpack(in, &head)
		x := head.X
		var attnOut, ffOut *Node
		for _, k := range kinds {
			blk := groupBlockInputs[*Node]{Weights: graphWeights(k.shape)}
			in = graphexec.Unpack(in, &blk)
			s := spec
			if k.sparse {
				s.Attention.Sparse = p.sparse(k.vsa)
			}
			x, attnOut, ffOut = s.jointBlock(x, blk.Mod, head.RowIdx, head.Cos, head.Sin, coreOf(blk.Weights))
		}
		return traced(trace, 1, x, attnOut, ffOut)
	})
	if r.execs == nil {
		r.execs = map[groupKey]*Exec{}
	}
	r.execs[key] = e
	return e
}

func (r *groupedRunner) describe() string                  { return "" }
func (r *groupedRunner) heldBytes() (sliced, copies int64) { return 0, 0 }

// close frees the programs (the weights belong to the parameter set).
func (r *groupedRunner) close() {
	for _, e := range r.execs {
		graphexec.FinalizeExecs(e)
	}
	r.execs = nil
}
