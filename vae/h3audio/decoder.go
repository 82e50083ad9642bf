package h3audio

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
)

// Options select what Load / FromSource bind.
type Options struct {
	// Encoder also binds the waveform encoder (encoder.*, pre_block.*,
	// mean_proj.*, logs_proj.*) so that Encode works. Text-to-video-audio only
	// decodes; without it those tensors are skipped and never leave the file.
	Encoder bool
}

// Decoder runs the audio VAE on one backend. It is safe for concurrent use.
type Decoder struct {
	cfg     Config
	backend compute.Backend

	set   *weights.Set
	dec   []*weights.Param // decoder inputs, in graph-input order
	enc   []*weights.Param // encoder inputs (nil without Options.Encoder)
	guard modelkit.Guard

	execMu  sync.Mutex
	decExec *Exec
	encExec *Exec
}

// Load reads the release's audio_vae/ folder: config.json and the safetensors
// weights (a single file or a sharded index).
func Load(backend compute.Backend, dir string, opts Options) (*Decoder, error) {
	return modelkit.LoadFolder(dir, "h3audio", ReadConfig, func(cfg Config, src weights.Source) (*Decoder, error) {
		return FromSource(backend, cfg, src, opts)
	})
}

// FromSource binds the parameters of cfg from src (released tensor names:
// `dec_in_proj.weight`, `decoder.conv_pre.weight_g`, …). Weight-normed convs may
// come as the (weight_g, weight_v) pair or folded into a plain `weight`.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (d *Decoder, err error) {
	if src == nil {
		return nil, errors.New("h3audio: FromSource needs a weight source")
	}
	if _, err := modelkit.Prepare("h3audio", cfg, backend, dtypes.Float32, []dtypes.DType{dtypes.Float32}); err != nil {
		return nil, err
	}
	defer graphexec.Recover(&err, "h3audio: binding the audio VAE")
	set := weights.NewSet("")
	dec := declareDecoder(cfg, set, src)
	var enc []*weights.Param
	if opts.Encoder {
		enc = declareEncoder(cfg, set, src)
	} else {
		set.Ignore("encoder.", "pre_block.", "mean_proj.", "logs_proj.")
	}
	if err := modelkit.BindSource("h3audio", src, set, dtypes.Float32, backend, nil); err != nil {
		return nil, err
	}
	return &Decoder{cfg: cfg, backend: backend, set: set, dec: dec, enc: enc}, nil
}

// Config returns the architecture the decoder was built with.
func (d *Decoder) Config() Config { return d.cfg }

// Close frees the weights. Decode fails afterwards.
func (d *Decoder) Close() error {
	return d.guard.Close(func() error {
		d.execMu.Lock()
		graphexec.FinalizeExecs(d.decExec, d.encExec)
		d.decExec, d.encExec = nil, nil
		d.execMu.Unlock()
		d.set.Release()
		return nil
	})
}

// Decode turns normalized latents (as the DiT produces them) into waveforms.
// shape is [B, C, N] (B mono items: 2 for H3 stereo) or [C, N] (one item);
// C must be the config's latent_channels. The result holds one []float32 of
// hop·N samples in [-1, 1] per item, at Config.SamplingRate.
//
// The whole signal is decoded in one graph (the package doc says why no
// streaming). One graph is compiled per distinct latent shape.
func (d *Decoder) Decode(ctx context.Context, latents []float32, shape []int) ([][]float32, error) {
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	b, n, err := d.checkLatents(latents, shape)
	if err != nil {
		return nil, err
	}
	zt := tensors.FromFlatDataAndDimensions(latents, d.inputDims(b, n)...)
	defer zt.FinalizeAll()
	outs, err := d.runDecode(zt, nil)
	if err != nil {
		return nil, err
	}
	wave := outs[0]
	return splitItems(wave, b)
}

// DecodeRows decodes the DiT's packed audio rows: [2·N, C] with all N rows of
// channel 0 first, then channel 1 (FastVideo's unpack_audio_tokens order).
// It returns the stereo waveform as [2][]float32.
func (d *Decoder) DecodeRows(ctx context.Context, rows []float32, numFrames int) ([][]float32, error) {
	c := d.cfg.LatentChannels
	if numFrames <= 0 || len(rows) != 2*numFrames*c {
		return nil, fmt.Errorf("h3audio: DecodeRows got %d values for numFrames = %d; want 2·numFrames·latent_channels = %d",
			len(rows), numFrames, 2*numFrames*c)
	}
	lat := make([]float32, len(rows))
	for ch := range 2 {
		for t := range numFrames {
			for k := range c {
				lat[(ch*c+k)*numFrames+t] = rows[(ch*numFrames+t)*c+k]
			}
		}
	}
	return d.Decode(ctx, lat, d.rowsShape(numFrames))
}

