package wan

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
)

// Reference tiling defaults (FastVideo's VAEConfig): 256 px tiles every 192 px, so neighbouring
// tiles overlap, and are blended over, 64 px.
const (
	DefaultTileSize   = 256
	DefaultTileStride = 192
)

// Options configure a Decoder. The zero value decodes the whole canvas at once in float32, which is
// what FastVideo's Wan pipelines run (vae_tiling off).
type Options struct {
	// DType is the weight and convolution dtype: Float32 (default; the released weights),
	// BFloat16 (FastVideo's Wan decode precision on GPUs) or Float16. Norms, softmax and the output
	// stay float32.
	DType dtypes.DType
	// Tiling decodes overlapping spatial tiles and blends them like FastVideo's spatial tiled decode
	// when the latent canvas is larger than one tile. Each tile keeps its own feature cache and is
	// decoded chunk by chunk, so frames still stream and memory stays flat in the frame count; the
	// caches of all tiles stay on the device (about (TileSize/TileStride)² times the whole-canvas
	// cache), while the per-chunk activations shrink to one tile's.
	Tiling bool
	// TileSize and TileStride are the tile edge and the distance between tile origins in pixels
	// (0: DefaultTileSize, DefaultTileStride); both must be multiples of the spatial ratio, and
	// TileStride ≤ TileSize. Neighbouring tiles are blended over TileSize−TileStride pixels.
	TileSize, TileStride int
	// Encoder also binds the encoder (encoder.*, quant_conv.*) so that Encode works; Wan2.2
	// image-to-video conditioning needs it. Without it those tensors are skipped and never leave
	// the file.
	Encoder bool
}

// Decoder decodes Wan latents (and, built with Options.Encoder, encodes videos). Calls run one at
// a time (a second call waits).
type Decoder struct {
	cfg     Config
	opts    Options
	backend compute.Backend

	set       *weights.Set
	params    []*weights.Param // decoder graph inputs after the latent chunk, in declaration order
	encParams []*weights.Param // encoder graph inputs after the pixel chunk (Options.Encoder)

	guard modelkit.Guard
	execs modelkit.ExecCache[execKey]
}

// execKey picks one of the chunk graphs: decoder or encoder, the first chunk or a later one, with
// or without the intermediate outputs the parity tests read.
type execKey struct{ first, taps, enc bool }

// Load reads the released vae/ folder (config.json and the safetensors weights, single file or
// sharded). Encoder tensors are skipped unless Options.Encoder is set.
func Load(backend compute.Backend, dir string, opts Options) (*Decoder, error) {
	return modelkit.LoadFolder(dir, "wan", LoadConfig, func(cfg Config, src weights.Source) (*Decoder, error) {
		return FromSource(backend, cfg, src, opts)
	})
}

// FromSource binds the decoder of cfg from src under the released (diffusers) names:
// post_quant_conv.*, decoder.conv_in.*, decoder.mid_block.*, decoder.up_blocks.*, decoder.norm_out.*,
// decoder.conv_out.*; with Options.Encoder also encoder.* and quant_conv.*, which are otherwise
// ignored.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*Decoder, error) {
	if src == nil {
		return nil, errors.New("wan: FromSource needs a weight source")
	}
	return modelkit.Populate(func() (*Decoder, error) { return newDecoder(backend, cfg, opts) }, func(d *Decoder) error {
		return modelkit.BindSource("wan", src, d.set, d.opts.DType, backend, nil)
	})
}

// newDecoder validates the config and options and declares the parameters (unbound).
func newDecoder(backend compute.Backend, cfg Config, opts Options) (*Decoder, error) {
	var err error
	if opts.DType, err = modelkit.Prepare("wan", cfg, backend, opts.DType, modelkit.HalfDTypes); err != nil {
		return nil, err
	}
	if opts.TileSize == 0 {
		opts.TileSize = DefaultTileSize
	}
	if opts.TileStride == 0 {
		opts.TileStride = DefaultTileStride
	}
	r := cfg.SpatialRatio()
	if opts.TileSize < 0 || opts.TileStride < 0 || opts.TileSize%r != 0 || opts.TileStride%r != 0 {
		return nil, fmt.Errorf("wan: Options.TileSize=%d and TileStride=%d must be positive multiples of the spatial ratio %d",
			opts.TileSize, opts.TileStride, r)
	}
	if opts.TileStride > opts.TileSize {
		return nil, fmt.Errorf("wan: Options.TileStride=%d is larger than TileSize=%d, which would leave gaps; lower the stride",
			opts.TileStride, opts.TileSize)
	}
	d := &Decoder{cfg: cfg, opts: opts, backend: backend, execs: modelkit.ExecCache[execKey]{}}
	d.set, d.params = declare(cfg)
	if opts.Encoder {
		d.encParams = declareEncoder(cfg, d.set)
	} else {
		d.set.Ignore("encoder.", "quant_conv.")
	}
	return d, nil
}

// Params is the checkpoint parameter table of the decoder (post_quant_conv and decoder.*) for cfg, in
// graph input order.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	_, ps := declare(cfg)
	return weights.ShapesOf(ps), nil
}

// EncoderParams is the checkpoint parameter table of the encoder (encoder.* and quant_conv.*, bound
// with Options.Encoder) for cfg, in graph input order.
func EncoderParams(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return weights.ShapesOf(declareEncoder(cfg, weights.NewSet(""))), nil
}

