package h3video

import (
	"context"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/core/tensors/images"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"
)

// Encoder is the H3 video VAE encoder (a causal 3D CNN), used only to condition FL2VA/Ref2VA
// generation on keyframes or reference videos: T2VA never runs it. It computes in float32, the
// released precision, on per-frame GroupNorm statistics.
type Encoder struct {
	cfg     Config
	opts    Options
	backend compute.Backend

	set      *weights.Set
	index    map[*weights.Param]int // graph input position (after the pixels) of each parameter
	convIn   [2]*weights.Param
	blocks   []encBlock
	normOut  [2]*weights.Param
	convOut  [2]*weights.Param
	quant    [2]*weights.Param
	exec     *Exec // moments only
	execActs *Exec // moments, conv_in output, encoder output (parity tests)

	guard modelkit.Guard
}

type encResnet struct {
	norm1, conv1, norm2, conv2, shortcut [2]*weights.Param // weight, bias; shortcut may be unset
}

type encBlock struct {
	resnets           []encResnet
	down              [2]*weights.Param // unset when the block does not downsample
	tStride, sStride  int
	hasDown, shortcut bool
}

// Posterior is the encoder's diagonal Gaussian over latents [1, C, T, h, w]: Mean and LogVar (clamped
// to [−30, 20] like the reference). The pipeline uses the mode, i.e. Mean.
type Posterior struct {
	Mean, LogVar []float32
	Shape        []int
}

// LoadEncoder reads the encoder from the released vae/ folder.
func LoadEncoder(backend compute.Backend, dir string, opts Options) (*Encoder, error) {
	return modelkit.LoadFolder(dir, "h3video", LoadConfig, func(cfg Config, src weights.Source) (*Encoder, error) {
		return EncoderFromSource(backend, cfg, src, opts)
	})
}

// EncoderFromSource builds the encoder from released (diffusers) tensor names; decoder tensors are
// ignored. Options.DType must be Float32 (or unset); the tiling options apply as for decoding.
func EncoderFromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*Encoder, error) {
	return modelkit.Populate(func() (*Encoder, error) { return newEncoder(backend, cfg, opts) }, func(e *Encoder) error {
		return modelkit.BindSource("h3video: encoder", src, e.set, dtypes.Float32, backend, e.build)
	})
}

// NewRandomEncoder is EncoderFromSource with weights drawn on the backend from seed (the decoder's
// NewRandom scales), for random-weight runs that condition on keyframes.
func NewRandomEncoder(backend compute.Backend, cfg Config, opts Options, seed int64) (*Encoder, error) {
	return modelkit.Populate(func() (*Encoder, error) { return newEncoder(backend, cfg, opts) }, func(e *Encoder) error {
		return modelkit.DrawRandom("h3video encoder", e.set, dtypes.Float32, backend, seed, randweights.FixtureDraw, e.build)
	})
}

// newEncoder checks the options and geometry and declares the parameters.
func newEncoder(backend compute.Backend, cfg Config, opts Options) (*Encoder, error) {
	var err error
	if opts.DType, err = modelkit.Prepare("h3video", cfg, backend, opts.DType, []dtypes.DType{dtypes.Float32}); err != nil {
		return nil, err
	}
	if err := encoderConfigCheck(cfg); err != nil {
		return nil, err
	}
	if err := checkTiles(cfg, opts); err != nil {
		return nil, err
	}
	e := &Encoder{cfg: cfg, opts: opts, backend: backend, index: map[*weights.Param]int{}}
	e.declare()
	return e, nil
}

// build compiles the encoder graphs over the bound parameters.
func (e *Encoder) build() error {
	return graphexec.Catch("", func() error {
		e.exec = graphexec.MustExec(e.backend, "h3video.encoder", func(in []*Node) []*Node { return e.graph(in, false) })
		e.execActs = graphexec.MustExec(e.backend, "h3video.encoder_acts", func(in []*Node) []*Node { return e.graph(in, true) })
		return nil
	})
}

