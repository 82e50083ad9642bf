package h3video

import (
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
)

// Options configure a Decoder. The zero value decodes in float32 with the reference's tiling
// (the config's 256 px tiles and 64 px minimum overlap).
type Options struct {
	// DType is the weight and matmul dtype: Float32 (default, the released precision), BFloat16 or
	// Float16 (faster on GPUs). With half precision, matmul products are rounded to that dtype as
	// PyTorch's half-precision linears do; biases, norms, RoPE, softmax and the residual stream stay
	// float32.
	DType dtypes.DType
	// TileSize is the spatial tile edge in pixels (both axes); 0 takes the config's
	// tile_sample_min_height/width. It must be a multiple of the spatial ratio (16 for the release).
	TileSize int
	// TileOverlap is the minimum overlap between tiles in pixels; 0 takes the config's value. It must
	// be a multiple of the spatial ratio and smaller than TileSize.
	TileOverlap int
	// TileBatch is the most spatial tiles decoded together in one device call (tiles of equal size
	// are stacked on a batch axis, which keeps a GPU's matrix units far busier than one tile at a
	// time). 0 chooses automatically: as many as keep a call's residual stream within 24,576 tokens
	// of width 2048 (all 12 tiles of a 480×832 release clip), about 2 GiB of transient activations
	// on top of the weights. 1 decodes tile by tile (least memory). Results do not depend on it
	// beyond floating-point reassociation in the backend's matmuls.
	TileBatch int
	// DisableTiling decodes each clip over the whole canvas in one pass (the reference with
	// use_tiling=False). Attention memory then grows with the square of the canvas area.
	DisableTiling bool
	// Devices is how many devices of the backend the clips of a decode spread over (0 or 1: device 0
	// alone). Each device beyond the first holds its own copy of the weights, made at load and freed
	// at Close; clip i decodes on device i mod Devices, concurrently, and the frames still come out in
	// order. The results are those of one device.
	Devices int
	// Attention selects the attention implementation (default: fused on xla:cuda with bf16, exact
	// float32 otherwise; Attention.Path forces one).
	Attention attention.Options
}

// Decoder decodes H3 video latents. Its methods may be called from several goroutines; decodes run
// one at a time.
type Decoder struct {
	cfg     Config
	opts    Options
	backend compute.Backend
	gs      *graphs

	set                           *weights.Set
	pqW, pqB, piW, piB, registers *weights.Param
	blocks                        [][numBlockTensors]*weights.Param
	noW, noB, poW, poB            *weights.Param

	preExec, blockExec *Exec
	postMu             sync.Mutex
	postExecs          modelkit.ExecCache[[3]int]
	replicas           []*replica           // one per device the clips spread over; device 0's first
	clipHook           func(lane, clip int) // tests only: a lane finished stitching a clip

	guard modelkit.Guard
}

// Load reads the released vae/ folder (config.json and the safetensors weights).
func Load(backend compute.Backend, dir string, opts Options) (*Decoder, error) {
	return modelkit.LoadFolder(dir, "h3video", LoadConfig, func(cfg Config, src weights.Source) (*Decoder, error) {
		return FromSource(backend, cfg, src, opts)
	})
}

// FromSource builds a decoder from any weight source using the released (diffusers) tensor names.
// Encoder tensors in the source are ignored. The tensors are copied to the backend, so the source
// may be closed afterwards.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*Decoder, error) {
	return modelkit.Populate(func() (*Decoder, error) { return newDecoder(backend, cfg, opts) }, func(d *Decoder) error {
		return modelkit.BindSource("h3video", src, d.set, d.opts.DType, backend, d.build)
	})
}

// newDecoder validates the config and options and declares the parameters (unbound).
func newDecoder(backend compute.Backend, cfg Config, opts Options) (*Decoder, error) {
	var err error
	if opts.DType, err = modelkit.Prepare("h3video", cfg, backend, opts.DType, modelkit.HalfDTypes); err != nil {
		return nil, err
	}
	if opts.TileBatch < 0 {
		return nil, fmt.Errorf("h3video: Options.TileBatch=%d must not be negative (0 chooses automatically)", opts.TileBatch)
	}
	if _, err := attention.Resolve(backend, opts.DType, cfg.DecoderHeadDim, opts.Attention); err != nil {
		return nil, fmt.Errorf("h3video: %w", err)
	}
	if opts.Devices < 0 || opts.Devices > backend.NumDevices() {
		return nil, fmt.Errorf("h3video: Options.Devices=%d: the backend %s has %d device(s); use 1..%d (0 is 1)",
			opts.Devices, backend.Name(), backend.NumDevices(), backend.NumDevices())
	}
	d := &Decoder{cfg: cfg, opts: opts, backend: backend, postExecs: modelkit.ExecCache[[3]int]{}}
	if err := checkTiles(cfg, opts); err != nil {
		return nil, err
	}
	d.declare()
	return d, nil
}

// build creates the graph executors (compiled lazily, once per tile geometry).
func (d *Decoder) build() error {
	cfg := d.cfg
	d.gs = &graphs{
		heads: cfg.DecoderNumHeads, headDim: cfg.DecoderHeadDim, registers: cfg.DecoderNumRegisters,
		outChannels: cfg.OutChannels, patch: cfg.SpatialRatio(), patchT: cfg.TemporalRatio(),
		eps: cfg.DecoderNormEps, attn: d.opts.Attention,
	}
	if err := graphexec.Catch("", func() error {
		d.preExec = graphexec.MustExec(d.backend, "h3video.pre", d.gs.pre)
		d.blockExec = graphexec.MustExec(d.backend, "h3video.block", func(in []*Node) []*Node { return []*Node{d.gs.block(in)} })
		return nil
	}); err != nil {
		return fmt.Errorf("h3video: building graphs: %w", err)
	}
	return d.placeReplicas()
}

