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

// Video Sparse Attention in a tensor-parallel model. VSA works head by head (each head's compressed
// keys, its top-k tiles, its gate), so a shard runs it on its own heads: to_gate_compress [inner, D] is
// cut by the output rows of those heads like Q, and the sparse attention's partial output goes through
// to_out's columns and the same all-reduce as dense attention.

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

// shardedWeights are the joint blocks cut into shards at load: blocks[b][k] is shard k of block b, its
// norms the parameter set's (or, on another device, copies), its linears and VSA gate (nil: none)
// slices of the whole ones.
type shardedWeights struct {
	spec   blockSpec // one shard's: local heads and FFN width, no all-reduce of its own
	blocks [][]*blockWeights[*tensors.Tensor]
	// devices are the shards' devices; copies the norms placed on devices other than 0.
	devices []compute.DeviceNum
	copies  []*tensors.Tensor
}

func (s *shardedWeights) n() int { return len(s.devices) }

// slices are shard w's tensors of its own: the linears' slices and the gate's.
func (w *blockWeights[T]) slices() []*T {
	var out []*T
	for _, l := range w.linears() {
		out = append(out, &l.W)
	}
	return append(out, &w.Gate)
}

// close frees the slices and the copies (the norms on device 0 belong to the parameter set).
func (s *shardedWeights) close() {
	for _, shards := range s.blocks {
		for _, w := range shards {
			for _, t := range w.slices() {
				graphexec.Finalize(*t)
			}
		}
	}
	graphexec.Finalize(s.copies...)
	s.blocks, s.copies = nil, nil
}

// heldBytes is the memory of the slices of every shard and of the norms copied to other devices.
func (s *shardedWeights) heldBytes() (sliced, copies int64) {
	for _, shards := range s.blocks {
		for _, w := range shards {
			for _, t := range w.slices() {
				if *t != nil {
					sliced += (*t).Shape().ByteSize()
				}
			}
		}
	}
	for _, t := range s.copies {
		copies += t.Shape().ByteSize()
	}
	return sliced, copies
}

// shardDevices are the devices of shards 0..n-1: their own where the backend has n, else device 0 for
// all (the shards then run in turn).
func shardDevices(backend compute.Backend, n int) []compute.DeviceNum {
	devices := make([]compute.DeviceNum, n)
	if backend.NumDevices() >= n {
		for k := range devices {
			devices[k] = compute.DeviceNum(k)
		}
	}
	return devices
}

// shardCutter cuts the joint blocks' weights into shards: from the checkpoint (src, when deferShards
// kept them out of the bind: sliced on the host, each slice uploaded to its shard's device), else from
// the bound (drawn) weights with the device slicer, freeing the whole ones.
type shardCutter struct {
	backend compute.Backend
	dtype   dtypes.DType
	src     weights.Source // nil: slice the bound weights
	devices []compute.DeviceNum
	sl      *slicer
}

// cutShards splits every joint block's core linears and VSA gate into len(devices) shards by
// shardRules, so the model holds 1/n of each per shard; spec is the whole model's.
func cutShards(backend compute.Backend, dtype dtypes.DType, p *params, spec blockSpec, src weights.Source, devices []compute.DeviceNum) (sw *shardedWeights, err error) {
	defer graphexec.Recover(&err, "h3: slicing the joint blocks into shards")
	if p.BlockLayout != (linearLayout{}) {
		return nil, fmt.Errorf("h3: tensor parallelism of quantized joint blocks is not supported; load a dense checkpoint")
	}
	n := len(devices)
	sw = &shardedWeights{spec: spec, devices: devices}
	sw.spec.Heads, sw.spec.FFN, sw.spec.AllReduce = spec.Heads/n, spec.FFN/n, nil
	c := &shardCutter{backend: backend, dtype: dtype, src: src, devices: devices}
	if src == nil {
		c.sl = newSlicer(backend, n)
		defer graphexec.FinalizeExecs(c.sl.execs[:]...)
	}
	for b := range p.Blocks {
		per, err := c.block(&p.Blocks[b])
		if per != nil {
			sw.blocks = append(sw.blocks, per)
		}
		if err != nil {
			sw.close()
			return nil, err
		}
	}
	return sw, nil
}

