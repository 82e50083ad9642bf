package h3

import (
	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// Video Sparse Attention in a tensor-parallel model. VSA works head by head (each head's compressed
// keys, its top-k tiles, its gate), so a shard runs it on its own heads: to_gate_compress [inner, D] is
// cut by the output rows of those heads like Q, and the sparse attention's partial output goes through
// to_out's columns and the same all-reduce as dense attention.

// shardVSAKey identifies a VSA executable of a tensor-parallel model: the fallback's attention part
// or the SPMD block program.
type shardVSAKey struct {
	vsa         vsaKey
	spmd, trace bool
}

// cutGate cuts joint block b's VSA gate into the shards' row slices (nil: the block has none): from
// the checkpoint when deferShards kept it out of the bind, else from the bound (drawn) gate with the
// device slicer, freeing it.
func (m *Model) cutGate(b int, sl *slicer, devices []compute.DeviceNum) ([]*tensors.Tensor, error) {
	g := m.p.Blocks[b].Gate
	switch {
	case g == nil:
		return nil, nil
	case sl != nil:
		if !g.Bound() {
			return nil, nil
		}
		parts, err := graphexec.Call(sl.execs[SplitRows], g.T)
		releaseParams(g)
		return parts, err
	}
	if _, ok := weights.HeaderOf(m.shardSrc, g.Name); !ok {
		return nil, nil
	}
	return m.loadSlices(g, SplitRows, devices)
}

// shardVSAExec returns (compiling at first use) joint block b's VSA executable of a tensor-parallel
// model under the plan p: the SPMD block program when the shards are placed on their devices, else the
// fallback's attention part. Either takes the shard's weights followed by its gate slice, if any.
func (m *Model) shardVSAExec(p *vsaPlan, b int) *Exec {
	key := shardVSAKey{vsa: p.key(b, m.shards.gates[b] != nil), spmd: m.shards.spmd != nil, trace: m.trace != nil}
	if e, ok := m.shardVSAExecs[key]; ok {
		return e
	}
	spec, layout := m.shards.spec, m.p.BlockLayout
	spec.Attention.Sparse = p.sparse(key.vsa)
	var e *Exec
	if key.spmd {
		sp := m.shards.spmd
		e = sp.compile(m.backend, "h3.joint_block_spmd_vsa", sp.devices, func(reduce AllReduce) func(in []*Node) []*Node {
			s := spec
			s.AllReduce = reduce
			return jointBlockFn(s, layout, false, key.vsa.gate, key.trace) // sharded blocks are dense
		})
	} else {
		e = graphexec.MustExec(m.backend, "h3.joint_attention_shard_vsa", func(in []*Node) []*Node {
			var a blockInputs[*Node]
			w := coreAndGate(graphexec.Unpack(in, &a), layout, false, key.vsa.gate)
			spec.check(w)
			return []*Node{spec.jointAttention(a.X, rowTables(a.X, a.Mod, a.RowIdx), a.Cos, a.Sin, w)}
		})
	}
	if m.shardVSAExecs == nil {
		m.shardVSAExecs = map[shardVSAKey]*Exec{}
	}
	m.shardVSAExecs[key] = e
	return e
}

// shardInputs is shard k's weights of joint block b, its gate slice appended when the forward runs VSA
// and the block has one.
func (m *Model) shardInputs(p *vsaPlan, b, k int) []*tensors.Tensor {
	w := m.shards.weights[b][k]
	if p == nil || m.shards.gates[b] == nil {
		return w
	}
	return append(append([]*tensors.Tensor(nil), w...), m.shards.gates[b][k])
}
