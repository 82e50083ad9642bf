package wan

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// Encoder layer kinds of the Wan2.1 (flat) encoder.
const (
	encRes = iota
	encAttn
	encDown
)

// encLayer is one entry of WanEncoder3d.down_blocks for Wan2.1 (a flat list: residual blocks,
// optional attention blocks, resamplers).
type encLayer struct {
	kind    int
	in, out int
	mode    int // encDown: down2D or down3D
}

// encBlock is one WanResidualDownBlock of the Wan2.2 encoder.
type encBlock struct {
	in, out int
	down    bool // has a downsampler (all but the last block)
	mode    int  // down2D or down3D
	ft, fs  int  // AvgDown3D shortcut factors
}

// Downsampling modes.
const (
	down2D = iota + 1 // zero pad right/bottom, 3×3 conv with stride 2, per frame
	down3D            // the same, then a causal time conv with stride 2
)

// encDims are the encoder widths: [dim·u for u in [1] + dim_mult].
func (c Config) encDims() []int {
	out := []int{c.BaseDim}
	for _, m := range c.DimMult {
		out = append(out, c.BaseDim*m)
	}
	return out
}

// encLayers lists the Wan2.1 encoder's down_blocks as WanEncoder3d.__init__ builds them.
func (c Config) encLayers() []encLayer {
	dims := c.encDims()
	n := len(c.DimMult)
	var out []encLayer
	scale := 1.0
	for i := 0; i < n; i++ {
		in, o := dims[i], dims[i+1]
		for r := 0; r < c.NumResBlocks; r++ {
			out = append(out, encLayer{kind: encRes, in: in, out: o})
			for _, s := range c.AttnScales {
				if s == scale {
					out = append(out, encLayer{kind: encAttn, in: o, out: o})
					break
				}
			}
			in = o
		}
		if i != n-1 {
			mode := down2D
			if c.TemperalDownsample[i] {
				mode = down3D
			}
			out = append(out, encLayer{kind: encDown, in: o, out: o, mode: mode})
			scale /= 2
		}
	}
	return out
}

// encBlocks lists the Wan2.2 encoder's residual down blocks.
func (c Config) encBlocks() []encBlock {
	dims := c.encDims()
	n := len(c.DimMult)
	out := make([]encBlock, n)
	for i := range out {
		b := encBlock{in: dims[i], out: dims[i+1], ft: 1, fs: 1}
		if i != n-1 {
			b.down, b.mode, b.fs = true, down2D, 2
			if c.TemperalDownsample[i] {
				b.mode, b.ft = down3D, 2
			}
		}
		out[i] = b
	}
	return out
}

// declareEncoder adds the encoder's and quant_conv's parameters to s, in graph input order.
func declareEncoder(cfg Config, s *weights.Set) []*weights.Param {
	d := &declarer{s: s}
	add, conv, res, attn := d.add, d.conv, d.res, d.attn
	down := func(prefix string, c, mode int) {
		conv(prefix+".resample.1", c, c, 3, 3)
		if mode == down3D {
			conv(prefix+".time_conv", c, c, 3, 1, 1)
		}
	}
	dims := cfg.encDims()
	conv("encoder.conv_in", dims[0], cfg.InChannels, 3, 3, 3)
	if cfg.IsResidual {
		for i, b := range cfg.encBlocks() {
			in := b.in
			for j := 0; j < cfg.NumResBlocks; j++ {
				res(fmt.Sprintf("encoder.down_blocks.%d.resnets.%d", i, j), in, b.out)
				in = b.out
			}
			if b.down {
				down(fmt.Sprintf("encoder.down_blocks.%d.downsampler", i), b.out, b.mode)
			}
		}
	} else {
		for k, l := range cfg.encLayers() {
			name := fmt.Sprintf("encoder.down_blocks.%d", k)
			switch l.kind {
			case encRes:
				res(name, l.in, l.out)
			case encAttn:
				attn(name, l.out)
			case encDown:
				down(name, l.out, l.mode)
			}
		}
	}
	last := dims[len(dims)-1]
	res("encoder.mid_block.resnets.0", last, last)
	attn("encoder.mid_block.attentions.0", last)
	res("encoder.mid_block.resnets.1", last, last)
	add(s.AddF32("encoder.norm_out.gamma", last, 1, 1, 1))
	conv("encoder.conv_out", 2*cfg.ZDim, last, 3, 3, 3)
	conv("quant_conv", 2*cfg.ZDim, 2*cfg.ZDim, 1, 1, 1)
	return d.ps
}

// numEncCacheSlots counts the encoder's cached convolutions (3-tap causal convs and time convs).
func (c Config) numEncCacheSlots() int {
	n := 1 + 4 + 1 // conv_in, mid block, conv_out
	if c.IsResidual {
		for _, b := range c.encBlocks() {
			n += 2 * c.NumResBlocks
			if b.mode == down3D {
				n++
			}
		}
		return n
	}
	for _, l := range c.encLayers() {
		switch {
		case l.kind == encRes:
			n += 2
		case l.kind == encDown && l.mode == down3D:
			n++
		}
	}
	return n
}

