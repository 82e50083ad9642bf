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
// dequantizes them in the graph (FASTVIDEO_DQ_GEMM selects the kernel by row count).
package h3

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/nn"
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
	// AdaLNManifest declares that the checkpoint carries a precomputed AdaLN cache for these timesteps
	// instead of the AdaLN projection weights. Load fills it from the folder's manifest when present.
	AdaLNManifest *AdaLNManifest
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

	plain, traced *stageExecs
	rope          *ropeCache

	// trace, when set (tests), receives named float32 copies of intermediates (names as the fixtures'
	// act.* tensors) and switches to executables that also return them.
	trace graphexec.Trace
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// DType returns the compute dtype.
func (m *Model) DType() dtypes.DType { return m.dtype }

// Load opens a released transformer/ folder (config.json plus sharded or single safetensors), or a
// converted MLX folder (mlx_h3_dit.json + mlx_h3_dit.safetensors, quantized or not, h3.md §10.3: the
// config is the manifest's), and binds its weights on backend. Quantized linears stay packed on the
// device and run through quant.Linear. A folder that carries an AdaLN cache (adaln_cache.json or
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
	if !quant.IsCheckpoint(dir) {
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
	ck, err := quant.Open(dir)
	if err != nil {
		return Config{}, nil, nil, fmt.Errorf("h3: opening the converted checkpoint %s: %w", dir, err)
	}
	where := filepath.Join(dir, quant.ManifestFile)
	cfg, err := ParseConfig(ck.Manifest.Config)
	if err != nil {
		err = fmt.Errorf("%w (the \"config\" entry of %s)", err, where)
	} else if n := ck.Manifest.NumBlocks; n != 0 && n != cfg.NumLayers {
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
	m, err = newModel(backend, cfg, opts, schemesOf(src))
	if err != nil {
		return nil, err
	}
	if err := weights.Bind(src, m.p.set, weights.Options{DType: m.dtype, Backend: backend}); err != nil {
		return nil, fmt.Errorf("h3: binding the transformer weights: %w", err)
	}
	if err := m.finish(); err != nil {
		m.p.set.Release()
		return nil, err
	}
	return m, nil
}

// newModel validates the configuration and options and declares the parameter table (nothing bound);
// schemes says which core linears are quantized (nil: none).
func newModel(backend compute.Backend, cfg Config, opts Options, schemes schemeFunc) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if backend == nil {
		return nil, fmt.Errorf("h3: no backend")
	}
	dt, err := graphexec.ComputeDType(opts.DType)
	if err != nil {
		return nil, fmt.Errorf("h3: %w", err)
	}
	if _, err := attention.Resolve(backend, dt, cfg.AttentionHeadDim, opts.Attention); err != nil {
		return nil, err
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
	return &Model{
		cfg: cfg, backend: backend, dtype: dt, p: p,
		spec: blockSpec{
			Heads: cfg.NumAttentionHeads, HeadDim: cfg.AttentionHeadDim, RotaryDim: cfg.RotaryDim(), FFN: cfg.FFNDim,
			NormEps: cfg.NormEps, QKNormEps: cfg.QKNormEps, Attention: opts.Attention,
		},
	}, nil
}

// finish builds the executables once the parameters are bound.
func (m *Model) finish() error {
	m.plain = m.newStageExecs(false)
	if m.p.Cache != nil {
		c, err := m.cacheFromCheckpoint()
		if err != nil {
			return err
		}
		m.ckCache = c
	}
	return nil
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
	m.dropRope()
	m.p.set.Release()
	for _, s := range []*stageExecs{m.plain, m.traced} {
		if s != nil {
			s.finalize()
		}
	}
	m.p = nil
	if m.closeSrc != nil {
		return m.closeSrc()
	}
	return nil
}

// WeightMemory is the memory of a model's bound weights, in bytes (tensor sizes, not allocator overhead).
type WeightMemory struct {
	Total int64
	// QuantizedLinears are the packed words, scales and biases of the quantized core linears;
	// DenseCoreLinears the core linears (Q, K, V, Out, FFN in/out of every block) that are dense.
	QuantizedLinears, DenseCoreLinears int64
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
	for i := range m.p.Blocks {
		wm.AdaLN += size(m.p.Blocks[i].AdaLN.W, m.p.Blocks[i].AdaLN.B)
	}
	wm.AdaLN += size(m.p.NormOut.W, m.p.NormOut.B, m.p.AdaLNBasis)
	for _, c := range m.p.cores() {
		for _, w := range c.linears() {
			if w.Quantized() {
				wm.QuantizedLinears += size(w.W, w.Scales, w.Biases)
			} else {
				wm.DenseCoreLinears += size(w.W)
			}
		}
	}
	return wm
}

// stageExecs are the executables of one forward; the traced set also returns intermediates.
type stageExecs struct {
	time, adaln, normOut, text, refiner, finalNorm, input, block, output *Exec
}

func (s *stageExecs) finalize() {
	graphexec.FinalizeExecs(s.time, s.adaln, s.normOut, s.text, s.refiner, s.finalNorm, s.input, s.block, s.output)
}

func (m *Model) newStageExecs(trace bool) *stageExecs {
	cfg, spec, dt := m.cfg, m.spec, m.dtype
	hidden := cfg.HiddenSize
	refinerLayout, blockLayout := m.p.RefinerLayout, m.p.BlockLayout
	return &stageExecs{
		// proj [nT, F] f32, w1, b1, w2, b2 [, basis] -> cond [nT, Din] (adaln dtype), temb [nT, Dt] f32 (traced)
		time: graphexec.MustExec(m.backend, "h3.time", func(in []*Node) []*Node {
			temb := timeEmbedding(in[0], in[1], in[2], in[3], in[4])
			var basis *Node
			if len(in) > 5 {
				basis = in[5]
			}
			cond := adaLNInput(temb, basis, dt)
			if trace {
				return []*Node{cond, temb}
			}
			return []*Node{cond}
		}),
		// cond, w, b -> [nT·3, 6, D] in the compute dtype
		adaln: graphexec.MustExec(m.backend, "h3.adaln", func(in []*Node) []*Node {
			return []*Node{ConvertDType(modulationTable(in[0], in[1], in[2], hidden), dt)}
		}),
		normOut: graphexec.MustExec(m.backend, "h3.norm_out_table", func(in []*Node) []*Node {
			return []*Node{ConvertDType(normOutTable(in[0], in[1], in[2], hidden), dt)}
		}),
		// text [S, text_dim] f32, w, b -> [S, D]
		text: graphexec.MustExec(m.backend, "h3.context_embedder", func(in []*Node) []*Node {
			return []*Node{nn.Linear(ConvertDType(in[0], in[1].DType()), in[1], in[2])}
		}),
		refiner: graphexec.MustExec(m.backend, "h3.refiner_block", func(in []*Node) []*Node {
			return []*Node{spec.refinerBlock(in[0], coreFromSlice(in[1:], refinerLayout))}
		}),
		finalNorm: graphexec.MustExec(m.backend, "h3.refiner_final_norm", func(in []*Node) []*Node {
			return []*Node{nn.RMSNorm(in[0], in[1], cfg.FinalNormEps)}
		}),
		// video [Nv, Cp] f32, audio [Na, Ca] f32, text [S, D], perm [L] int32, proj_in w/b, audio_proj_in w/b
		input: graphexec.MustExec(m.backend, "h3.input", func(in []*Node) []*Node {
			ve := nn.Linear(in[0], in[4], in[5])
			ae := nn.Linear(in[1], in[6], in[7])
			text := in[2]
			all := Concatenate([]*Node{text, ConvertDType(ve, text.DType()), ConvertDType(ae, text.DType())}, 0)
			packed := Gather(all, ExpandAxes(in[3], -1))
			if trace {
				return []*Node{packed, ve, ae}
			}
			return []*Node{packed}
		}),
		// x [L, D], mod [R, 6, D], rowIdx [L] int32, cos, sin [L, rot] f32, block weights (coreParams.tensors)
		block: graphexec.MustExec(m.backend, "h3.joint_block", func(in []*Node) []*Node {
			out, attnOut, ffOut := spec.jointBlock(in[0], in[1], in[2], in[3], in[4], coreFromSlice(in[5:], blockLayout))
			if trace {
				return []*Node{out, attnOut, ffOut}
			}
			return []*Node{out}
		}),
		// x [L, D], normOut [R, 2, D], tIdx [L] int32, norm weight, video idx, audio idx, proj_out w/b, audio w/b
		output: graphexec.MustExec(m.backend, "h3.output", func(in []*Node) []*Node {
			x, tab := in[0], Gather(ConvertDType(in[1], in[0].DType()), ExpandAxes(in[2], -1))
			shift := Squeeze(Slice(tab, AxisRange(), AxisElem(0), AxisRange()), 1)
			scale := Squeeze(Slice(tab, AxisRange(), AxisElem(1), AxisRange()), 1)
			y := ConvertDType(nn.Modulate(nn.RMSNorm(x, in[3], cfg.FinalNormEps), shift, scale), dtypes.Float32)
			video := nn.Linear(Gather(y, ExpandAxes(in[4], -1)), in[6], in[7])
			audio := nn.Linear(Gather(y, ExpandAxes(in[5], -1)), in[8], in[9])
			if trace {
				return []*Node{video, audio, y}
			}
			return []*Node{video, audio}
		}),
	}
}

func (m *Model) execs() *stageExecs {
	if m.trace == nil {
		return m.plain
	}
	if m.traced == nil {
		m.traced = m.newStageExecs(true)
	}
	return m.traced
}

// emit hands an intermediate to the trace hook (tests) as float32.
func (m *Model) emit(name string, t *tensors.Tensor) error { return m.trace.Emit("h3", name, t) }

// ropeCache keeps the device RoPE tables of the last layout: the positions are the same for every step
// of a generation, and comparing them is far cheaper than recomputing 2·L·3F cos/sin values.
type ropeCache struct {
	pos      []float64
	cos, sin *tensors.Tensor
}

func (m *Model) ropeFor(pos []float64) (cos, sin *tensors.Tensor, err error) {
	if c := m.rope; c != nil && slices.Equal(c.pos, pos) {
		return c.cos, c.sin, nil
	}
	m.dropRope()
	l, rot := len(pos)/3, m.cfg.RotaryDim()
	cosH, sinH := RopeTables(pos, m.cfg.RopeFreqDim, m.cfg.RopeTheta)
	cos, sin = tensors.FromFlatDataAndDimensions(cosH, l, rot), tensors.FromFlatDataAndDimensions(sinH, l, rot)
	if err := graphexec.Upload(m.backend, cos, sin); err != nil {
		return nil, nil, fmt.Errorf("h3: RoPE tables: %w", err)
	}
	m.rope = &ropeCache{pos: slices.Clone(pos), cos: cos, sin: sin}
	return cos, sin, nil
}

func (m *Model) dropRope() {
	if m.rope != nil {
		graphexec.Finalize(m.rope.cos, m.rope.sin)
		m.rope = nil
	}
}

// TextState is a prompt refined by context_embedder and the token refiner: timestep-free, so computed
// once per generation and reused by every step (and by both CFG branches if any). Close frees it.
type TextState struct {
	rows int
	x    *tensors.Tensor // [S, D] compute dtype
}

// Rows is the number of text tokens.
func (t *TextState) Rows() int { return t.rows }

// Close frees the device tensor.
func (t *TextState) Close() {
	if t != nil && t.x != nil {
		t.x.FinalizeAll()
		t.x = nil
	}
}

// PrepareText runs context_embedder and the token refiner on text features [S, text_dim] (row-major).
func (m *Model) PrepareText(text []float32) (ts *TextState, err error) {
	defer graphexec.Recover(&err, "h3: text refiner")
	if m.p == nil {
		return nil, fmt.Errorf("h3: model is closed")
	}
	td := m.cfg.TextDim
	if len(text) == 0 || len(text)%td != 0 {
		return nil, fmt.Errorf("h3: text features have %d values, want S × text_dim (%d) with S >= 1", len(text), td)
	}
	s := len(text) / td
	ex := m.execs()
	out, err := graphexec.Call(ex.text, tensors.FromFlatDataAndDimensions(text, s, td), m.p.ContextEmbedder.W.T, m.p.ContextEmbedder.B.T)
	if err != nil {
		return nil, err
	}
	x := out[0]
	if err := m.emit("context_embedder", x); err != nil {
		return nil, err
	}
	for j := range m.p.Refiner {
		args := graphexec.Args([]any{x}, m.p.Refiner[j].tensors()...)
		out, err := graphexec.Call(ex.refiner, args...)
		graphexec.Finalize(x)
		if err != nil {
			return nil, err
		}
		x = out[0]
		if j == 0 {
			if err := m.emit("refiner_block0", x); err != nil {
				return nil, err
			}
		}
	}
	out, err = graphexec.Call(ex.finalNorm, x, m.p.RefinerFinalNorm.T)
	graphexec.Finalize(x)
	if err != nil {
		return nil, err
	}
	if err := m.emit("refined_text", out[0]); err != nil {
		return nil, err
	}
	return &TextState{rows: s, x: out[0]}, nil
}

// ForwardInputs is one packed document (batch 1), as host slices in row-major order.
type ForwardInputs struct {
	// VideoRows [Nv, in_channels·pt·ph·pw]: patchified video latents (channel-major patch features), the
	// rows listed by VideoIndices in that order.
	VideoRows []float32
	// AudioRows [Na, audio_in_channels], the rows listed by AudioIndices.
	AudioRows []float32
	// Text [S, text_dim] conditioner features; ignored when TextState is set.
	Text []float32
	// TextState is the prompt from PrepareText (reuse it across steps).
	TextState *TextState
	// Timesteps are the unique row timesteps of this step (t = 1 − sigma, in [0, 1]).
	Timesteps []float32
	// TimestepIndices [L] maps each packed row to Timesteps.
	TimestepIndices []int32
	// TokenTags [L]: 0 video, 1 text, 2 audio (selects the AdaLN modality).
	TokenTags []int32
	// PositionIDs [L, 3] RoPE coordinates (t, h, w), float64 as the packing code builds them.
	PositionIDs []float64
	// VideoIndices, AudioIndices, TextIndices partition [0, L).
	VideoIndices, AudioIndices, TextIndices []int32
	// AdaLN, when set, supplies the modulation tables (PrepareAdaLN); every timestep must be in its ladder.
	// Without it the tables are computed from the AdaLN projections (or taken from the checkpoint cache).
	AdaLN *AdaLNCache
}

// ForwardOutputs are the predicted velocities, float32.
type ForwardOutputs struct {
	Video []float32 // [Nv, in_channels·pt·ph·pw]
	Audio []float32 // [Na, audio_in_channels]
}

// layout is the validated geometry of one forward.
type layout struct {
	l, nv, na, s int
	perm         []int32 // packed row -> row of concat(text, video, audio)
}

func (m *Model) checkInputs(in *ForwardInputs) (*layout, error) {
	l := len(in.TokenTags)
	if l == 0 {
		return nil, fmt.Errorf("h3: ForwardInputs.TokenTags is empty; one tag per packed row is required")
	}
	if len(in.TimestepIndices) != l {
		return nil, fmt.Errorf("h3: ForwardInputs.TimestepIndices has %d entries, TokenTags %d: both need one per packed row", len(in.TimestepIndices), l)
	}
	if len(in.PositionIDs) != 3*l {
		return nil, fmt.Errorf("h3: ForwardInputs.PositionIDs has %d values, want 3 × %d rows", len(in.PositionIDs), l)
	}
	lay := &layout{l: l, nv: len(in.VideoIndices), na: len(in.AudioIndices), s: len(in.TextIndices)}
	if lay.nv+lay.na+lay.s != l {
		return nil, fmt.Errorf("h3: index lists cover %d+%d+%d rows (video+audio+text), the sequence has %d", lay.nv, lay.na, lay.s, l)
	}
	if len(in.VideoRows) != lay.nv*m.cfg.VideoPatchDim() {
		return nil, fmt.Errorf("h3: ForwardInputs.VideoRows has %d values, want %d rows × %d", len(in.VideoRows), lay.nv, m.cfg.VideoPatchDim())
	}
	if len(in.AudioRows) != lay.na*m.cfg.AudioInChannels {
		return nil, fmt.Errorf("h3: ForwardInputs.AudioRows has %d values, want %d rows × %d", len(in.AudioRows), lay.na, m.cfg.AudioInChannels)
	}
	if in.TextState != nil {
		if in.TextState.x == nil {
			return nil, fmt.Errorf("h3: ForwardInputs.TextState was closed")
		}
		if in.TextState.rows != lay.s {
			return nil, fmt.Errorf("h3: TextState has %d rows, TextIndices %d", in.TextState.rows, lay.s)
		}
	} else if len(in.Text) != lay.s*m.cfg.TextDim {
		return nil, fmt.Errorf("h3: ForwardInputs.Text has %d values, want %d rows × text_dim %d", len(in.Text), lay.s, m.cfg.TextDim)
	}
	if lay.s == 0 || lay.nv == 0 || lay.na == 0 {
		return nil, fmt.Errorf("h3: the document has %d text, %d video and %d audio rows; H3 needs at least one of each", lay.s, lay.nv, lay.na)
	}
	if len(in.Timesteps) == 0 {
		return nil, fmt.Errorf("h3: ForwardInputs.Timesteps is empty")
	}
	for i, t := range in.Timesteps {
		if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
			return nil, fmt.Errorf("h3: ForwardInputs.Timesteps[%d] = %v is not finite", i, t)
		}
	}
	for r := 0; r < l; r++ {
		if ti := in.TimestepIndices[r]; ti < 0 || int(ti) >= len(in.Timesteps) {
			return nil, fmt.Errorf("h3: TimestepIndices[%d] = %d, want 0..%d", r, ti, len(in.Timesteps)-1)
		}
		if tag := in.TokenTags[r]; tag < 0 || tag >= Modalities {
			return nil, fmt.Errorf("h3: TokenTags[%d] = %d, want 0 (video), 1 (text) or 2 (audio)", r, tag)
		}
	}
	lay.perm = make([]int32, l)
	seen := make([]bool, l)
	offset := 0
	for _, group := range []struct {
		name string
		idx  []int32
	}{{"TextIndices", in.TextIndices}, {"VideoIndices", in.VideoIndices}, {"AudioIndices", in.AudioIndices}} {
		for j, r := range group.idx {
			if r < 0 || int(r) >= l {
				return nil, fmt.Errorf("h3: %s[%d] = %d is outside [0, %d)", group.name, j, r, l)
			}
			if seen[r] {
				return nil, fmt.Errorf("h3: packed row %d is listed twice (%s[%d]); the index lists must partition [0, %d)", r, group.name, j, l)
			}
			seen[r] = true
			lay.perm[r] = int32(offset + j)
		}
		offset += len(group.idx)
	}
	return lay, nil
}

