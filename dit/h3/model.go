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
	"fmt"
	"path/filepath"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/safetensors"
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

// Load opens a released transformer/ folder (config.json plus sharded or single safetensors), or a
// converted MLX folder (mlx_h3_dit.json + mlx_h3_dit.safetensors, quantized or not, as FastVideo's
// scripts/checkpoint_conversion/convert_minimax_h3_mlx.py writes it: the config is the manifest's),
// and binds its weights on backend. Affine-quantized linears stay packed on the
// device and run through quant.Linear; linears in a block-scaled float mode (mxfp8, mxfp4, nvfp4) are
// dequantized on the host as MLX's fp_dequantize computes them and bound dense in the compute dtype. A folder that carries an AdaLN cache (adaln_cache.json or
// mlx_h3_dit.json with an "adaln_cache" entry, and the __adaln_cache.* tensors) is loaded without the
// AdaLN projections.
func Load(backend compute.Backend, dir string, opts Options) (*Model, error) {
	cfg, src, closeSrc, err := openTransformer(dir)
	if err != nil {
		return nil, err
	}
	if opts.AdaLNManifest == nil {
		if opts.AdaLNManifest, err = ReadAdaLNManifest(dir); err != nil {
			closeSrc()
			return nil, err
		}
	}
	m, err := FromSource(backend, cfg, src, opts)
	if err != nil {
		closeSrc()
		return nil, err
	}
	// Weights were copied (or uploaded) by Bind, except same-dtype host tensors on the Go backend which may
	// alias the mapping: keep the checkpoint open for the model's lifetime.
	m.closeSrc = closeSrc
	return m, nil
}

// openTransformer opens the weights of a folder Load accepts, with their config: a converted MLX folder
// (the manifest supplies the config; the checkpoint is a weights.Source under the released names that
// also reports which linears it quantizes), else a released transformer/ folder.
func openTransformer(dir string) (Config, weights.Source, func() error, error) {
	if !IsConverted(dir) {
		cfg, err := ReadConfig(dir)
		if err != nil {
			return Config{}, nil, nil, err
		}
		ck, err := safetensors.OpenCheckpoint(dir)
		if err != nil {
			return Config{}, nil, nil, fmt.Errorf("h3: opening the transformer weights: %w", err)
		}
		return cfg, ck, ck.Close, nil
	}
	ck, man, err := OpenConverted(dir)
	if err != nil {
		return Config{}, nil, nil, fmt.Errorf("h3: opening the converted checkpoint %s: %w", dir, err)
	}
	where := filepath.Join(dir, ManifestFile)
	cfg, err := ParseConfig(man.Config)
	if err != nil {
		err = fmt.Errorf("%w (the \"config\" entry of %s)", err, where)
	} else if n := man.NumBlocks; n != 0 && n != cfg.NumLayers {
		err = fmt.Errorf("h3: %s has num_blocks = %d but its config has num_layers = %d; re-convert the checkpoint",
			where, n, cfg.NumLayers)
	}
	if err != nil {
		ck.Close()
		return Config{}, nil, nil, err
	}
	return cfg, ck, ck.Close, nil
}

// FromSource binds the weights of src (released names) for cfg. When src is a quantized checkpoint (a
// *quant.Checkpoint, or any quant.SchemeSource) the linears it quantizes are bound packed (words, scales,
// biases) and run through quant.Linear; the rest of the model is unchanged.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (m *Model, err error) {
	defer graphexec.Recover(&err, "h3: building the model")
	return modelkit.Populate(func() (*Model, error) { return newModel(backend, cfg, opts, schemesOf(src)) }, func(m *Model) error {
		if deferShards(m.p, m.opts.Shards) {
			m.shardSrc = src
		}
		done, err := m.convertFP8OnBind()
		if err != nil {
			return err
		}
		defer done()
		return modelkit.BindSource("h3", src, m.p.set, m.dtype, backend, m.finish)
	})
}