// patchify is "b c f (h q) (w r) -> b (c r q) f h w" with q = r = p.
func patchify(x *Node, p int) *Node {
	if p <= 1 {
		return x
	}
	d := x.Shape().Dimensions
	b, c, f, h, w := d[0], d[1], d[2], d[3]/p, d[4]/p
	y := Reshape(x, b, c, f, h, p, w, p)         // b, c, f, h, q, w, r
	y = TransposeAllAxes(y, 0, 1, 6, 4, 2, 3, 5) // b, c, r, q, f, h, w
	return Reshape(y, b, c*p*p, f, h, w)
}

// downsample is WanResample's downsample2d / downsample3d: per frame, zero pad one column right and
// one row bottom and a stride-2 3×3 conv; for 3d then the time conv (kernel 3, stride 2, no padding)
// over the previous chunk's last frame and this chunk. The first chunk skips the time conv and only
// caches its last frame, as the reference does.
func (g *chunkGraph) downsample(x *Node, prefix string, mode int) *Node {
	w := g.p.Get(prefix + ".resample.1.weight")
	ws := w.Shape()
	x = convGeneral(x, Reshape(w, ws.Dim(0), ws.Dim(1), 1, ws.Dim(2), ws.Dim(3)), g.p.Get(prefix+".resample.1.bias"),
		[][2]int{{0, 0}, {0, 1}, {0, 1}}, []int{1, 2, 2})
	if mode != down3D {
		return x
	}
	t := x.Shape().Dim(2)
	last := Slice(x, AxisRange(), AxisRange(), AxisRange(t-1, t))
	if g.first {
		g.next = append(g.next, last)
		return x
	}
	full := Concatenate([]*Node{ConvertDType(g.cache[len(g.next)], x.DType()), x}, 2)
	g.next = append(g.next, last)
	return convGeneral(full, g.p.Get(prefix+".time_conv.weight"), g.p.Get(prefix+".time_conv.bias"),
		[][2]int{{0, 0}, {0, 0}, {0, 0}}, []int{2, 1, 1})
}

// avgDown3D is Wan2.2's parameter-free encoder shortcut: zero-pad time on the left to a multiple
// of ft, gather each ft×fs×fs neighbourhood into channels and average groups of consecutive
// channels down to cout.
func avgDown3D(x *Node, cout, ft, fs int) *Node {
	d := x.Shape().Dimensions
	b, cin, t, h, w := d[0], d[1], d[2], d[3], d[4]
	if pad := (ft - t%ft) % ft; pad > 0 {
		x = Concatenate([]*Node{Zeros(x.Graph(), shapes.Make(x.DType(), b, cin, pad, h, w)), x}, 2)
		t += pad
	}
	factor := ft * fs * fs
	group := cin * factor / cout
	y := Reshape(x, b, cin, t/ft, ft, h/fs, fs, w/fs, fs)
	y = TransposeAllAxes(y, 0, 1, 3, 5, 7, 2, 4, 6) // b, c, ft, fs, fs, t', h', w'
	y = Reshape(y, b, cout, group, t/ft, h/fs, w/fs)
	return ReduceMean(ConvertDType(y, dtypes.Float32), 2)
}

// encode runs the encoder and quant_conv on one chunk of pixels x [1, 3, f, H, W] (f = 1 on the
// first chunk, 4 after) and returns the posterior parameters [1, 2z, 1, H/r, W/r] in float32.
func (g *chunkGraph) encode(x *Node) *Node {
	cfg := g.cfg
	x = ConvertDType(patchify(x, cfg.patch()), g.dt)
	x = g.cachedConv(x, "encoder.conv_in")
	if cfg.IsResidual {
		for i, b := range cfg.encBlocks() {
			prefix := fmt.Sprintf("encoder.down_blocks.%d", i)
			in := x
			cur := b.in
			for j := 0; j < cfg.NumResBlocks; j++ {
				x = g.resBlock(x, fmt.Sprintf("%s.resnets.%d", prefix, j), cur, b.out)
				cur = b.out
			}
			if b.down {
				x = g.downsample(x, prefix+".downsampler", b.mode)
			}
			x = Add(x, ConvertDType(avgDown3D(in, b.out, b.ft, b.fs), x.DType()))
		}
	} else {
		for k, l := range cfg.encLayers() {
			name := fmt.Sprintf("encoder.down_blocks.%d", k)
			switch l.kind {
			case encRes:
				x = g.resBlock(x, name, l.in, l.out)
			case encAttn:
				x = g.attentionBlock(x, name)
			case encDown:
				x = g.downsample(x, name, l.mode)
			}
		}
	}
	dims := cfg.encDims()
	last := dims[len(dims)-1]
	x = g.resBlock(x, "encoder.mid_block.resnets.0", last, last)
	x = g.attentionBlock(x, "encoder.mid_block.attentions.0")
	x = g.resBlock(x, "encoder.mid_block.resnets.1", last, last)
	x = g.normAct(x, "encoder.norm_out.gamma")
	x = g.cachedConv(x, "encoder.conv_out")
	if len(g.next) != cfg.numEncCacheSlots() {
		panic(fmt.Errorf("wan: internal error: the encoder graph used %d cache slots, the config counts %d", len(g.next), cfg.numEncCacheSlots()))
	}
	x = conv3d(x, g.p.Get("quant_conv.weight"), g.p.Get("quant_conv.bias"))
	return ConvertDType(x, dtypes.Float32)
}