// checkTiles validates the tiling options against the config.
func checkTiles(cfg Config, opts Options) error {
	for _, v := range []struct {
		name string
		v    int
	}{{"TileSize", opts.TileSize}, {"TileOverlap", opts.TileOverlap}} {
		if v.v < 0 || v.v%cfg.SpatialRatio() != 0 {
			return fmt.Errorf("h3video: Options.%s=%d must be a non-negative multiple of the spatial ratio %d",
				v.name, v.v, cfg.SpatialRatio())
		}
	}
	th, tw, oh, ow := tileGeometry(cfg, opts)
	if oh >= th || ow >= tw {
		return fmt.Errorf("h3video: tile overlap %d×%d px must be smaller than the tile %d×%d px; "+
			"lower Options.TileOverlap or raise Options.TileSize", oh, ow, th, tw)
	}
	if r := cfg.SpatialRatio(); th%r != 0 || tw%r != 0 || oh%r != 0 || ow%r != 0 {
		return fmt.Errorf("h3video: tile sizes %d×%d and overlaps %d×%d px must be multiples of the spatial ratio %d",
			th, tw, oh, ow, r)
	}
	return nil
}

// tileSizes returns tile height, width and minimum overlaps in pixels.
func (d *Decoder) tileSizes() (th, tw, oh, ow int) { return tileGeometry(d.cfg, d.opts) }

// tileGeometry applies the tiling options over the config's values.
func tileGeometry(cfg Config, opts Options) (th, tw, oh, ow int) {
	th, tw = cfg.TileSampleMinHeight, cfg.TileSampleMinWidth
	oh, ow = cfg.TileSampleMinOverlapHeight, cfg.TileSampleMinOverlapWidth
	if opts.TileSize > 0 {
		th, tw = opts.TileSize, opts.TileSize
	}
	if opts.TileOverlap > 0 {
		oh, ow = opts.TileOverlap, opts.TileOverlap
	}
	return
}

// declare lists the decoder's parameters with shapes from the config. The released folder also
// holds the encoder, which T2VA never runs: it is ignored, not loaded.
func (d *Decoder) declare() {
	c := d.cfg
	lc, dim := c.LatentChannels, c.Width()
	inner := dim * c.DecoderFFNMult
	patchOut := c.OutChannels * c.TemporalRatio() * c.SpatialRatio() * c.SpatialRatio()
	s := weights.NewSet("")
	s.Ignore("encoder.", "quant_conv.")
	d.set = s
	d.pqW = s.Add("post_quant_conv.weight", lc, lc, 1, 1, 1)
	d.pqB = s.Add("post_quant_conv.bias", lc)
	dec := s.Sub("decoder")
	d.piW = dec.Add("proj_in.weight", dim, lc)
	d.piB = dec.Add("proj_in.bias", dim)
	d.registers = dec.Add("register_tokens", 1, c.DecoderNumRegisters, dim)
	shapes := [numBlockTensors][]int{
		bNorm1: {dim}, bQW: {dim, dim}, bQB: {dim}, bKW: {dim, dim}, bKB: {dim}, bVW: {dim, dim}, bVB: {dim},
		bOW: {dim, dim}, bOB: {dim}, bScale1: {dim}, bNorm2: {dim},
		bFF0W: {2 * inner, dim}, bFF0B: {2 * inner}, bFF2W: {dim, inner}, bFF2B: {dim}, bScale2: {dim},
	}
	d.blocks = make([][numBlockTensors]*weights.Param, c.DecoderNumLayers)
	for i := range d.blocks {
		b := dec.Sub(fmt.Sprintf("transformer_blocks.%d", i))
		for k := range d.blocks[i] {
			d.blocks[i][k] = b.Add(blockTensorNames[k], shapes[k]...)
		}
	}
	d.noW = dec.Add("norm_out.weight", dim)
	d.noB = dec.Add("norm_out.bias", dim)
	d.poW = dec.Add("proj_out.weight", patchOut, dim)
	d.poB = dec.Add("proj_out.bias", patchOut)
}

// Config returns the decoder's configuration.
func (d *Decoder) Config() Config { return d.cfg }

// Close releases the weights and compiled graphs. The decoder cannot be used afterwards.
func (d *Decoder) Close() error {
	return d.guard.Close(d.release)
}

func (d *Decoder) release() error {
	if d.set != nil {
		d.set.Release()
	}
	d.releaseReplicas()
	d.postExecs.Finalize()
	graphexec.FinalizeExecs(d.preExec, d.blockExec)
	return nil
}

// Params is the checkpoint parameter table of the decoder (post_quant_conv and the ViT decoder) for
// cfg, in declaration order.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Decoder{cfg: cfg}
	d.declare()
	return weights.ShapesOf(d.set.Params()), nil
}

// EncoderParams is the checkpoint parameter table of the encoder (quant_conv and the ViT encoder) for
// cfg, in declaration order.
func EncoderParams(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := encoderConfigCheck(cfg); err != nil {
		return nil, err
	}
	e := &Encoder{cfg: cfg, index: map[*weights.Param]int{}}
	e.declare()
	return weights.ShapesOf(e.set.Params()), nil
}