func encoderConfigCheck(c Config) error {
	if c.InChannels != 3 {
		return fmt.Errorf("h3video: config in_channels=%d: the encoder normalizes RGB pixels, so it must be 3", c.InChannels)
	}
	if c.InChannels <= 0 || c.LayersPerBlock <= 0 || c.NormNumGroups <= 0 || len(c.BlockOutChannels) != len(c.SpatialDownsampleFactors) {
		return fmt.Errorf("h3video: encoder config needs positive in_channels (%d), layers_per_block (%d), norm_num_groups (%d) "+
			"and one block_out_channels entry per downsample factor (%d vs %d)", c.InChannels, c.LayersPerBlock,
			c.NormNumGroups, len(c.BlockOutChannels), len(c.SpatialDownsampleFactors))
	}
	for i, ch := range c.BlockOutChannels {
		if ch <= 0 || ch%c.NormNumGroups != 0 {
			return fmt.Errorf("h3video: block_out_channels[%d]=%d must be a positive multiple of norm_num_groups=%d", i, ch, c.NormNumGroups)
		}
		if s := c.SpatialDownsampleFactors[i]; s != 1 && s != 2 {
			return fmt.Errorf("h3video: spatial_downsample_factors[%d]=%d: only 1 and 2 are supported", i, s)
		}
	}
	return nil
}

func (e *Encoder) declare() {
	c := e.cfg
	s := weights.NewSet("")
	s.Ignore("decoder.", "post_quant_conv.")
	e.set = s
	add := func(set *weights.Set, name string, shape ...int) *weights.Param {
		p := set.Add(name, shape...)
		e.index[p] = len(e.index)
		return p
	}
	conv := func(set *weights.Set, name string, out, in, k int) [2]*weights.Param {
		return [2]*weights.Param{add(set, name+".weight", out, in, k, k, k), add(set, name+".bias", out)}
	}
	norm := func(set *weights.Set, name string, ch int) [2]*weights.Param {
		return [2]*weights.Param{add(set, name+".weight", ch), add(set, name+".bias", ch)}
	}
	enc := s.Sub("encoder")
	bo := c.BlockOutChannels
	e.convIn = conv(enc, "conv_in", bo[0], c.InChannels, 3)
	in := bo[0]
	for i, out := range bo {
		b := enc.Sub(fmt.Sprintf("down_blocks.%d", i))
		blk := encBlock{tStride: c.TemporalDownsampleFactors[i], sStride: c.SpatialDownsampleFactors[i]}
		for j := 0; j < c.LayersPerBlock; j++ {
			cin := out
			if j == 0 {
				cin = in
			}
			r := b.Sub(fmt.Sprintf("resnets.%d", j))
			rn := encResnet{
				norm1: norm(r, "norm1", cin), conv1: conv(r, "conv1", out, cin, 3),
				norm2: norm(r, "norm2", out), conv2: conv(r, "conv2", out, out, 3),
			}
			if cin != out {
				rn.shortcut = conv(r, "conv_shortcut", out, cin, 1)
			}
			blk.resnets = append(blk.resnets, rn)
		}
		if blk.tStride*blk.sStride > 1 {
			blk.hasDown = true
			blk.down = conv(b, "downsamplers.0.conv", out, out, 3)
		}
		e.blocks = append(e.blocks, blk)
		in = out
	}
	e.normOut = norm(enc, "norm_out", bo[len(bo)-1])
	e.convOut = conv(enc, "conv_out", 2*c.LatentChannels, bo[len(bo)-1], 3)
	e.quant = conv(s, "quant_conv", 2*c.LatentChannels, 2*c.LatentChannels, 1)
}

