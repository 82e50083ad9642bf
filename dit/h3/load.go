package h3

import (
	"fmt"
	"path/filepath"
	"slices"

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
	"fastvideo/quant"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/tensors"
)

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
	if opts.Attention.Window != nil {
		return nil, fmt.Errorf("h3: Options.Attention.Window is set, but windowed attention is the Wan family's (dit/wan ForwardInputs.Window); leave it nil")
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
	p.set.AfterBindAll(opts.OnBind)
	return &Model{
		cfg: cfg, backend: backend, dtype: dt, p: p, rope: modelkit.NewRopeCache(slices.Equal[[]float64]),
		spec: blockSpec{
			Heads: cfg.NumAttentionHeads, HeadDim: cfg.AttentionHeadDim, RotaryDim: cfg.RotaryDim(), FFN: cfg.FFNDim,
			NormEps: cfg.NormEps, QKNormEps: cfg.QKNormEps, Attention: opts.Attention,
			Dispatch: opts.Dispatch, QKPass: opts.QKPass, NormPass: opts.NormPass,
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
			r.blocks = append(r.blocks, boundWeights(&m.p.Blocks[b].coreParams, m.p.BlockFP8, gate))
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
	m.stages = modelkit.NewStages(func(trace bool) *stageExecs {
		return newStageExecs(m.backend, m.cfg, m.spec, m.dtype, m.p.RefinerLayout, trace)
	})
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
			w.W.ThenAfterBind(func(*weights.Param) error { // after Options.OnBind: merged, then converted
				if err := w.ToFP8(m.p.set, c); err != nil {
					return fmt.Errorf("h3: %w", err)
				}
				return nil
			})
		}
	}
	return c.Close, nil
}
