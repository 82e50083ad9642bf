// Package h3 is the MiniMax H3 joint audio-video diffusion transformer (T2VA), ported from FastVideo's
// MiniMaxH3Transformer3DModel to GoMLX graphs.
//
// One forward predicts the video and audio velocities of one packed document: rows
// [text | audio | video] (any order; the index lists say which row is which) with per-row token tags,
// timestep indices and 3-axis RoPE positions, as built by dit/h3/packing. The model runs as a handful of
// small executables and one joint-block executable compiled once and looped from Go over the layers,
// with the weights passed as explicit inputs:
//
//	time      sinusoidal projection (host) -> FP32 time MLP -> AdaLN input (SiLU or rank-r basis)
//	adaln     per block: modulation tables [nT·3, 6, D]; norm_out: [nT, 2, D]   (or a precomputed AdaLNCache)
//	text      context_embedder -> token refiner blocks -> final_norm             (once per prompt: TextState)
//	input     FP32 proj_in / audio_proj_in, packing into [L, D]
//	block ×N  joint block (per-row AdaLN, QK-norm, partial RoPE, attention, SwiGLU)
//	output    norm_out modulation -> FP32 proj_out / audio_proj_out on the video and audio rows
//
// Public methods return errors; GoMLX panics are recovered at this boundary.
//
// A generation uses it as:
//
//	m, err := h3.Load(backend, "snapshot/transformer", h3.Options{DType: dtypes.BFloat16})
//	text, err := m.PrepareText(features)                  // [S, text_dim], once per prompt
//	cache, err := m.PrepareAdaLN(videoLadder, audioLadder) // once per generation (optional)
//	for each step {
//	    out, err := m.Forward(h3.ForwardInputs{VideoRows: xv, AudioRows: xa, TextState: text, AdaLN: cache,
//	        Timesteps: uniq, TimestepIndices: idx, TokenTags: tags, PositionIDs: pos,
//	        VideoIndices: vi, AudioIndices: ai, TextIndices: ti})
//	    // out.Video, out.Audio: velocities; the schedulers update xv, xa
//	}
//
// A checkpoint converted with a fixed AdaLN ladder is checked with ReadAdaLNManifest(dir) and
// CheckAdaLNLadder(manifest, steps, ladders...) before anything heavy is loaded.
//
// Load also opens converted MLX folders (package quant): their INT8/INT6/INT4 linears (Q, K, V, out and
// FFN of every joint and refiner block) stay packed on the device and run through quant.Linear, which
// dequantizes them in the graph (Options.Dispatch selects the kernel by row count).
package h3

import (
	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/fusedops"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
	"fastvideo/quant"
)

// Options configure a Model.
type Options struct {
	// DType is the compute dtype: Float32 (default; exact, the CPU choice) or BFloat16 (the GPU choice).
	// proj_in, audio_proj_in, time_embedder, proj_out and audio_proj_out always stay float32.
	DType dtypes.DType
	// Attention selects the attention path (see package attention); the zero value is automatic.
	Attention attention.Options
	// QKPass chooses the form of the q/k RMSNorm and rotation (package fusedops); the zero value runs the
	// Triton kernel where the GPU build can, XLA's fusions of graph ops elsewhere. Both compute the same
	// products; fusedops.FormGraph is the baseline the benchmarks time the kernel against.
	QKPass fusedops.Form
	// NormPass chooses the form of the joint blocks' pre-norms (RMSNorm and modulation, the FFN's with the
	// gated attention residual before it), as QKPass does.
	NormPass fusedops.Form
	// Dispatch chooses the kernel of the quantized linears (see package quant); the zero value chooses by
	// row count from quant.DefaultDQGEMMFloor on.
	Dispatch quant.Dispatch
	// FP8 converts the six core linears of every joint block (Q, K, V, out, FFN in and out) to float8
	// e4m3fn once the weights are bound: per-output-channel scales amax/448, codes kept on the device
	// (half of bf16), activations quantized per token in the graph (package quant's FP8 linears;
	// Dispatch.FP8 picks the native or the emulated graph). The checkpoint must be dense.
	FP8 bool
	// AdaLNManifest declares that the checkpoint carries a precomputed AdaLN cache for these timesteps
	// instead of the AdaLN projection weights. Load fills it from the folder's manifest when present.
	AdaLNManifest *AdaLNManifest
	// Shards splits the joint blocks tensor-parallel (PlanShards) into this many shards at load; 0 or 1
	// keeps them whole. On a backend with at least Shards devices shard k lives on device k and each
	// joint block runs as one SPMD program, its partial outputs all-reduced; with fewer devices the
	// shards run one after the other on device 0, their partial outputs summed where the SPMD program
	// all-reduces (Model.TensorParallel says which). Both give the whole model's numbers within rounding.
	Shards int
	// BlockGroup is how many consecutive joint blocks one XLA program runs (0: DefaultBlockGroup for a
	// dense forward, 1 for a VSA one; 1: one block per program, the shortest compile). The numbers do
	// not depend on it.
	BlockGroup int
	// OnBind runs on each weight as it lands on the device (loaded or drawn), before the model converts or
	// caches anything from it (FP8 codes, the AdaLN step cache); it may replace the tensor. Random weights
	// take LoRA adapters through it (familykit.LoRA.MergeOnBind); a checkpoint's merge as they are read.
	OnBind func(*weights.Param) error
}

