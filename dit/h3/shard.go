package h3

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// Tensor parallelism of the joint blocks (docs/architecture.md, "Tensor parallelism"): Megatron's split
// of a transformer block by attention heads and FFN width. Each shard holds 1/N of every joint block's
// Q/K/V (output rows of its heads), to_out (the matching input columns), FFN-in (the value and gate rows
// of its FFN slice) and FFN-out (the matching input columns); its attention and FFN outputs are partial
// sums that one all-reduce each completes. Norms, AdaLN, the text refiner, the embedders and the output
// heads are replicated.

// ShardSplit says which part of a weight a tensor-parallel shard holds.
type ShardSplit int

const (
	// Replicated weights are whole on every shard.
	Replicated ShardSplit = iota
	// SplitRows gives shard k output rows [k·n/N, (k+1)·n/N): its heads of Q/K/V.
	SplitRows
	// SplitColumns gives shard k input columns [k·n/N, (k+1)·n/N): the inputs its heads or FFN slice feed.
	SplitColumns
	// SplitGatedRows is FFN-in [value F | gate F]: shard k holds value rows and gate rows of its F slice.
	SplitGatedRows
)

func (s ShardSplit) String() string {
	return [...]string{"replicated", "output rows", "input columns", "value and gate rows"}[s]
}

// ShardRule is how the weight of a joint block under Name (block-relative) is split.
type ShardRule struct {
	Name  string
	Split ShardSplit
}

// shardRules are the split weights of every joint block, in linearLayout order; everything else is
// replicated.
var shardRules = [numCoreLinears]ShardRule{
	{coreLinearNames[0], SplitRows}, {coreLinearNames[1], SplitRows}, {coreLinearNames[2], SplitRows},
	{coreLinearNames[3], SplitColumns}, {coreLinearNames[4], SplitGatedRows}, {coreLinearNames[5], SplitColumns},
}

// ShardPlan is the tensor-parallel layout of a model over Devices shards and what each device holds.
type ShardPlan struct {
	Devices int
	// LocalHeads and LocalFFN are one shard's attention heads and FFN width.
	LocalHeads, LocalFFN int
	// Rules are the split weights of every joint block (transformer_blocks.<i>.<name>).
	Rules []ShardRule
	// ShardedBytes is one device's slices of the split weights; ReplicatedBytes the weights every device
	// holds whole (the released table at the compute dtype; VSA gates not counted).
	ShardedBytes, ReplicatedBytes int64
}

// DeviceWeightBytes is the weight memory of one device.
func (p ShardPlan) DeviceWeightBytes() int64 { return p.ShardedBytes + p.ReplicatedBytes }

// PlanShards lays cfg's joint blocks out over devices shards at compute dtype dt. The head count and the
// FFN width must divide by devices.
func PlanShards(cfg Config, dt dtypes.DType, devices int) (ShardPlan, error) {
	if err := cfg.Validate(); err != nil {
		return ShardPlan{}, err
	}
	if err := checkShards(cfg, devices); err != nil {
		return ShardPlan{}, err
	}
	p, err := declareParams(cfg, dt, nil, nil)
	if err != nil {
		return ShardPlan{}, err
	}
	split := map[string]bool{}
	for _, c := range p.Blocks {
		for _, w := range c.linears() {
			split[w.W.Name] = true
		}
	}
	plan := ShardPlan{Devices: devices, LocalHeads: cfg.NumAttentionHeads / devices, LocalFFN: cfg.FFNDim / devices,
		Rules: shardRules[:]}
	var sharded int64
	for _, q := range p.set.Params() {
		if q.Optional {
			continue
		}
		storage := q.Storage
		if storage == dtypes.InvalidDType {
			storage = dt
		}
		n := int64(storage.Size())
		for _, d := range q.Shape {
			n *= int64(d)
		}
		if split[q.Name] {
			sharded += n
		} else {
			plan.ReplicatedBytes += n
		}
	}
	plan.ShardedBytes = sharded / int64(devices)
	return plan, nil
}