func (d *Decoder) checkLatents(latents []float32, shape []int) (b, n int, err error) {
	if b, n, err = d.checkShape(shape); err != nil {
		return 0, 0, err
	}
	if c := d.cfg.LatentChannels; len(latents) != b*c*n {
		return 0, 0, fmt.Errorf("h3audio: %d latent values do not fill shape %v (%d values)", len(latents), shape, b*c*n)
	}
	return b, n, nil
}

// checkShape checks a latent shape [B, C, N] or [C, N] and returns B and N.
func (d *Decoder) checkShape(shape []int) (b, n int, err error) {
	switch len(shape) {
	case 2:
		b, n = 1, shape[1]
	case 3:
		b, n = shape[0], shape[2]
	default:
		return 0, 0, fmt.Errorf("h3audio: latent shape %v must be [B, C, N] or [C, N]", shape)
	}
	c := shape[len(shape)-2]
	if c != d.cfg.LatentChannels {
		return 0, 0, fmt.Errorf("h3audio: latent shape %v has %d channels; this audio VAE has latent_channels = %d", shape, c, d.cfg.LatentChannels)
	}
	if b <= 0 || n <= 0 {
		return 0, 0, fmt.Errorf("h3audio: latent shape %v must have positive dimensions", shape)
	}
	return b, n, nil
}

// inputDims is the decode graph's latent input [B, C, N] (float32), as Decode builds it and Prepare
// compiles it.
func (d *Decoder) inputDims(b, n int) []int { return []int{b, d.cfg.LatentChannels, n} }

// rowsShape is the latent shape DecodeRows decodes numFrames packed rows as: [2, C, numFrames].
func (d *Decoder) rowsShape(numFrames int) []int { return []int{2, d.cfg.LatentChannels, numFrames} }

