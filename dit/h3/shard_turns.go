package h3

import (
	"fmt"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/fusedops"
	"fastvideo/internal/graphexec"
)

// shardRunner runs a tensor-parallel model's shards one after the other on device 0 (the backend has
// fewer devices than shards): attention, feed-forward and residual each run one shard's part of a
// block, the sums of the partials they take standing for the all-reduces. It is the fallback and the
// CPU reference of the SPMD path.
type shardRunner struct {
	backend compute.Backend
	w       *shardedWeights
	// execs are the dense parts, traced or not; vsaAttention the VSA attention parts met so far.
	execs        map[bool]*shardParts
	vsaAttention map[shardVSAKey]*Exec
}

// shardParts are the three executables of a block run shard by shard.
type shardParts struct {
	// attention: blockInputs, one shard's weights -> the shard's partial attention output.
	// feedForward: partialInputs of the attention partials, one shard's weights -> x + gated attention,
	// the shard's partial FFN output (traced: and the summed attention output).
	// residual: partialInputs of that x and the FFN partials -> the block output (traced: and the
	// summed FFN output).
	attention, feedForward, residual *Exec
}

func (p *shardParts) finalize() { graphexec.FinalizeExecs(p.attention, p.feedForward, p.residual) }

// partialInputs feed an executable that completes an all-reduce: the block's input, its modulation
// table and row indices, and the partial outputs of every shard, in shard order.
type partialInputs[T any] struct {
	X, Mod, RowIdx T
	Partials       []T
}

func (a *partialInputs[T]) Fields() []*T {
	f := []*T{&a.X, &a.Mod, &a.RowIdx}
	for i := range a.Partials {
		f = append(f, &a.Partials[i])
	}
	return f
}

// sumPartials is the all-reduce of partial outputs held side by side, in shard order.
func sumPartials(parts []*Node) *Node {
	sum := parts[0]
	for _, p := range parts[1:] {
		sum = Add(sum, p)
	}
	return sum
}

func newShardRunner(backend compute.Backend, w *shardedWeights) *shardRunner {
	return &shardRunner{backend: backend, w: w}
}

// parts returns (building at first use) the dense parts, traced or not.
func (r *shardRunner) parts(trace bool) *shardParts {
	if p, ok := r.execs[trace]; ok {
		return p
	}
	spec, n := r.w.spec, r.w.n()
	shape := r.w.blocks[0][0].shape // sharded blocks are dense (FP8 with shards is refused)
	weightsOf := func(in []*Node) coreWeights {
		w := graphWeights(shape)
		graphexec.Unpack(in, w)
		c := coreOf(w)
		spec.check(c)
		return c
	}
	p := &shardParts{
		attention: graphexec.MustExec(r.backend, "h3.joint_attention_shard", func(in []*Node) []*Node {
			var a blockInputs[*Node]
			w := weightsOf(graphexec.Unpack(in, &a))
			return []*Node{spec.jointAttention(a.X, fusedops.Modulation{Mod: a.Mod, Rows: a.RowIdx}, a.Cos, a.Sin, w)}
		}),
		feedForward: graphexec.MustExec(r.backend, "h3.joint_ffn_shard", func(in []*Node) []*Node {
			a := partialInputs[*Node]{Partials: make([]*Node, n)}
			w := weightsOf(graphexec.Unpack(in, &a))
			attnOut := sumPartials(a.Partials)
			sum, ff := spec.jointFeedForward(a.X, fusedops.Modulation{Mod: a.Mod, Rows: a.RowIdx}, attnOut, w)
			return traced(trace, 2, sum, ff, attnOut)
		}),
		residual: graphexec.MustExec(r.backend, "h3.joint_residual", func(in []*Node) []*Node {
			a := partialInputs[*Node]{Partials: make([]*Node, n)}
			graphexec.Unpack(in, &a)
			ff := sumPartials(a.Partials)
			return traced(trace, 1, jointResidual(a.X, fusedops.Modulation{Mod: a.Mod, Rows: a.RowIdx}, ff), ff)
		}),
	}
	if r.execs == nil {
		r.execs = map[bool]*shardParts{}
	}
	r.execs[trace] = p
	return p
}