// checkShards refuses a shard count the heads or the FFN width do not divide into.
func checkShards(cfg Config, devices int) error {
	switch {
	case devices < 1:
		return fmt.Errorf("h3: %d tensor-parallel shards; want 1 or more", devices)
	case cfg.NumAttentionHeads%devices != 0:
		return fmt.Errorf("h3: %d attention heads do not split over %d shards; use a divisor of the head count", cfg.NumAttentionHeads, devices)
	case cfg.FFNDim%devices != 0:
		return fmt.Errorf("h3: FFN width %d does not split over %d shards; use a divisor of it", cfg.FFNDim, devices)
	}
	return nil
}

// shardedBlocks are the joint blocks cut into shards at load: weights[b][k] is shard k of block b in
// coreFromSlice order (the norms shared, the linears sliced).
type shardedBlocks struct {
	spec    blockSpec // one shard's: local heads and FFN width, no all-reduce of its own
	weights [][][]*tensors.Tensor
	// gates[b][k] is shard k's rows of block b's VSA gate (gates[b] nil: the block has none).
	gates [][]*tensors.Tensor
	// spmd places shard k on its own device and runs each block as one SPMD program (nil: the shards run
	// in turn on device 0).
	spmd *spmdPlacement
}

func (s *shardedBlocks) n() int { return len(s.weights[0]) }

// close frees the slices (the norms belong to the parameter set).
func (s *shardedBlocks) close() {
	if s == nil {
		return
	}
	for _, shards := range s.weights {
		for _, w := range shards {
			graphexec.Finalize(w[numBlockNorms:]...)
		}
	}
	for _, g := range s.gates {
		graphexec.Finalize(g...)
	}
	if s.spmd != nil {
		graphexec.Finalize(s.spmd.copies...)
	}
	s.weights, s.gates = nil, nil
}

// bytes is the memory of the slices of every shard; copies that of the norms replicated on the other
// devices.
func (s *shardedBlocks) bytes() (sliced, copies int64) {
	for _, shards := range s.weights {
		for _, w := range shards {
			for _, t := range w[numBlockNorms:] {
				sliced += t.Shape().ByteSize()
			}
		}
	}
	for _, g := range s.gates {
		for _, t := range g {
			sliced += t.Shape().ByteSize()
		}
	}
	if s.spmd != nil {
		for _, t := range s.spmd.copies {
			copies += t.Shape().ByteSize()
		}
	}
	return sliced, copies
}

// shardDevices are the devices of shards 0..n-1: their own where the backend has n, else device 0 for
// all (the shards then run in turn).
func (m *Model) shardDevices(n int) []compute.DeviceNum {
	devices := make([]compute.DeviceNum, n)
	if m.backend.NumDevices() >= n {
		for k := range devices {
			devices[k] = compute.DeviceNum(k)
		}
	}
	return devices
}

// newShardedBlocks starts the n-way split of the joint blocks: one shard's spec and, per block, each
// shard's weight list holding the block's norms (shared; the sliced linears are appended).
func (m *Model) newShardedBlocks(n int) *shardedBlocks {
	sb := &shardedBlocks{spec: m.spec}
	sb.spec.Heads, sb.spec.FFN, sb.spec.AllReduce = m.spec.Heads/n, m.spec.FFN/n, nil
	return sb
}

func sharedNorms(c *coreParams, n int) [][]*tensors.Tensor {
	per := make([][]*tensors.Tensor, n)
	for k := range per {
		per[k] = []*tensors.Tensor{c.Norm1.T, c.Norm2.T, c.NormQ.T, c.NormK.T}
	}
	return per
}

// cutShards splits every joint block's core linears into n shards by shardRules, so the model holds
// 1/n of each per shard: straight from the checkpoint when deferShards kept them out of the bind,
// else by slicing the bound (drawn) weights on their device and freeing them.
func (m *Model) cutShards(n int, devices []compute.DeviceNum) (err error) {
	defer graphexec.Recover(&err, "h3: slicing the joint blocks into shards")
	if m.p.BlockLayout != (linearLayout{}) {
		return fmt.Errorf("h3: tensor parallelism of quantized joint blocks is not supported; load a dense checkpoint")
	}
	sb := m.newShardedBlocks(n)
	var sl *slicer
	if m.shardSrc == nil {
		sl = newSlicer(m, n)
		defer graphexec.FinalizeExecs(sl.execs[:]...)
	}
	for b := range m.p.Blocks {
		c := &m.p.Blocks[b].coreParams
		per := sharedNorms(c, n)
		for i, w := range c.linears() {
			var parts []*tensors.Tensor
			if sl != nil {
				parts, err = graphexec.Call(sl.execs[shardRules[i].Split], w.W.T)
				releaseParams(w.W)
			} else {
				parts, err = m.loadSlices(w.W, shardRules[i].Split, devices)
			}
			if err != nil {
				sb.weights = append(sb.weights, per)
				sb.close()
				return err
			}
			for k := range per {
				per[k] = append(per[k], parts[k])
			}
		}
		sb.weights = append(sb.weights, per)
		gate, err := m.cutGate(b, sl, devices)
		if err != nil {
			sb.close()
			return err
		}
		sb.gates = append(sb.gates, gate)
	}
	m.shards, m.shardSrc = sb, nil
	return nil
}