// Model is a loaded H3 transformer. It is not safe for concurrent Forward calls.
type Model struct {
	cfg     Config
	backend compute.Backend
	dtype   dtypes.DType
	p       *params
	spec    blockSpec
	ckCache *AdaLNCache // fixed AdaLN cache: checkpoint-carried or kept by KeepAdaLNCache
	// adalnDropped is set once KeepAdaLNCache freed the projection weights.
	adalnDropped bool
	closeSrc     func() error

	stages *modelkit.Stages[*stageExecs]
	// blocks runs the joint blocks: the execution strategy Options chose (blockRunner).
	blocks blockRunner
	opts   Options
	rope   *modelkit.RopeCache[[]float64]
	// shardSrc is the checkpoint the joint blocks' linears are cut from at load when they were kept
	// out of the bind (deferShards; nil otherwise, and once cut).
	shardSrc weights.Source

	// trace, when set (tests), receives named float32 copies of intermediates (names as the fixtures'
	// act.* tensors) and switches to executables that also return them.
	trace graphexec.Trace
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// DType returns the compute dtype.
func (m *Model) DType() dtypes.DType { return m.dtype }

// TensorParallel says how the joint blocks run: "" for a whole model, else the shard count and the path.
func (m *Model) TensorParallel() string {
	if m.blocks == nil {
		return ""
	}
	return m.blocks.describe()
}

// Close frees the weights and executables.
func (m *Model) Close() error {
	if m == nil || m.p == nil {
		return nil
	}
	if m.ckCache != nil {
		m.ckCache.Close()
		m.ckCache = nil
	}
	if m.blocks != nil {
		m.blocks.close()
		m.blocks = nil
	}
	err := modelkit.Release(m.p.set, m.closeSrc, m.stages, m.rope)
	m.p = nil
	return err
}

// WeightMemory is the memory of a model's bound weights, in bytes (tensor sizes, not allocator overhead).
type WeightMemory struct {
	Total int64
	// QuantizedLinears are the packed words, scales and biases of the quantized core linears;
	// FP8Linears the codes and scales of the FP8 ones (Options.FP8); DenseCoreLinears the core linears
	// (Q, K, V, Out, FFN in/out of every block) that are dense.
	QuantizedLinears, FP8Linears, DenseCoreLinears int64
	// AdaLN are the AdaLN projections (adaln_proj, norm_out.linear, adaln_basis) while loaded.
	AdaLN int64
}

// WeightMemory reports the memory of the weights the model holds now (after KeepAdaLNCache, without
// the AdaLN projections). The AdaLN cache and activations are not counted.
func (m *Model) WeightMemory() WeightMemory {
	var wm WeightMemory
	if m.p == nil {
		return wm
	}
	size := func(ps ...*weights.Param) int64 {
		var n int64
		for _, p := range ps {
			if p != nil && p.T != nil {
				n += p.T.Shape().ByteSize()
			}
		}
		return n
	}
	for _, p := range m.p.set.Params() {
		wm.Total += size(p)
	}
	if m.blocks != nil {
		sliced, copies := m.blocks.heldBytes()
		wm.Total += sliced + copies
		wm.DenseCoreLinears += sliced
	}
	for i := range m.p.Blocks {
		wm.AdaLN += size(m.p.Blocks[i].AdaLN.W, m.p.Blocks[i].AdaLN.B)
	}
	wm.AdaLN += size(m.p.NormOut.W, m.p.NormOut.B, m.p.AdaLNBasis)
	for _, c := range m.p.cores() {
		for _, w := range c.linears() {
			switch {
			case w.Quantized():
				wm.QuantizedLinears += size(w.W, w.Scales, w.Biases)
			case w.FP8:
				wm.FP8Linears += size(w.W, w.Scales)
			default:
				wm.DenseCoreLinears += size(w.W)
			}
		}
	}
	return wm
}

func (m *Model) execs() *stageExecs { return m.stages.Get(m.trace != nil) }

// emit hands an intermediate to the trace hook (tests) as float32.
func (m *Model) emit(name string, t *tensors.Tensor) error { return m.trace.Emit("h3", name, t) }