// vsaAttentionExec returns (compiling at first use) the VSA attention part of joint block b under the
// plan p, fed a shard's weights followed by its gate slice, if any.
func (r *shardRunner) vsaAttentionExec(p *vsaPlan, b int, trace bool) *Exec {
	key := shardVSAKey{vsa: p.key(b, r.w.blocks[b][0].Gate != nil), trace: trace}
	if e, ok := r.vsaAttention[key]; ok {
		return e
	}
	spec, shape := r.w.spec, r.w.blocks[b][0].shape
	spec.Attention.Sparse = p.sparse(key.vsa)
	shape.gate = key.vsa.gate
	e := graphexec.MustExec(r.backend, "h3.joint_attention_shard_vsa", func(in []*Node) []*Node {
		var a blockInputs[*Node]
		w := graphWeights(shape)
		graphexec.Unpack(graphexec.Unpack(in, &a), w)
		c := coreOf(w)
		spec.check(c)
		return []*Node{spec.jointAttention(a.X, fusedops.Modulation{Mod: a.Mod, Rows: a.RowIdx}, a.Cos, a.Sin, c)}
	})
	if r.vsaAttention == nil {
		r.vsaAttention = map[shardVSAKey]*Exec{}
	}
	r.vsaAttention[key] = e
	return e
}

func (r *shardRunner) run(x *tensors.Tensor, f *blockForward) (*tensors.Tensor, error) {
	return chainBlocks(x, f, func(b int, x *tensors.Tensor) (int, []*tensors.Tensor, error) {
		args := f.args
		args.X, args.Mod = x, f.tables[b]
		res, err := r.runBlock(b, args, f)
		return b + 1, res, err
	})
}

// runBlock runs joint block b shard by shard (with VSA when the forward runs it), summing the partial
// outputs between the parts. It returns the block output and, when tracing, the summed attention and
// FFN outputs.
func (r *shardRunner) runBlock(b int, args blockInputs[*tensors.Tensor], f *blockForward) (out []*tensors.Tensor, err error) {
	trace := f.trace != nil
	ex := r.parts(trace)
	shards := r.w.blocks[b]
	attention, gate := ex.attention, false
	if f.vsa != nil {
		attention, gate = r.vsaAttentionExec(f.vsa, b, trace), shards[0].Gate != nil
	}
	var attn, ff, extra []*tensors.Tensor
	defer func() { graphexec.Finalize(append(append(attn, ff...), extra...)...) }()
	for _, w := range shards {
		res, err := graphexec.Call(attention, graphexec.Pack(&args, graphexec.Values(w.withGate(gate))...)...)
		if err != nil {
			return nil, err
		}
		attn = append(attn, res[0])
	}
	var sum, attnOut *tensors.Tensor
	for k, w := range shards {
		in := partialInputs[*tensors.Tensor]{X: args.X, Mod: args.Mod, RowIdx: args.RowIdx, Partials: attn}
		res, err := graphexec.Call(ex.feedForward, graphexec.Pack(&in, graphexec.Values(w)...)...)
		if err != nil {
			return nil, err
		}
		ff = append(ff, res[1])
		if k > 0 {
			// Every device computes the same residual sum after the all-reduce; one copy goes on.
			extra = append(extra, res[0])
			extra = append(extra, res[2:]...)
			continue
		}
		sum = res[0]
		if len(res) > 2 {
			attnOut = res[2]
		}
	}
	extra = append(extra, sum)
	in := partialInputs[*tensors.Tensor]{X: sum, Mod: args.Mod, RowIdx: args.RowIdx, Partials: ff}
	res, err := graphexec.Call(ex.residual, graphexec.Pack(&in)...)
	if err != nil {
		graphexec.Finalize(attnOut)
		return nil, err
	}
	if !trace {
		return res, nil
	}
	return []*tensors.Tensor{res[0], attnOut, res[1]}, nil
}

func (r *shardRunner) describe() string {
	return fmt.Sprintf("%d shards in turn on device 0, partial outputs summed (the backend has %d device(s))",
		r.w.n(), r.backend.NumDevices())
}

func (r *shardRunner) heldBytes() (sliced, copies int64) { return r.w.heldBytes() }

// closeExecs frees the executables, keeping the weights (a test moves them to the SPMD path).
func (r *shardRunner) closeExecs() {
	for _, p := range r.execs {
		p.finalize()
	}
	for _, e := range r.vsaAttention {
		graphexec.FinalizeExecs(e)
	}
	r.execs, r.vsaAttention = nil, nil
}

func (r *shardRunner) close() {
	r.closeExecs()
	r.w.close()
}