// deferShards keeps the joint blocks' core linears of a dense checkpoint out of the bind (weights
// Param.Deferred), and their VSA gates: cutShards then reads each from src, slices it on the host and
// uploads every slice straight to its shard's device, so no device ever holds a whole block's linears.
func (m *Model) deferShards(src weights.Source) {
	if m.shardsAsked < 2 || m.p.BlockFP8 || m.p.BlockLayout != (linearLayout{}) {
		return
	}
	for b := range m.p.Blocks {
		for _, w := range m.p.Blocks[b].linears() {
			w.W.Deferred = true
		}
		if g := m.p.Blocks[b].Gate; g != nil {
			g.Deferred = true
		}
	}
	m.shardSrc = src
}

// loadSlices reads the checkpoint tensor of p and uploads shard k's slice of it (split) to devices[k].
func (m *Model) loadSlices(p *weights.Param, split ShardSplit, devices []compute.DeviceNum) ([]*tensors.Tensor, error) {
	info, ok := m.shardSrc.Tensor(p.Name)
	if !ok {
		return nil, fmt.Errorf("h3: %s is missing from the checkpoint", p.Name)
	}
	dt := p.Storage
	if dt == dtypes.InvalidDType {
		dt = m.dtype
	}
	out := make([]*tensors.Tensor, 0, len(devices))
	for k, dev := range devices {
		axis, spans := shardSpans(split, p.Shape, k, len(devices))
		part, err := weights.SliceInfo(info, axis, spans...)
		var t *tensors.Tensor
		if err == nil {
			t, err = weights.LoadTo(part, dt, m.backend, dev)
		}
		if err != nil {
			graphexec.Finalize(out...)
			return nil, fmt.Errorf("h3: shard %d of %s: %w", k, p.Name, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// shardSpans is what shard k of n holds of a weight of shape under split: the axis and its index
// spans, concatenated in order.
func shardSpans(split ShardSplit, shape []int, k, n int) (axis int, spans []weights.Span) {
	switch split {
	case SplitColumns:
		step := shape[1] / n
		return 1, []weights.Span{{From: k * step, To: (k + 1) * step}}
	case SplitGatedRows:
		f := shape[0] / 2
		step := f / n
		return 0, []weights.Span{{From: k * step, To: (k + 1) * step}, {From: f + k*step, To: f + (k+1)*step}}
	}
	step := shape[0] / n
	return 0, []weights.Span{{From: k * step, To: (k + 1) * step}}
}

// slicer holds one executable per ShardSplit that cuts a weight [out, in] on its device into its n
// shards (shardSpans), for weights drawn on the device.
type slicer struct{ execs [SplitGatedRows + 1]*Exec }

func newSlicer(m *Model, n int) *slicer {
	split := func(rule ShardSplit) func(w *Node) []*Node {
		return func(w *Node) []*Node {
			out := make([]*Node, n)
			for k := range out {
				axis, spans := shardSpans(rule, w.Shape().Dimensions, k, n)
				parts := make([]*Node, len(spans))
				for i, s := range spans {
					ranges := []SliceAxisSpec{AxisRange(), AxisRange()}
					ranges[axis] = AxisRange(s.From, s.To)
					parts[i] = Slice(w, ranges...)
				}
				out[k] = Concatenate(parts, axis)
			}
			return out
		}
	}
	var s slicer
	s.execs[SplitRows] = graphexec.MustExec(m.backend, "h3.shard_rows", split(SplitRows))
	s.execs[SplitColumns] = graphexec.MustExec(m.backend, "h3.shard_columns", split(SplitColumns))
	s.execs[SplitGatedRows] = graphexec.MustExec(m.backend, "h3.shard_gated_rows", split(SplitGatedRows))
	return &s
}

// shardExecs run the joint blocks of a sharded model: spmd the whole block on every device at once, or,
// on one device, attention, feedForward and residual run one shard's part of a block each, the sums of
// the partials they take standing for the all-reduces.
type shardExecs struct {
	spmd *Exec
	// attention: X, Mod, RowIdx, Cos, Sin, shard weights -> the shard's partial attention output.
	// feedForward: X, Mod, RowIdx, every shard's attention partial, shard weights -> x + gated attention,
	// the shard's partial FFN output (traced: and the summed attention output).
	// residual: that x, Mod, RowIdx, every shard's FFN partial -> the block output (traced: and the
	// summed FFN output).
	attention, feedForward, residual *Exec
}

func (s *shardExecs) Finalize() {
	graphexec.FinalizeExecs(s.spmd, s.attention, s.feedForward, s.residual)
}

// sumPartials is the all-reduce of partial outputs held side by side, in shard order.
func sumPartials(parts []*Node) *Node {
	sum := parts[0]
	for _, p := range parts[1:] {
		sum = Add(sum, p)
	}
	return sum
}

func (m *Model) newShardExecs(trace bool) *shardExecs {
	if m.shards.spmd != nil {
		return &shardExecs{spmd: m.newSPMDExec(trace)}
	}
	spec, n, layout := m.shards.spec, m.shards.n(), m.p.BlockLayout
	weightsOf := func(in []*Node) coreWeights {
		w := coreFromSlice(in, layout, false) // sharded blocks are dense (FP8 with shards is refused)
		spec.check(w)
		return w
	}
	return &shardExecs{
		attention: graphexec.MustExec(m.backend, "h3.joint_attention_shard", func(in []*Node) []*Node {
			var a blockInputs[*Node]
			w := weightsOf(graphexec.Unpack(in, &a))
			return []*Node{spec.jointAttention(a.X, rowTables(a.X, a.Mod, a.RowIdx), a.Cos, a.Sin, w)}
		}),
		feedForward: graphexec.MustExec(m.backend, "h3.joint_ffn_shard", func(in []*Node) []*Node {
			x, table := in[0], rowTables(in[0], in[1], in[2])
			attnOut := sumPartials(in[3 : 3+n])
			sum, ff := spec.jointFeedForward(x, table, attnOut, weightsOf(in[3+n:]))
			return traced(trace, 2, sum, ff, attnOut)
		}),
		residual: graphexec.MustExec(m.backend, "h3.joint_residual", func(in []*Node) []*Node {
			ff := sumPartials(in[3:])
			return traced(trace, 1, jointResidual(in[0], rowTables(in[0], in[1], in[2]), ff), ff)
		}),
	}
}

// runShardedBlock runs joint block b shard by shard (with VSA when vsa is set), summing the partial
// outputs between the parts. It returns the block output and, when tracing, the summed attention and
// FFN outputs.
func (m *Model) runShardedBlock(b int, args blockInputs[*tensors.Tensor], vsa *vsaPlan) (out []*tensors.Tensor, err error) {
	ex := m.execs().shard
	shards := m.shards.weights[b]
	attention := ex.attention
	if vsa != nil {
		attention = m.shardVSAExec(vsa, b)
	}
	var attn, ff, extra []*tensors.Tensor
	defer func() { graphexec.Finalize(append(append(attn, ff...), extra...)...) }()
	for k := range shards {
		res, err := graphexec.Call(attention, graphexec.Pack(&args, m.shardInputs(vsa, b, k)...)...)
		if err != nil {
			return nil, err
		}
		attn = append(attn, res[0])
	}
	head := []any{args.X, args.Mod, args.RowIdx}
	var sum, attnOut *tensors.Tensor
	for k, w := range shards {
		res, err := graphexec.Call(ex.feedForward, graphexec.Args(graphexec.Args(append([]any(nil), head...), attn...), w...)...)
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
	res, err := graphexec.Call(ex.residual, graphexec.Args([]any{sum, args.Mod, args.RowIdx}, ff...)...)
	if err != nil {
		graphexec.Finalize(attnOut)
		return nil, err
	}
	if m.trace == nil {
		return res, nil
	}
	return []*tensors.Tensor{res[0], attnOut, res[1]}, nil
}
