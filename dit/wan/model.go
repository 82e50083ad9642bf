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

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
)

// Options configure a Model.
type Options struct {
	// DType is the compute dtype: Float32 (default; exact, the CPU choice) or BFloat16 (the GPU choice).
	// The patch embedding, time embedder, proj_out, norm weights and scale_shift_tables stay float32.
	DType dtypes.DType
	// Attention selects the attention path (see package attention); the zero value is automatic.
	Attention attention.Options
	// OnBind runs on each weight as it lands on the device (loaded or drawn), before the model builds
	// anything from it; it may replace the tensor. Random weights take LoRA adapters through it
	// (familykit.LoRA.MergeOnBind); a checkpoint's merge as they are read.
	OnBind func(*weights.Param) error
}

// Model is a loaded Wan transformer. It is not safe for concurrent Forward calls.
type Model struct {
	cfg      Config
	backend  compute.Backend
	dtype    dtypes.DType
	p        *params
	spec     blockSpec
	closeSrc func() error
	// device is where the weights live and the forwards run (0 but for a Replica).
	device compute.DeviceNum
	// sharesWeights is set on a Replica on its original's device: it reads the original's weights, and
	// Close leaves them to the original.
	sharesWeights bool

	stages *modelkit.Stages[*stageExecs]
	rope   *modelkit.RopeCache[[3]int]
	// vsaExecs are the VSA block executables of the token grids met so far; windowExecs the windowed
	// ones of the windows met so far.
	vsaExecs    modelkit.ExecCache[vsaKey]
	windowExecs modelkit.ExecCache[windowKey]

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
	// Weights were copied (or uploaded) by Bind, except same-dtype host tensors on the Go backend which may
	// alias the mapping: keep the checkpoint open for the model's lifetime.
	return modelkit.OpenFolder(dir, "wan", ReadConfig, func(cfg Config, src weights.Source) (*Model, error) {
		return FromSource(backend, cfg, src, opts)
	}, func(m *Model, closeSrc func() error) { m.closeSrc = closeSrc })
}

// FromSource binds the weights of src (released diffusers names) for cfg.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (m *Model, err error) {
	defer graphexec.Recover(&err, "wan: building the model")
	return modelkit.Populate(func() (*Model, error) { return newModel(backend, cfg, opts) }, func(m *Model) error {
		return modelkit.BindSource("wan", src, m.p.set, m.dtype, backend, m.finishBound)
	})
}

// newModel validates the configuration and options and declares the parameter table (nothing bound).
func newModel(backend compute.Backend, cfg Config, opts Options) (*Model, error) {
	dt, err := modelkit.Prepare("wan", cfg, backend, opts.DType, modelkit.DiTDTypes)
	if err != nil {
		return nil, err
	}
	if _, err := attention.Resolve(backend, dt, cfg.AttentionHeadDim, opts.Attention); err != nil {
		return nil, err
	}
	if opts.Attention.Window != nil {
		// A window belongs to the self-attention of one forward (cross-attention stays dense).
		return nil, fmt.Errorf("wan: Options.Attention.Window is set; leave it nil and set ForwardInputs.Window for the forwards to window")
	}
	p := declareParams(cfg)
	p.set.AfterBindAll(opts.OnBind)
	return &Model{
		cfg: cfg, backend: backend, dtype: dt, p: p,
		vsaExecs: modelkit.ExecCache[vsaKey]{}, windowExecs: modelkit.ExecCache[windowKey]{},
		rope: modelkit.NewRopeCache(func(a, b [3]int) bool { return a == b }),
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
		if err := t.ToDevice(m.backend, m.device); err != nil {
			return fmt.Errorf("wan: uploading the zero bias %s: %w", b.Name, err)
		}
		b.T = t
	}
	return nil
}

// finish builds the executables once the parameters are bound.
func (m *Model) finish() error {
	m.stages = modelkit.NewStages(m.newStageExecs)
	return nil
}

// finishBound zeroes the biases a checkpoint lacks, then finishes.
func (m *Model) finishBound() error {
	if err := m.zeroMissingBiases(); err != nil {
		return err
	}
	return m.finish()
}

// Close frees the weights and executables.
func (m *Model) Close() error {
	if m == nil || m.p == nil {
		return nil
	}
	m.vsaExecs.Finalize()
	m.windowExecs.Finalize()
	set := m.p.set
	if m.sharesWeights {
		set = weights.NewSet("") // the original's to release
	}
	err := modelkit.Release(set, m.closeSrc, m.stages, m.rope)
	m.p = nil
	return err
}
