// Package wan is the Wan video diffusion transformer (Wan2.1-T2V 1.3B/14B, each Wan2.2-A14B expert,
// Wan2.2-TI2V-5B, and their FastWan students), ported from FastVideo's WanTransformer3DModel to GoMLX
// graphs.
//
// One forward predicts the flow-matching velocity of one latent [C, T, H, W] at one timestep (or one
// timestep per token, Wan2.2 TI2V with an image), conditioned on text embeddings [S, text_dim]. The
// model runs as a few small executables and one block executable compiled once and looped from Go over
// the layers, with the weights passed as explicit inputs:
//
//	time     sinusoid (host) -> FP32 time MLP -> temb; time_proj(SiLU(temb)) -> [nT, 6, D]
//	text     text_embedder Linear-GELU(tanh)-Linear                     (once per prompt: TextState)
//	input    FP32 patch embedding (Conv3d as a matmul) -> [L, D]
//	block ×N 6-way modulation, self-attention (across-heads QK RMSNorm, 3-axis RoPE), cross-attention
//	         (norm2 LayerNorm), GELU-tanh FFN
//	output   norm_out modulation (scale_shift_table + temb) -> FP32 proj_out -> unpatchify
//
// Public methods return errors; GoMLX panics are recovered at this boundary.
//
// A generation uses it as:
//
//	m, err := wan.Load(backend, "snapshot/transformer", wan.Options{DType: dtypes.BFloat16})
//	text, err := m.PrepareText(promptEmbeds)   // [512, 4096], once per prompt
//	for each step {
//	    v, err := m.Forward(wan.ForwardInputs{Latent: x, Frames: t, Height: h, Width: w,
//	        Timesteps: []float32{ts}, TextState: text})
//	    // v: velocity [C, T, H, W]; the scheduler updates x
//	}
package wan

import (
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/hostmath"
	"fastvideo/internal/nn"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Options configure a Model.
type Options struct {
	// DType is the compute dtype: Float32 (default; exact, the CPU choice) or BFloat16 (the GPU choice).
	// The patch embedding, time embedder, proj_out, norm weights and scale_shift_tables stay float32.
	DType dtypes.DType
	// Attention selects the attention path (see package attention); the zero value is automatic.
	Attention attention.Options
}

// Model is a loaded Wan transformer. It is not safe for concurrent Forward calls.
type Model struct {
	cfg      Config
	backend  compute.Backend
	dtype    dtypes.DType
	p        *params
	spec     blockSpec
	closeSrc func() error

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

// Load opens a released transformer/ folder (config.json plus sharded or single safetensors, any float
// storage dtype) and binds its weights on backend.
func Load(backend compute.Backend, dir string, opts Options) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("wan: opening the transformer weights: %w", err)
	}
	m, err := FromSource(backend, cfg, ck, opts)
	if err != nil {
		ck.Close()
		return nil, err
	}
	// Weights were copied (or uploaded) by Bind, except same-dtype host tensors on the Go backend which may
	// alias the mapping: keep the checkpoint open for the model's lifetime.
	m.closeSrc = ck.Close
	return m, nil
}

// FromSource binds the weights of src (released diffusers names) for cfg.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (m *Model, err error) {
	defer graphexec.Recover(&err, "wan: building the model")
	m, err = newModel(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := weights.Bind(src, m.p.set, weights.Options{DType: m.dtype, Backend: backend}); err != nil {
		return nil, fmt.Errorf("wan: binding the transformer weights: %w", err)
	}
	if err := m.zeroMissingBiases(); err != nil {
		m.p.set.Release()
		return nil, err
	}
	m.finish()
	return m, nil
}

// newModel validates the configuration and options and declares the parameter table (nothing bound).
func newModel(backend compute.Backend, cfg Config, opts Options) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if backend == nil {
		return nil, fmt.Errorf("wan: no backend")
	}
	dt, err := graphexec.ComputeDType(opts.DType)
	if err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	if _, err := attention.Resolve(backend, dt, cfg.AttentionHeadDim, opts.Attention); err != nil {
		return nil, err
	}
	return &Model{
		cfg: cfg, backend: backend, dtype: dt, p: declareParams(cfg),
		spec: blockSpec{
			Heads: cfg.NumAttentionHeads, HeadDim: cfg.AttentionHeadDim, FFN: cfg.FFNDim, Width: cfg.HiddenSize(),
			Eps: cfg.Eps, Attention: opts.Attention,
		},
	}, nil
}

// zeroMissingBiases binds every bias the checkpoint lacks to zeros on the backend.
func (m *Model) zeroMissingBiases() error {
	for _, b := range m.p.optionalBiases {
		if b.T != nil {
			continue
		}
		dt := b.Storage
		if dt == dtypes.InvalidDType {
			dt = m.dtype
		}
		t := tensors.FromShape(shapes.Make(dt, b.Shape...))
		if err := t.ToDevice(m.backend, 0); err != nil {
			return fmt.Errorf("wan: uploading the zero bias %s: %w", b.Name, err)
		}
		b.T = t
	}
	return nil
}