// Forward runs the transformer on one packed document.
func (m *Model) Forward(in ForwardInputs) (out ForwardOutputs, err error) {
	defer graphexec.Recover(&err, "h3: forward")
	if m.p == nil {
		return out, fmt.Errorf("h3: model is closed")
	}
	lay, err := m.checkInputs(&in)
	if err != nil {
		return out, err
	}
	ex := m.execs()

	// AdaLN tables: the caller's cache, the checkpoint's cache, or computed now for this step's timesteps.
	cache := in.AdaLN
	if cache == nil {
		cache = m.ckCache
	}
	var pos []int
	if cache == nil {
		c, err := m.buildAdaLN(in.Timesteps)
		if err != nil {
			return out, err
		}
		defer c.Close()
		cache = c
		pos = make([]int, len(in.Timesteps))
		for i := range pos {
			pos[i] = i
		}
	} else if pos, err = cache.positions(in.Timesteps); err != nil {
		return out, err
	}
	rowIdx := make([]int32, lay.l)
	tIdx := make([]int32, lay.l)
	for r := range rowIdx {
		tIdx[r] = int32(pos[in.TimestepIndices[r]])
		rowIdx[r] = tIdx[r]*Modalities + in.TokenTags[r]
	}

	text := in.TextState
	if text == nil {
		t, err := m.PrepareText(in.Text)
		if err != nil {
			return out, err
		}
		defer t.Close()
		text = t
	}

	cos, sin, err := m.ropeFor(in.PositionIDs)
	if err != nil {
		return out, err
	}
	rot := m.cfg.RotaryDim()
	// One device copy of the row indices serves every block.
	rowIdxT := tensors.FromFlatDataAndDimensions(rowIdx, lay.l)
	if err := graphexec.Upload(m.backend, rowIdxT); err != nil {
		return out, fmt.Errorf("h3: row indices: %w", err)
	}
	defer graphexec.Finalize(rowIdxT)
	if m.trace != nil {
		idx := make([]float32, lay.l)
		for r := range idx {
			idx[r] = float32(in.TimestepIndices[r]*Modalities + in.TokenTags[r])
		}
		m.trace("adaln_indices", []int{lay.l}, idx)
		cosH, sinH := RopeTables(in.PositionIDs, m.cfg.RopeFreqDim, m.cfg.RopeTheta)
		m.trace("rope_cos", []int{lay.l, rot}, cosH)
		m.trace("rope_sin", []int{lay.l, rot}, sinH)
	}

	p := m.p
	res, err := graphexec.Call(ex.input,
		tensors.FromFlatDataAndDimensions(in.VideoRows, lay.nv, m.cfg.VideoPatchDim()),
		tensors.FromFlatDataAndDimensions(in.AudioRows, lay.na, m.cfg.AudioInChannels),
		text.x, tensors.FromFlatDataAndDimensions(lay.perm, lay.l),
		p.ProjIn.W.T, p.ProjIn.B.T, p.AudioProjIn.W.T, p.AudioProjIn.B.T)
	if err != nil {
		return out, err
	}
	x := res[0]
	if m.trace != nil {
		for i, name := range []string{"packed_input", "video_proj_in", "audio_proj_in"} {
			if err := m.emit(name, res[i]); err != nil {
				return out, err
			}
		}
		graphexec.Finalize(res[1:]...)
	}

	for b := range p.Blocks {
		args := graphexec.Args([]any{x, cache.tables[b], rowIdxT, cos, sin}, p.Blocks[b].tensors()...)
		res, err := graphexec.Call(ex.block, args...)
		graphexec.Finalize(x)
		if err != nil {
			return out, err
		}
		x = res[0]
		if m.trace != nil {
			if b == 0 {
				for i, name := range []string{"block0_out", "block0_attn_out", "block0_ff_out"} {
					if err := m.emit(name, res[i]); err != nil {
						return out, err
					}
				}
			}
			if b == len(p.Blocks)-1 {
				if err := m.emit("block_last_out", x); err != nil {
					return out, err
				}
			}
			graphexec.Finalize(res[1:]...)
		}
	}

	vIdx := tensors.FromFlatDataAndDimensions(in.VideoIndices, lay.nv)
	aIdx := tensors.FromFlatDataAndDimensions(in.AudioIndices, lay.na)
	res, err = graphexec.Call(ex.output, x, cache.normOut, tensors.FromFlatDataAndDimensions(tIdx, lay.l), p.NormOutNorm.T,
		vIdx, aIdx, p.ProjOut.W.T, p.ProjOut.B.T, p.AudioProjOut.W.T, p.AudioProjOut.B.T)
	graphexec.Finalize(x)
	if err != nil {
		return out, err
	}
	defer graphexec.Finalize(res...)
	if m.trace != nil {
		if err := m.emit("norm_out", res[2]); err != nil {
			return out, err
		}
	}
	if out.Video, err = graphexec.HostF32(res[0]); err != nil {
		return out, err
	}
	if out.Audio, err = graphexec.HostF32(res[1]); err != nil {
		return out, err
	}
	return out, nil
}