// Prepare compiles the program that Decode of latents of shape ([B, C, N] or [C, N]) runs, without
// the latents and without running anything on the device, so that such a decode compiles nothing.
// A pipeline calls it on a goroutine while the DiT denoises (docs/architecture.md, "Decoder
// prewarm"); Close waits for it.
func (d *Decoder) Prepare(ctx context.Context, shape []int) (err error) {
	b, n, err := d.checkShape(shape)
	if err != nil {
		return err
	}
	ctx, unlock, err := d.guard.RLockContext(ctx, "h3audio: Prepare on a closed Decoder")
	if err != nil {
		return err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	exec, err := d.decodeExec()
	if err != nil {
		return fmt.Errorf("h3audio: compiling the decode of latents %v: %w", shape, err)
	}
	in := append([]shapes.Shape{shapes.Make(dtypes.Float32, d.inputDims(b, n)...)}, graphexec.ParamShapes(d.dec...)...)
	if _, err := graphexec.Compile(exec, in...); err != nil {
		return fmt.Errorf("h3audio: compiling the decode of latents %v: %w", shape, err)
	}
	return nil
}

// PrepareRows is Prepare for DecodeRows of numFrames packed rows.
func (d *Decoder) PrepareRows(ctx context.Context, numFrames int) error {
	if numFrames <= 0 {
		return fmt.Errorf("h3audio: PrepareRows: numFrames = %d must be positive", numFrames)
	}
	return d.Prepare(ctx, d.rowsShape(numFrames))
}

// runDecode runs the decode graph. With tapNames it returns those
// intermediates (names of decodeGraph's taps, "wave" for the output) instead.
func (d *Decoder) runDecode(z *tensors.Tensor, tapNames []string) (outs []*tensors.Tensor, err error) {
	unlock, err := d.guard.RLock("h3audio: Decode on a closed Decoder")
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer graphexec.Recover(&err, "h3audio: decoding audio latents")
	var exec *Exec
	if tapNames == nil {
		exec, err = d.decodeExec()
	} else {
		exec, err = NewExec(d.backend, func(in []*Node) []*Node {
			t := taps{}
			t["wave"] = decodeGraph(d.cfg, bindNodes(d.dec, in[1:]), in[0], t)
			return t.outputs(tapNames, "decoder")
		})
		if exec != nil {
			defer exec.Finalize()
		}
	}
	if err != nil {
		return nil, err
	}
	return graphexec.Call(exec, graphexec.ParamArgs([]any{z}, d.dec...)...)
}

// decodeExec returns the decode graph's executable (built once; it compiles once per latent shape).
// Its inputs are the latents [B, C, N] float32, then the decoder's weights in d.dec order.
func (d *Decoder) decodeExec() (exec *Exec, err error) {
	defer graphexec.Recover(&err, "h3audio: building the decode graph")
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if d.decExec == nil {
		d.decExec, err = NewExec(d.backend, func(in []*Node) []*Node {
			return []*Node{decodeGraph(d.cfg, bindNodes(d.dec, in[1:]), in[0], nil)}
		})
	}
	return d.decExec, err
}

func bindNodes(ps []*weights.Param, in []*Node) params {
	return params{graphexec.Bind(ps, in)}
}

// splitItems copies a [B, 1, L] result into one slice per item.
func splitItems(t *tensors.Tensor, b int) ([][]float32, error) {
	flat, err := tensors.CopyFlatData[float32](t)
	t.FinalizeAll()
	if err != nil {
		return nil, fmt.Errorf("h3audio: reading the waveform: %w", err)
	}
	l := len(flat) / b
	out := make([][]float32, b)
	for i := range out {
		out[i] = flat[i*l : (i+1)*l : (i+1)*l]
	}
	return out, nil
}

// declareWN declares a weight-normed conv: a folded `weight` when the source
// has one, else the (weight_g, weight_v) pair that torch's weight_norm saves.
func declareWN(set *weights.Set, src weights.Source, prefix string, shape ...int) []*weights.Param {
	if _, ok := src.Tensor(prefix + ".weight"); ok {
		return []*weights.Param{set.AddF32(prefix+".weight", shape...)}
	}
	return []*weights.Param{
		set.AddF32(prefix+".weight_g", shape[0], 1, 1),
		set.AddF32(prefix+".weight_v", shape...),
	}
}

// filterTaps is the length of BigVGAN's kaiser-sinc filters (Activation1d's
// kernel_size, fixed to 12 by the H3 module).
const filterTaps = 12

func declareActivation(set *weights.Set, prefix string, channels int) []*weights.Param {
	return []*weights.Param{
		set.AddF32(prefix+".act.alpha", channels),
		set.AddF32(prefix+".act.beta", channels),
		set.AddF32(prefix+".upsample.filter", 1, 1, filterTaps),
		set.AddF32(prefix+".downsample.lowpass.filter", 1, 1, filterTaps),
	}
}

// declareDecoder declares every decoder tensor with its shape from cfg, in the
// order the decode graph takes them.
func declareDecoder(cfg Config, set *weights.Set, src weights.Source) []*weights.Param {
	var ps []*weights.Param
	add := func(p ...*weights.Param) { ps = append(ps, p...) }
	add(set.AddF32("dec_in_proj.weight", cfg.LatentDim, cfg.LatentChannels, 1),
		set.AddF32("dec_in_proj.bias", cfg.LatentDim))
	add(declareWN(set, src, "decoder.conv_pre", cfg.DecoderDim, cfg.LatentDim, 7)...)
	add(set.AddF32("decoder.conv_pre.bias", cfg.DecoderDim))
	ch := cfg.DecoderDim
	nk := len(cfg.ResblockKernelSizes)
	for i := range cfg.DecoderRates {
		name := fmt.Sprintf("decoder.ups.%d.0", i)
		add(declareWN(set, src, name, ch, ch/2, cfg.DecoderKernelSizes[i])...)
		add(set.AddF32(name+".bias", ch/2))
		ch /= 2
		for j, k := range cfg.ResblockKernelSizes {
			rb := fmt.Sprintf("decoder.resblocks.%d", i*nk+j)
			for m := range cfg.ResblockDilationSizes[j] {
				for _, conv := range []string{"convs1", "convs2"} {
					c := fmt.Sprintf("%s.%s.%d", rb, conv, m)
					add(declareWN(set, src, c, ch, ch, k)...)
					add(set.AddF32(c+".bias", ch))
				}
				add(declareActivation(set, fmt.Sprintf("%s.activations.%d", rb, 2*m), ch)...)
				add(declareActivation(set, fmt.Sprintf("%s.activations.%d", rb, 2*m+1), ch)...)
			}
		}
	}
	add(declareActivation(set, "decoder.activation_post", ch)...)
	add(declareWN(set, src, "decoder.conv_post", 1, ch, 7)...)
	return ps
}