// declare lists the decoder's parameters with shapes from the config. Norm gains stay float32;
// convolution weights and biases take the compute dtype.
func declare(cfg Config) (*weights.Set, []*weights.Param) {
	d := &declarer{s: weights.NewSet("")}
	add, conv, res := d.add, d.conv, d.res
	s := d.s
	z := cfg.ZDim
	conv("post_quant_conv", z, z, 1, 1, 1)
	dims := cfg.dims()
	c0 := dims[0]
	conv("decoder.conv_in", c0, z, 3, 3, 3)
	res("decoder.mid_block.resnets.0", c0, c0)
	d.attn("decoder.mid_block.attentions.0", c0)
	res("decoder.mid_block.resnets.1", c0, c0)
	last := c0
	for i, b := range cfg.upBlocks() {
		prefix := fmt.Sprintf("decoder.up_blocks.%d", i)
		in := b.in
		for j := 0; j <= cfg.NumResBlocks; j++ {
			res(fmt.Sprintf("%s.resnets.%d", prefix, j), in, b.out)
			in = b.out
		}
		if b.mode != upNone {
			up := upsamplerPrefix(cfg, prefix)
			conv(up+".resample.1", b.upOut, b.out, 3, 3)
			if b.mode == up3D {
				conv(up+".time_conv", 2*b.out, b.out, 3, 1, 1)
			}
		}
		last = b.out
	}
	add(s.AddF32("decoder.norm_out.gamma", last, 1, 1, 1))
	conv("decoder.conv_out", cfg.OutChannels, last, 3, 3, 3)
	return s, d.ps
}

// declarer declares the parameters of the VAE's building blocks and lists them in graph input order.
// Norm gains stay float32; convolution weights and biases take the compute dtype.
type declarer struct {
	s  *weights.Set
	ps []*weights.Param
}

func (d *declarer) add(p *weights.Param) { d.ps = append(d.ps, p) }

func (d *declarer) conv(name string, cout, cin int, k ...int) {
	d.add(d.s.Add(name+".weight", append([]int{cout, cin}, k...)...))
	d.add(d.s.Add(name+".bias", cout))
}

// res is a WanResidualBlock from in to out channels.
func (d *declarer) res(prefix string, in, out int) {
	d.add(d.s.AddF32(prefix+".norm1.gamma", in, 1, 1, 1))
	d.conv(prefix+".conv1", out, in, 3, 3, 3)
	d.add(d.s.AddF32(prefix+".norm2.gamma", out, 1, 1, 1))
	d.conv(prefix+".conv2", out, out, 3, 3, 3)
	if in != out {
		d.conv(prefix+".conv_shortcut", out, in, 1, 1, 1)
	}
}

// attn is a WanAttentionBlock of c channels.
func (d *declarer) attn(prefix string, c int) {
	d.add(d.s.AddF32(prefix+".norm.gamma", c, 1, 1))
	d.conv(prefix+".to_qkv", 3*c, c, 1, 1)
	d.conv(prefix+".proj", c, c, 1, 1)
}

// Config returns the decoder's configuration.
func (d *Decoder) Config() Config { return d.cfg }

// Options returns the options in effect (defaults filled in).
func (d *Decoder) Options() Options { return d.opts }

// Close releases the weights and compiled graphs. The decoder cannot be used afterwards.
func (d *Decoder) Close() error {
	return d.guard.Close(func() error {
		d.execs.Finalize()
		d.set.Release()
		return nil
	})
}

// tapNames are the intermediate outputs of a taps graph, after the pixels and the caches.
var tapNames = []string{"post_quant_conv", "decoder"}

// exec returns (building once) the chunk graph for key. Decoder inputs: the latent frame
// [1, z, 1, h, w] float32, the parameters, then (later chunks) the caches; outputs: pixels
// [1, 3, frames, H, W] float32, the caches, then (taps) tapNames. The encoder graph takes a pixel
// chunk and returns the posterior parameters [1, 2z, 1, h, w] and its caches. Each graph compiles
// once per input geometry.
func (d *Decoder) exec(key execKey) (*Exec, error) {
	return d.execs.Get(key, func() (*Exec, error) { return d.buildExec(key) })
}

func (d *Decoder) buildExec(key execKey) (*Exec, error) {
	ps := d.params
	if key.enc {
		ps = d.encParams
	}
	e, err := NewExec(d.backend, func(in []*Node) []*Node {
		g := &chunkGraph{cfg: d.cfg, dt: d.opts.DType, first: key.first, p: graphexec.Bind(ps, in[1:])}
		if !key.first {
			g.cache = in[1+len(ps):]
		}
		if key.taps {
			g.taps = map[string]*Node{}
		}
		var out []*Node
		if key.enc {
			out = append([]*Node{g.encode(in[0])}, g.next...)
		} else {
			out = append([]*Node{g.decode(in[0])}, g.next...)
		}
		for _, name := range tapNames {
			if key.taps {
				out = append(out, ConvertDType(g.taps[name], dtypes.Float32))
			}
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("wan: building the decoder graph: %w", err)
	}
	e.WithName(fmt.Sprintf("wan.vae_chunk(encoder=%v, first=%v, taps=%v)", key.enc, key.first, key.taps))
	// Tiles of up to four geometries (interior, right, bottom, corner) per graph.
	e.SetMaxCache(16)
	return e, nil
}