// graph encodes one normalized pixel clip/tile in[0] [1, Cin, T, H, W]; in[1:] are the parameters in
// declaration order. It returns the moments [1, 2C, T', H/r, W/r] (and with acts, the conv_in and
// encoder outputs).
func (e *Encoder) graph(in []*Node, acts bool) []*Node {
	w := func(p *weights.Param) *Node { return in[1+e.index[p]] }
	c := e.cfg
	x := in[0]
	conv := func(x *Node, p [2]*weights.Param, spatialPad, temporalPad int, stride [3]int) *Node {
		if spatialPad > 0 {
			x = reflectPad(x, 3, spatialPad, spatialPad)
			x = reflectPad(x, 4, spatialPad, spatialPad)
		}
		y := Convolve(x, w(p[0])).ChannelsAxis(images.ChannelsFirst).StridePerAxis(stride[:]...).
			PaddingPerDim([][2]int{{temporalPad, 0}, {0, 0}, {0, 0}}).Done()
		b := w(p[1])
		return Add(y, Reshape(b, 1, b.Shape().Dim(0), 1, 1, 1))
	}
	one := [3]int{1, 1, 1}
	gn := func(x *Node, p [2]*weights.Param) *Node {
		return groupNormPerFrame(x, w(p[0]), w(p[1]), c.NormNumGroups, c.NormEps)
	}
	silu := func(x *Node) *Node { return Mul(x, Sigmoid(x)) }

	x = conv(x, e.convIn, 1, 2, one)
	convIn := x
	for _, blk := range e.blocks {
		for _, r := range blk.resnets {
			h := conv(silu(gn(x, r.norm1)), r.conv1, 1, 2, one)
			h = conv(silu(gn(h, r.norm2)), r.conv2, 1, 2, one)
			if r.shortcut[0] != nil {
				x = conv(x, r.shortcut, 0, 0, one)
			}
			x = Add(x, h)
		}
		if blk.hasDown {
			if blk.sStride == 2 {
				x = reflectPad(x, 3, 0, 1)
				x = reflectPad(x, 4, 0, 1)
			}
			x = conv(x, blk.down, 0, 2, [3]int{blk.tStride, blk.sStride, blk.sStride})
		}
	}
	x = conv(silu(gn(x, e.normOut)), e.convOut, 1, 2, one)
	out := x
	moments := conv(x, e.quant, 0, 0, one)
	if acts {
		return []*Node{moments, convIn, out}
	}
	return []*Node{moments}
}

// reflectPad pads axis with before/after values mirrored about the edges (PyTorch mode="reflect").
func reflectPad(x *Node, axis, before, after int) *Node {
	n := x.Shape().Dim(axis)
	parts := []*Node{}
	spec := func(a, b int) []SliceAxisSpec {
		s := make([]SliceAxisSpec, x.Rank())
		for i := range s {
			s[i] = AxisRange()
		}
		s[axis] = AxisRange(a, b)
		return s
	}
	if before > 0 {
		parts = append(parts, Reverse(Slice(x, spec(1, 1+before)...), axis))
	}
	parts = append(parts, x)
	if after > 0 {
		parts = append(parts, Reverse(Slice(x, spec(n-1-after, n-1)...), axis))
	}
	if len(parts) == 1 {
		return x
	}
	return Concatenate(parts, axis)
}

// groupNormPerFrame is GroupNorm applied to every frame on its own (statistics over the group's
// channels and the frame's pixels), with biased variance, then the per-channel affine.
func groupNormPerFrame(x, w, b *Node, groups int, eps float64) *Node {
	d := x.Shape().Dimensions // [B, C, T, H, W]
	g := Reshape(x, d[0], groups, d[1]/groups, d[2], d[3], d[4])
	mean := ReduceAndKeep(g, ReduceMean, 2, 4, 5)
	xc := Sub(g, mean)
	v := ReduceAndKeep(Square(xc), ReduceMean, 2, 4, 5)
	y := Reshape(Mul(xc, Rsqrt(AddScalar(v, eps))), d...)
	y = Mul(y, Reshape(w, 1, d[1], 1, 1, 1))
	return Add(y, Reshape(b, 1, d[1], 1, 1, 1))
}

// Close releases the encoder's weights and graphs.
func (e *Encoder) Close() error {
	return e.guard.Close(func() error {
		e.set.Release()
		graphexec.FinalizeExecs(e.exec, e.execActs)
		return nil
	})
}

// NormalizeLatents maps VAE-space latents to the DiT's space: (z − latents_mean[c]) / latents_std[c].
func (c Config) NormalizeLatents(z []float32, shape []int) ([]float32, error) {
	return c.mapChannels(z, shape, func(k int) func(float32) float32 {
		mean, std := f32(c.LatentsMean[k]), f32(c.LatentsStd[k])
		return func(z float32) float32 { return (z - mean) / std }
	})
}

// EncodePixels encodes a video [1, 3, T, H, W] of [0, 1] pixels like the reference's encode_pixels:
// clips of clip_length frames (the last padded by repeating its final frame), each ImageNet-normalized
// and encoded, concatenated, then the last token_drop latent frames dropped.
func (e *Encoder) EncodePixels(ctx context.Context, pixels []float32, shape []int) (Posterior, error) {
	return e.encode(ctx, pixels, shape, false)
}