// finish builds the executables once the parameters are bound.
func (m *Model) finish() { m.plain = m.newStageExecs(false) }

// Close frees the weights and executables.
func (m *Model) Close() error {
	if m == nil || m.p == nil {
		return nil
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

// stageExecs are the executables of one forward; the traced set also returns intermediates.
type stageExecs struct {
	time, text, input, block *Exec
	trace                    bool
	// output executables by token grid: unpatchify needs (T', H', W'), which the row tensors do not carry.
	output map[[3]int]*Exec
}

func (s *stageExecs) finalize() {
	graphexec.FinalizeExecs(s.time, s.text, s.input, s.block)
	for _, e := range s.output {
		e.Finalize()
	}
}

func (m *Model) newStageExecs(trace bool) *stageExecs {
	cfg, spec, dt := m.cfg, m.spec, m.dtype
	d := cfg.HiddenSize()
	return &stageExecs{
		trace:  trace,
		output: map[[3]int]*Exec{},
		// proj [nT, freq] f32, time_embedder w1, b1, w2, b2 (f32), time_proj w, b
		// -> temb [nT, D] f32, tproj [nT, 6, D] f32
		time: graphexec.MustExec(m.backend, "wan.time", func(in []*Node) []*Node {
			temb := nn.Linear(nn.SiLU(nn.Linear(in[0], in[1], in[2])), in[3], in[4])
			tproj := nn.F32(nn.Linear(ConvertDType(nn.SiLU(temb), in[5].DType()), in[5], in[6]))
			return []*Node{temb, Reshape(tproj, tproj.Shape().Dim(0), 6, d)}
		}),
		// text [S, text_dim] f32, linear_1 w/b, linear_2 w/b -> [S, D] compute dtype
		text: graphexec.MustExec(m.backend, "wan.text_embedder", func(in []*Node) []*Node {
			h := nn.GeluTanh(nn.Linear(ConvertDType(in[0], in[1].DType()), in[1], in[2]))
			return []*Node{ConvertDType(nn.Linear(h, in[3], in[4]), dt)}
		}),
		// latent [C, T, H, W] f32, patch w, b (f32) -> x [L, D] compute dtype (+ f32 rows when traced)
		input: graphexec.MustExec(m.backend, "wan.patch_embedding", func(in []*Node) []*Node {
			e := patchEmbed(in[0], in[1], in[2], cfg.PatchSize)
			if trace {
				return []*Node{ConvertDType(e, dt), e}
			}
			return []*Node{ConvertDType(e, dt)}
		}),
		// x [L, D], text [S, D], tproj [nT, 6, D] f32, [tIdx [L] int32,] cos, sin [L, Dh/2] f32, block weights
		block: graphexec.MustExec(m.backend, "wan.block", func(in []*Node) []*Node {
			var tIdx *Node
			rest := in[3:]
			if len(in) == 6+blockWeightCount {
				tIdx, rest = in[3], in[4:]
			}
			return []*Node{spec.block(in[0], in[1], in[2], tIdx, rest[0], rest[1], blockFromSlice(rest[2:]))}
		}),
	}
}

// outputExec returns the head for token grid nt×nh×nw: x [L, D], temb [nT, D] f32, head table [1, 2, D]
// f32, proj_out w, b (f32) [, tIdx [L] int32] -> sample [Cout, T, H, W] f32 (+ norm_out rows when traced).
func (m *Model) outputExec(s *stageExecs, nt, nh, nw int) *Exec {
	grid := [3]int{nt, nh, nw}
	if e := s.output[grid]; e != nil {
		return e
	}
	cfg, trace := m.cfg, s.trace
	e := graphexec.MustExec(m.backend, "wan.output", func(in []*Node) []*Node {
		x, temb, table := in[0], in[1], in[2]
		head := Add(nn.F32(table), ExpandAxes(temb, 1)) // [nT, 2, D]
		if len(in) > 5 {
			head = Gather(head, ExpandAxes(in[5], -1))
		}
		shift := Squeeze(Slice(head, AxisRange(), AxisElem(0), AxisRange()), 1)
		scale := Squeeze(Slice(head, AxisRange(), AxisElem(1), AxisRange()), 1)
		y := nn.Modulate(nn.LayerNorm(x, nil, nil, cfg.Eps), shift, scale)
		out := unpatchify(nn.Linear(y, in[3], in[4]), nt, nh, nw, cfg.PatchSize)
		if trace {
			return []*Node{out, y}
		}
		return []*Node{out}
	})
	s.output[grid] = e
	return e
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
func (m *Model) emit(name string, t *tensors.Tensor) error { return m.trace.Emit("wan", name, t) }

// ropeCache keeps the device RoPE tables of the last token grid: every step of a generation uses the
// same grid.
type ropeCache struct {
	grid     [3]int
	cos, sin *tensors.Tensor
}

func (m *Model) ropeFor(t, h, w int) (cos, sin *tensors.Tensor, err error) {
	grid := [3]int{t, h, w}
	if c := m.rope; c != nil && c.grid == grid {
		return c.cos, c.sin, nil
	}
	m.dropRope()
	l, half := t*h*w, m.cfg.AttentionHeadDim/2
	cosH, sinH := RopeTables(m.cfg, t, h, w)
	cos, sin = tensors.FromFlatDataAndDimensions(cosH, l, half), tensors.FromFlatDataAndDimensions(sinH, l, half)
	if err := graphexec.Upload(m.backend, cos, sin); err != nil {
		return nil, nil, fmt.Errorf("wan: RoPE tables: %w", err)
	}
	m.rope = &ropeCache{grid: grid, cos: cos, sin: sin}
	return cos, sin, nil
}

func (m *Model) dropRope() {
	if m.rope != nil {
		graphexec.Finalize(m.rope.cos, m.rope.sin)
		m.rope = nil
	}
}

// TextState is a prompt passed through the text embedder: timestep-free, so computed once per
// generation and reused by every step (and by both CFG branches if any). Close frees it.
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

// PrepareText runs the text embedder on prompt embeddings [S, text_dim] (row-major; Wan pipelines pass
// the UMT5 output zero-padded to 512 rows, and no attention mask is used).
func (m *Model) PrepareText(text []float32) (ts *TextState, err error) {
	defer graphexec.Recover(&err, "wan: text embedder")
	if m.p == nil {
		return nil, fmt.Errorf("wan: model is closed")
	}
	td := m.cfg.TextDim
	if len(text) == 0 || len(text)%td != 0 {
		return nil, fmt.Errorf("wan: text embeddings have %d values, want S × text_dim (%d) with S >= 1", len(text), td)
	}
	s := len(text) / td
	p := m.p
	out, err := graphexec.Call(m.execs().text, tensors.FromFlatDataAndDimensions(text, s, td),
		p.Text1.W.T, p.Text1.B.T, p.Text2.W.T, p.Text2.B.T)
	if err != nil {
		return nil, err
	}
	if err := m.emit("text_embedded", out[0]); err != nil {
		graphexec.Finalize(out...)
		return nil, err
	}
	return &TextState{rows: s, x: out[0]}, nil
}

// ForwardInputs is one sample (batch 1), as host slices in row-major order.
type ForwardInputs struct {
	// Latent [in_channels, Frames, Height, Width]: the noisy latent (channel-first, no batch axis).
	Latent []float32
	// Frames, Height, Width are the latent grid; each must be a multiple of the config's patch_size.
	Frames, Height, Width int
	// Timesteps are raw timesteps (e.g. 1000, 757, 522 for FastWan; the scheduler's values for UniPC):
	// one value for the whole sample, or one per token (T'·H'·W' values, tokens t-major) for Wan2.2 TI2V
	// image conditioning, where the first latent frame's tokens get 0.
	Timesteps []float32
	// Text [S, text_dim] prompt embeddings; ignored when TextState is set.
	Text []float32
	// TextState is the prompt from PrepareText (reuse it across steps).
	TextState *TextState
}

// Forward runs the transformer and returns the predicted velocity [out_channels, Frames, Height, Width]
// in float32.
func (m *Model) Forward(in ForwardInputs) (out []float32, err error) {
	defer graphexec.Recover(&err, "wan: forward")
	if m.p == nil {
		return nil, fmt.Errorf("wan: model is closed")
	}
	cfg := m.cfg
	nt, nh, nw, err := cfg.Tokens(in.Frames, in.Height, in.Width)
	if err != nil {
		return nil, err
	}
	l := nt * nh * nw
	if want := cfg.InChannels * in.Frames * in.Height * in.Width; len(in.Latent) != want {
		return nil, fmt.Errorf("wan: ForwardInputs.Latent has %d values, want in_channels %d × %d × %d × %d = %d",
			len(in.Latent), cfg.InChannels, in.Frames, in.Height, in.Width, want)
	}
	if len(in.Timesteps) != 1 && len(in.Timesteps) != l {
		return nil, fmt.Errorf("wan: ForwardInputs.Timesteps has %d values, want 1 (per sample) or %d (one per token of the %d×%d×%d grid)",
			len(in.Timesteps), l, nt, nh, nw)
	}
	for i, t := range in.Timesteps {
		if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
			return nil, fmt.Errorf("wan: ForwardInputs.Timesteps[%d] = %v is not finite", i, t)
		}
	}
	if in.TextState != nil && in.TextState.x == nil {
		return nil, fmt.Errorf("wan: ForwardInputs.TextState was closed")
	}
	ex := m.execs()
	p := m.p

	// Per-token timesteps take only a few values (0 and t for TI2V): embed the unique ones and let each
	// token select its row.
	uniq, idx := uniqueTimesteps(in.Timesteps)
	var devs []*tensors.Tensor
	defer func() { graphexec.Finalize(devs...) }()
	var tIdx *tensors.Tensor
	if len(uniq) > 1 {
		tIdx = tensors.FromFlatDataAndDimensions(idx, l)
		if err := graphexec.Upload(m.backend, tIdx); err != nil {
			return nil, fmt.Errorf("wan: per-token timestep indices: %w", err)
		}
		devs = append(devs, tIdx)
	}

	res, err := graphexec.Call(ex.time, tensors.FromFlatDataAndDimensions(hostmath.TimestepSinusoid(uniq, cfg.FreqDim), len(uniq), cfg.FreqDim),
		p.Time1.W.T, p.Time1.B.T, p.Time2.W.T, p.Time2.B.T, p.TimeProj.W.T, p.TimeProj.B.T)
	if err != nil {
		return nil, err
	}
	devs = append(devs, res...)
	temb, tproj := res[0], res[1]
	if m.trace != nil {
		if err := m.emitRows("temb", temb, idx, len(in.Timesteps)); err != nil {
			return nil, err
		}
		if err := m.emitRows("timestep_proj", tproj, idx, len(in.Timesteps)); err != nil {
			return nil, err
		}
	}

	text := in.TextState
	if text == nil {
		t, err := m.PrepareText(in.Text)
		if err != nil {
			return nil, err
		}
		defer t.Close()
		text = t
	}

	cos, sin, err := m.ropeFor(nt, nh, nw)
	if err != nil {
		return nil, err
	}

	res, err = graphexec.Call(ex.input, tensors.FromFlatDataAndDimensions(in.Latent, cfg.InChannels, in.Frames, in.Height, in.Width),
		p.PatchW.T, p.PatchB.T)
	if err != nil {
		return nil, err
	}
	x := res[0]
	if m.trace != nil {
		err := m.emit("patch_embedding", res[1])
		graphexec.Finalize(res[1])
		if err != nil {
			graphexec.Finalize(x)
			return nil, err
		}
	}

	for b := range p.Blocks {
		args := []any{x, text.x, tproj}
		if tIdx != nil {
			args = append(args, tIdx)
		}
		args = append(args, cos, sin)
		args = graphexec.Args(args, p.Blocks[b].tensors()...)
		res, err := graphexec.Call(ex.block, args...)
		graphexec.Finalize(x)
		if err != nil {
			return nil, err
		}
		x = res[0]
		if b == 0 {
			if err := m.emit("block0_out", x); err != nil {
				graphexec.Finalize(x)
				return nil, err
			}
		}
		if b == len(p.Blocks)-1 {
			if err := m.emit("block_last_out", x); err != nil {
				graphexec.Finalize(x)
				return nil, err
			}
		}
	}

	args := []any{x, temb, p.HeadTable.T, p.ProjOut.W.T, p.ProjOut.B.T}
	if tIdx != nil {
		args = append(args, tIdx)
	}
	res, err = graphexec.Call(m.outputExec(ex, nt, nh, nw), args...)
	graphexec.Finalize(x)
	if err != nil {
		return nil, err
	}
	defer graphexec.Finalize(res...)
	if m.trace != nil {
		if err := m.emit("norm_out", res[1]); err != nil {
			return nil, err
		}
	}
	return graphexec.HostF32(res[0])
}

// uniqueTimesteps returns the distinct timesteps in first-seen order and each input's index into them.
func uniqueTimesteps(ts []float32) ([]float32, []int32) {
	var uniq []float32
	pos := map[float32]int32{}
	idx := make([]int32, len(ts))
	for i, t := range ts {
		j, ok := pos[t]
		if !ok {
			j = int32(len(uniq))
			pos[t] = j
			uniq = append(uniq, t)
		}
		idx[i] = j
	}
	return uniq, idx
}

// emitRows traces a per-timestep tensor [nT, ...] expanded to one row per input timestep.
func (m *Model) emitRows(name string, t *tensors.Tensor, idx []int32, n int) error {
	if m.trace == nil {
		return nil
	}
	v, err := graphexec.HostF32(t)
	if err != nil {
		return fmt.Errorf("wan: trace %s: %w", name, err)
	}
	dims := t.Shape().Dimensions
	w := len(v) / dims[0]
	out := make([]float32, 0, n*w)
	for _, j := range idx {
		out = append(out, v[int(j)*w:int(j+1)*w]...)
	}
	m.trace(name, []int{n, w}, out)
	return nil
}
