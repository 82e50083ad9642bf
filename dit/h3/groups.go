package h3

import (
	"fmt"

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

// blockKind is what one joint block's graph depends on besides its weights: dense attention, or VSA
// with the geometry and routing of vsa (graph constants), and the block's weight-input count.
type blockKind struct {
	sparse  bool
	vsa     vsaKey
	weights int
}

// groupKey identifies a program of consecutive joint blocks.
type groupKey struct {
	kinds  string
	blocks int
	vsa    bool // VSA's sparse attention in the program
	trace  bool
}

// blockGroup is the number of joint blocks per program: Options.BlockGroup, else DefaultBlockGroup
// for a dense forward and 1 for a VSA one; 1 while tracing (the tests read every block's outputs).
func (m *Model) blockGroup(p *vsaPlan) int {
	switch {
	case m.trace != nil:
		return 1
	case m.group > 0:
		return m.group
	case p != nil:
		return 1
	}
	return DefaultBlockGroup
}

// blockKindOf returns joint block b's kind under the forward's VSA plan p (nil: dense) and its extra
// weight inputs (the VSA gate).
func (m *Model) blockKindOf(p *vsaPlan, b int) (blockKind, []*tensors.Tensor) {
	k := blockKind{weights: len(m.p.Blocks[b].tensors())}
	if p == nil {
		return k, nil
	}
	k.sparse = true
	k.vsa = p.key(b, m.p.Blocks[b].Gate.Bound())
	if !k.vsa.gate {
		return k, nil
	}
	k.weights++
	return k, []*tensors.Tensor{m.p.Blocks[b].Gate.T}
}

// runBlockGroup runs joint blocks [b0, b1) on x as one program: inputs x, the row indices and RoPE
// tables of args, each block's modulation table from cache, then each block's weights.
func (m *Model) runBlockGroup(p *vsaPlan, b0, b1 int, x *tensors.Tensor, args blockInputs[*tensors.Tensor], cache *AdaLNCache) ([]*tensors.Tensor, error) {
	kinds := make([]blockKind, 0, b1-b0)
	in := []any{x, args.RowIdx, args.Cos, args.Sin}
	var ws []any
	for b := b0; b < b1; b++ {
		k, extra := m.blockKindOf(p, b)
		kinds = append(kinds, k)
		in = append(in, cache.tables[b])
		ws = graphexec.Args(graphexec.Args(ws, m.p.Blocks[b].tensors()...), extra...)
	}
	return graphexec.Call(m.groupExec(kinds, p), append(in, ws...)...)
}

// groupExec returns (compiling at first use) the program of consecutive blocks of these kinds.
func (m *Model) groupExec(kinds []blockKind, p *vsaPlan) *Exec {
	key := groupKey{kinds: fmt.Sprint(kinds), blocks: len(kinds), vsa: p != nil, trace: m.trace != nil}
	if e, ok := m.groupExecs[key]; ok {
		return e
	}
	spec, layout, fp8, trace := m.spec, m.p.BlockLayout, m.p.BlockFP8, key.trace
	e := graphexec.MustExec(m.backend, fmt.Sprintf("h3.joint_blocks_%d", len(kinds)), func(in []*Node) []*Node {
		x, rowIdx, cos, sin := in[0], in[1], in[2], in[3]
		mods, ws := in[4:4+len(kinds)], in[4+len(kinds):]
		var attnOut, ffOut *Node
		for i, k := range kinds {
			w := coreAndGate(ws[:k.weights], layout, fp8, k.vsa.gate)
			ws = ws[k.weights:]
			s := spec
			if k.sparse {
				s.Attention.Sparse = p.sparse(k.vsa)
			}
			x, attnOut, ffOut = s.jointBlock(x, mods[i], rowIdx, cos, sin, w)
		}
		return traced(trace, 1, x, attnOut, ffOut)
	})
	if m.groupExecs == nil {
		m.groupExecs = map[groupKey]*Exec{}
	}
	m.groupExecs[key] = e
	return e
}

// closeGroups frees the joint-block programs, the tensor-parallel VSA ones included.
func (m *Model) closeGroups() {
	for _, e := range m.groupExecs {
		graphexec.FinalizeExecs(e)
	}
	for _, e := range m.shardVSAExecs {
		graphexec.FinalizeExecs(e)
	}
	m.groupExecs, m.shardVSAExecs = nil, nil
}