// EncodeKeyframe encodes one frame [1, 3, 1, H, W] of [0, 1] pixels without clip padding or token drop
// (the reference's encode_keyframe on normalize_pixels(frame)): one latent frame.
func (e *Encoder) EncodeKeyframe(ctx context.Context, pixels []float32, shape []int) (Posterior, error) {
	if len(shape) == 5 && shape[2] != 1 {
		return Posterior{}, fmt.Errorf("h3video: EncodeKeyframe takes one frame, got shape %v", shape)
	}
	return e.encode(ctx, pixels, shape, true)
}

func (e *Encoder) encode(ctx context.Context, pixels []float32, shape []int, keyframe bool) (Posterior, error) {
	unlock, err := e.guard.Lock("h3video: encode called after Close")
	if err != nil {
		return Posterior{}, err
	}
	defer unlock()
	c := e.cfg
	if len(shape) != 5 || shape[0] != 1 || shape[1] != c.InChannels || shape[2] <= 0 || shape[3] <= 0 || shape[4] <= 0 {
		return Posterior{}, fmt.Errorf("h3video: pixel shape %v must be [1, %d, T, H, W]", shape, c.InChannels)
	}
	nt, hh, ww := shape[2], shape[3], shape[4]
	r := c.SpatialRatio()
	if hh%r != 0 || ww%r != 0 {
		return Posterior{}, fmt.Errorf("h3video: frame size %dx%d must be a multiple of the spatial ratio %d", hh, ww, r)
	}
	if len(pixels) != c.InChannels*nt*hh*ww {
		return Posterior{}, fmt.Errorf("h3video: pixel shape %v holds %d values, the slice has %d", shape, c.InChannels*nt*hh*ww, len(pixels))
	}
	clipLen := c.ClipLength
	if keyframe {
		clipLen = 1
	}
	plane := hh * ww
	var clips [][]float32 // moments per clip [2C][T'][h][w]
	tPer := 0
	for f0 := 0; f0 < nt; f0 += clipLen {
		clip := make([]float32, c.InChannels*clipLen*plane)
		for ch := 0; ch < c.InChannels; ch++ {
			mean, std := PixelMean[ch], PixelStd[ch]
			for f := 0; f < clipLen; f++ {
				src := pixels[(ch*nt+min(f0+f, nt-1))*plane:][:plane]
				dst := clip[(ch*clipLen+f)*plane:][:plane]
				for i, v := range src {
					dst[i] = (v - mean) / std
				}
			}
		}
		m, t, err := e.encodeClip(ctx, clip, clipLen, hh, ww, nil)
		if err != nil {
			return Posterior{}, err
		}
		clips, tPer = append(clips, m), t
	}
	total := tPer * len(clips)
	if !keyframe {
		total -= c.TokenDrop
	}
	if total <= 0 {
		return Posterior{}, fmt.Errorf("h3video: %d frames give no latent frame after dropping token_drop=%d", nt, c.TokenDrop)
	}
	lc, lp := c.LatentChannels, (hh/r)*(ww/r)
	p := Posterior{Shape: []int{1, lc, total, hh / r, ww / r}}
	p.Mean = make([]float32, lc*total*lp)
	p.LogVar = make([]float32, lc*total*lp)
	for ch := 0; ch < 2*lc; ch++ {
		for t := 0; t < total; t++ {
			src := clips[t/tPer][(ch*tPer+t%tPer)*lp:][:lp]
			if ch < lc {
				copy(p.Mean[(ch*total+t)*lp:], src)
				continue
			}
			dst := p.LogVar[((ch-lc)*total+t)*lp:][:lp]
			for i, v := range src {
				dst[i] = min(max(v, -30), 20)
			}
		}
	}
	return p, nil
}