// Encode maps a video [1, 3, F, H, W] with values in [-1, 1] (F = 4n+1; H, W multiples of the
// spatial ratio) to the posterior of AutoencoderKLWan.encode: mean and log-variance, each
// [1, z, 1+n, H/r, W/r] in VAE space (not normalized; the log-variance clamped to [−30, 20] as the
// reference's DiagonalGaussianDistribution holds it). Frames are encoded like the reference, the
// first alone and then 4 at a time, each causal conv carrying its cache. It needs a decoder built
// with Options.Encoder.
func (d *Decoder) Encode(ctx context.Context, video []float32, shape []int) (mean, logvar []float32, latentShape []int, err error) {
	ctx, unlock, err := d.guard.LockContext(ctx, "wan: Encode called after Close")
	if err != nil {
		return nil, nil, nil, err
	}
	defer unlock()
	if !d.opts.Encoder {
		return nil, nil, nil, errors.New("wan: Encode needs the encoder weights; build the decoder with Options{Encoder: true}")
	}
	cfg := d.cfg
	pc, r, tr := cfg.PixelChannels(), cfg.SpatialRatio(), cfg.TemporalRatio()
	s := shape
	if len(s) == 5 && s[0] == 1 {
		s = s[1:]
	}
	if len(s) != 4 || s[0] != pc || s[1] < 1 || (s[1]-1)%tr != 0 || s[2] <= 0 || s[3] <= 0 || s[2]%r != 0 || s[3]%r != 0 {
		return nil, nil, nil, fmt.Errorf("wan: video shape %v must be [1, %d, %d·n+1, H, W] with H and W positive multiples of %d", shape, pc, tr, r)
	}
	nf, hh, ww := s[1], s[2], s[3]
	if len(video) != pc*nf*hh*ww {
		return nil, nil, nil, fmt.Errorf("wan: video shape %v holds %d values, the slice has %d", shape, pc*nf*hh*ww, len(video))
	}
	nl, h, w := (nf-1)/tr+1, hh/r, ww/r
	z := cfg.ZDim
	plane := h * w
	mean = make([]float32, z*nl*plane)
	logvar = make([]float32, z*nl*plane)
	var caches []*tensors.Tensor
	defer func() { graphexec.Finalize(caches...) }()
	for k := 0; k < nl; k++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
		f0, fn := 0, 1
		if k > 0 {
			f0, fn = 1+tr*(k-1), tr
		}
		exec, err := d.exec(execKey{first: k == 0, enc: true})
		if err != nil {
			return nil, nil, nil, err
		}
		chunk := make([]float32, pc*fn*hh*ww)
		for c := 0; c < pc; c++ {
			copy(chunk[c*fn*hh*ww:(c+1)*fn*hh*ww], video[(c*nf+f0)*hh*ww:(c*nf+f0+fn)*hh*ww])
		}
		xt := tensors.FromFlatDataAndDimensions(chunk, 1, pc, fn, hh, ww)
		args := graphexec.ParamArgs([]any{xt}, d.encParams...)
		outs, err := graphexec.Call(exec, graphexec.Args(args, caches...)...)
		xt.FinalizeAll()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("wan: encoding frames %d..%d: %w", f0, f0+fn-1, err)
		}
		graphexec.Finalize(caches...)
		caches = outs[1:]
		post, err := tensors.CopyFlatData[float32](outs[0])
		outs[0].FinalizeAll()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("wan: reading the posterior: %w", err)
		}
		for c := 0; c < z; c++ {
			copy(mean[(c*nl+k)*plane:(c*nl+k+1)*plane], post[c*plane:(c+1)*plane])
			lv := logvar[(c*nl+k)*plane : (c*nl+k+1)*plane]
			for i, v := range post[(z+c)*plane : (z+c+1)*plane] {
				lv[i] = min(max(v, -30), 20)
			}
		}
	}
	return mean, logvar, []int{1, z, nl, h, w}, nil
}