// block cuts one joint block into its shards' weights.
func (c *shardCutter) block(bp *blockParams) ([]*blockWeights[*tensors.Tensor], error) {
	per := make([]*blockWeights[*tensors.Tensor], len(c.devices))
	for k := range per {
		per[k] = &blockWeights[*tensors.Tensor]{shape: blockShape{schemes: bp.layout()},
			Norm1: bp.Norm1.T, Norm2: bp.Norm2.T, NormQ: bp.NormQ.T, NormK: bp.NormK.T}
	}
	for i, w := range bp.linears() {
		parts, err := c.cut(w.W, shardRules[i].Split)
		if err != nil {
			return per, err
		}
		for k := range per {
			per[k].linears()[i].W = parts[k]
		}
	}
	gate, err := c.gate(bp.Gate)
	for k := range gate {
		per[k].Gate = gate[k]
	}
	return per, err
}

// cut returns the shards' slices of p under split.
func (c *shardCutter) cut(p *weights.Param, split ShardSplit) ([]*tensors.Tensor, error) {
	if c.sl == nil {
		return c.loadSlices(p, split)
	}
	parts, err := graphexec.Call(c.sl.execs[split], p.T)
	releaseParams(p)
	return parts, err
}

// gate cuts a VSA gate into the shards' row slices (nil: the block has none).
func (c *shardCutter) gate(g *weights.Param) ([]*tensors.Tensor, error) {
	switch {
	case g == nil:
		return nil, nil
	case c.sl != nil:
		if !g.Bound() {
			return nil, nil
		}
		return c.cut(g, SplitRows)
	}
	if _, ok := weights.HeaderOf(c.src, g.Name); !ok {
		return nil, nil
	}
	return c.loadSlices(g, SplitRows)
}

// deferShards keeps the joint blocks' core linears of a dense checkpoint out of the bind (weights
// Param.Deferred), and their VSA gates, so that cutShards reads each from the checkpoint and no device
// ever holds a whole block's linears. It reports whether it did.
func deferShards(p *params, shards int) bool {
	if shards < 2 || p.BlockFP8 || p.BlockLayout != (linearLayout{}) {
		return false
	}
	for b := range p.Blocks {
		for _, w := range p.Blocks[b].linears() {
			w.W.Deferred = true
		}
		if g := p.Blocks[b].Gate; g != nil {
			g.Deferred = true
		}
	}
	return true
}

// loadSlices reads the checkpoint tensor of p and uploads shard k's slice of it (split) to devices[k].
func (c *shardCutter) loadSlices(p *weights.Param, split ShardSplit) ([]*tensors.Tensor, error) {
	devices := c.devices
	info, ok := c.src.Tensor(p.Name)
	if !ok {
		return nil, fmt.Errorf("h3: %s is missing from the checkpoint", p.Name)
	}
	dt := p.Storage
	if dt == dtypes.InvalidDType {
		dt = c.dtype
	}
	out := make([]*tensors.Tensor, 0, len(devices))
	for k, dev := range devices {
		axis, spans := shardSpans(split, p.Shape, k, len(devices))
		part, err := weights.SliceInfo(info, axis, spans...)
		var t *tensors.Tensor
		if err == nil {
			t, err = weights.LoadTo(part, dt, c.backend, dev)
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

func newSlicer(backend compute.Backend, n int) *slicer {
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
	s.execs[SplitRows] = graphexec.MustExec(backend, "h3.shard_rows", split(SplitRows))
	s.execs[SplitColumns] = graphexec.MustExec(backend, "h3.shard_columns", split(SplitColumns))
	s.execs[SplitGatedRows] = graphexec.MustExec(backend, "h3.shard_gated_rows", split(SplitGatedRows))
	return &s
}

// shardVSAKey identifies a VSA executable of a tensor-parallel model.
type shardVSAKey struct {
	sparse bool // VSA (vsa is its geometry); false: the dense program
	vsa    vsaKey
	trace  bool
}