// encodeClip encodes one normalized clip [Cin][frames][H][W] with the reference's spatial tiling
// (pixel tiles, moments stitched in latent space with overlaps/ratio); hook receives the first tile's
// conv_in and encoder outputs when set. It returns the moments [2C][T'][H/r][W/r] and T'.
func (e *Encoder) encodeClip(ctx context.Context, clip []float32, frames, hh, ww int, hook actHook) ([]float32, int, error) {
	r := e.cfg.SpatialRatio()
	ys, xs := Tiles{Starts: []int{0}, Sizes: []int{hh}}, Tiles{Starts: []int{0}, Sizes: []int{ww}}
	if !e.opts.DisableTiling {
		th, tw, oh, ow := tileGeometry(e.cfg, e.opts)
		var err error
		if ys, err = SplitTiles(hh, th, oh, r); err != nil {
			return nil, 0, err
		}
		if xs, err = SplitTiles(ww, tw, ow, r); err != nil {
			return nil, 0, err
		}
	}
	m := &momentCanvas{lh: hh / r, lw: ww / r}
	var prevRow []*tile
	y := 0
	for ri := range ys.Starts {
		row := make([]*tile, len(xs.Starts))
		x, keptH := 0, 0
		for ci := range xs.Starts {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
			y0, x0 := ys.Starts[ri], xs.Starts[ci]
			th, tw := min(ys.Sizes[ri], hh-y0), min(xs.Sizes[ci], ww-x0)
			var tileHook actHook
			if ri == 0 && ci == 0 {
				tileHook = hook
			}
			cur, err := e.encodeTile(pixelWindow(clip, e.cfg.InChannels*frames, hh, ww, y0, th, x0, tw), frames, th, tw, tileHook)
			if err != nil {
				return nil, 0, err
			}
			m.init(cur)
			row[ci] = cur.tile
			st := stitch{cur: cur.tile, y: y, x: x, kh: cur.h, kw: cur.w}
			if ri > 0 {
				st.up, st.eUp = prevRow[ci], min(prevRow[ci].h, cur.h, ys.Overlaps[ri-1]/r)
			}
			if ci > 0 {
				st.left, st.eLeft = row[ci-1], min(row[ci-1].w, cur.w, xs.Overlaps[ci-1]/r)
			}
			if ri < len(ys.Starts)-1 {
				st.kh -= ys.Overlaps[ri] / r
			}
			if ci < len(xs.Starts)-1 {
				st.kw -= xs.Overlaps[ci] / r
			}
			st.kh, st.kw = min(st.kh, m.lh-y), min(st.kw, m.lw-x)
			st.run(m.data, m.planes, m.lh, m.lw)
			x += st.kw
			keptH = st.kh
		}
		y += keptH
		prevRow = row
	}
	return m.data, m.tOut, nil
}

// momentCanvas is a clip's moments [planes][lh][lw], allocated at the first encoded tile, which
// gives the number of latent frames.
type momentCanvas struct {
	data         []float32
	tOut, planes int
	lh, lw       int
}

func (m *momentCanvas) init(t encodedTile) {
	if m.data == nil {
		m.tOut, m.planes = t.frames, t.planes
		m.data = make([]float32, m.planes*m.lh*m.lw)
	}
}

// encodedTile is one tile's moments [planes][h][w], planes = 2C·frames.
type encodedTile struct {
	*tile
	frames, planes int
}

// pixelWindow copies the window [y0, y0+th)×[x0, x0+tw) of every plane of clip [planes][hh][ww].
func pixelWindow(clip []float32, planes, hh, ww, y0, th, x0, tw int) []float32 {
	in := make([]float32, planes*th*tw)
	k := 0
	for p := 0; p < planes; p++ {
		for j := 0; j < th; j++ {
			copy(in[k:k+tw], clip[(p*hh+y0+j)*ww+x0:])
			k += tw
		}
	}
	return in
}

// encodeTile runs the encoder on one pixel tile [Cin][frames][th][tw]; hook, when set, receives its
// conv_in and encoder outputs.
func (e *Encoder) encodeTile(pixels []float32, frames, th, tw int, hook actHook) (encodedTile, error) {
	args := make([]any, 1+len(e.index))
	for p, i := range e.index {
		args[1+i] = p.T
	}
	in := tensors.FromFlatDataAndDimensions(pixels, 1, e.cfg.InChannels, frames, th, tw)
	defer in.FinalizeAll()
	args[0] = in
	exec := e.exec
	if hook != nil {
		exec = e.execActs
	}
	res, err := graphexec.Call(exec, args...)
	if err != nil {
		return encodedTile{}, fmt.Errorf("h3video: encoding a %dx%d pixel tile: %w", th, tw, err)
	}
	defer graphexec.Finalize(res...)
	if len(res) == 3 {
		hook("encoder_conv_in", res[1])
		hook("encoder_out", res[2])
	}
	dims := res[0].Shape().Dimensions
	data, err := tensors.CopyFlatData[float32](res[0])
	if err != nil {
		return encodedTile{}, fmt.Errorf("h3video: encoding a %dx%d pixel tile: %w", th, tw, err)
	}
	return encodedTile{tile: &tile{data: data, h: dims[3], w: dims[4]}, frames: dims[2], planes: dims[1] * dims[2]}, nil
}