// newModel validates the configuration and options and declares the parameter table (nothing bound);
// schemes says which core linears are quantized (nil: none).
func newModel(backend compute.Backend, cfg Config, opts Options, schemes schemeFunc) (*Model, error) {
	dt, err := modelkit.Prepare("h3", cfg, backend, opts.DType, modelkit.DiTDTypes)
	if err != nil {
		return nil, err
	}
	if _, err := attention.Resolve(backend, dt, cfg.AttentionHeadDim, opts.Attention); err != nil {
		return nil, err
	}
	if err := opts.Dispatch.Validate(); err != nil {
		return nil, fmt.Errorf("h3: %w", err)
	}
	if opts.Shards != 0 {
		if err := checkShards(cfg, opts.Shards); err != nil {
			return nil, err
		}
	}
	if opts.BlockGroup < 0 {
		return nil, fmt.Errorf("h3: Options.BlockGroup %d is negative; use 0 for the default (%d joint blocks per program for a dense forward, 1 for a VSA one) or a positive count", opts.BlockGroup, DefaultBlockGroup)
	}
	if opts.AdaLNManifest != nil {
		if err := opts.AdaLNManifest.validate(cfg); err != nil {
			return nil, err
		}
	}
	p, err := declareParams(cfg, dt, opts.AdaLNManifest, schemes)
	if err != nil {
		return nil, err
	}
	if opts.FP8 && p.BlockLayout != (linearLayout{}) {
		return nil, fmt.Errorf("h3: Options.FP8 converts dense joint-block linears, but this checkpoint stores them %s; "+
			"load the released (dense) transformer for FP8", describeScheme(p.BlockLayout[0]))
	}
	p.BlockFP8 = opts.FP8
	return &Model{
		cfg: cfg, backend: backend, dtype: dt, p: p, rope: modelkit.NewRopeCache(slices.Equal[[]float64]),
		spec: blockSpec{
			Heads: cfg.NumAttentionHeads, HeadDim: cfg.AttentionHeadDim, RotaryDim: cfg.RotaryDim(), FFN: cfg.FFNDim,
			NormEps: cfg.NormEps, QKNormEps: cfg.QKNormEps, Attention: opts.Attention,
			Dispatch: opts.Dispatch,
		},
		opts: opts,
	}, nil
}

// newBlockRunner is the joint blocks' execution strategy of Options: tensor-parallel shards as one SPMD
// program per block when the backend has a device per shard, else in turn on device 0; without shards
// the bound blocks on one device, runs of them per program.
func (m *Model) newBlockRunner() (blockRunner, error) {
	n := m.opts.Shards
	if n < 2 {
		r := &groupedRunner{backend: m.backend, spec: m.spec, group: m.opts.BlockGroup}
		for b := range m.p.Blocks {
			var gate *tensors.Tensor
			if g := m.p.Blocks[b].Gate; g.Bound() {
				gate = g.T
			}
			r.blocks = append(r.blocks, boundWeights(&m.p.Blocks[b].coreParams, m.p.BlockFP8, gate).withGate(false))
		}
		return r, nil
	}
	devices := shardDevices(m.backend, n)
	w, err := cutShards(m.backend, m.dtype, m.p, m.spec, m.shardSrc, devices)
	m.shardSrc = nil
	if err != nil {
		return nil, err
	}
	if m.backend.NumDevices() < n {
		return newShardRunner(m.backend, w), nil
	}
	r, err := newSPMDRunner(m.backend, w, devices, xlaSPMD)
	if err != nil {
		w.close()
		return nil, err
	}
	return r, nil
}

// TensorParallel says how the joint blocks run: "" for a whole model, else the shard count and the path.
func (m *Model) TensorParallel() string {
	if m.blocks == nil {
		return ""
	}
	return m.blocks.describe()
}

// finish builds the executables once the parameters are bound (and, with Options.FP8, converted).
func (m *Model) finish() error {
	if m.p.BlockFP8 {
		for i := range m.p.Blocks {
			for _, w := range m.p.Blocks[i].linears() {
				if !w.FP8 {
					return fmt.Errorf("h3: %s was bound but not converted to FP8", w.Name)
				}
			}
		}
	}
	var err error
	if m.blocks, err = m.newBlockRunner(); err != nil {
		return err
	}
	m.stages = modelkit.NewStages(m.newStageExecs)
	if m.p.Cache != nil {
		c, err := m.cacheFromCheckpoint()
		if err != nil {
			return err
		}
		m.ckCache = c
	}
	return nil
}

// convertFP8OnBind makes the six core linears of every joint block turn into FP8 weights on the backend
// as each lands (weights.Param.AfterBind), so that beside the converted model only one dense matrix is
// ever alive: loading FP8 from a dense checkpoint peaks near the FP8 model's memory, not the dense
// one's. done frees the converter once the bind is over. Without Options.FP8 it does nothing.
func (m *Model) convertFP8OnBind() (done func(), err error) {
	if !m.p.BlockFP8 {
		return func() {}, nil
	}
	if m.opts.Shards > 1 {
		return nil, fmt.Errorf("h3: Options.FP8 with Options.Shards = %d is not supported: split the dense model, or run FP8 on one device", m.opts.Shards)
	}
	c, err := quant.NewFP8Converter(m.backend)
	if err != nil {
		return nil, err
	}
	for i := range m.p.Blocks {
		for _, w := range m.p.Blocks[i].linears() {
			w.W.AfterBind = func(*weights.Param) error {
				if err := w.ToFP8(m.p.set, c); err != nil {
					return fmt.Errorf("h3: %w", err)
				}
				return nil
			}
		}
	}
	return c.Close, nil
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
