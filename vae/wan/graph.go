package wan

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors/images"

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/nn"
)

// chunkGraph builds the decoder for one latent frame (one temporal chunk).
//
// Feature cache: every causal convolution with a 3-frame kernel sees its input prefixed by the
// last two frames of the input it saw on earlier chunks, and hands the last two frames of
// (prefix ++ input) on to the next chunk. On the first chunk the prefix is two zero frames, which
// is exactly the reference's zero padding; a zero cache frame also stands for the reference keeping
// only one frame (its next conv pads the missing frame with zeros), so every cache here is always
// two frames and all chunks after the first share one graph.
//
// The time upsampler of an up3d block is the exception the reference marks with its "Rep"
// sentinel: on the first chunk it is skipped (one frame in, one frame out) and its cache stays two
// zero frames; from the second chunk on it runs like any cached conv, so its first real call sees
// zero padding, not chunk 0. The DupUp3D shortcut drops its first ft−1 frames on the first chunk to
// match.
type chunkGraph struct {
	cfg   Config
	dt    dtypes.DType // weight / activation dtype; norms, softmax and the output are float32
	first bool
	p     graphexec.Bound
	cache []*Node // the caches coming in (nil on the first chunk)
	next  []*Node // the caches going out, in slot order
	taps  map[string]*Node
}

func (g *chunkGraph) tap(name string, n *Node) {
	if g.taps != nil {
		g.taps[name] = n
	}
}

// conv3d is torch's Conv3d on [B, Cin, T, H, W] with a [Cout, Cin, kt, kh, kw] weight, no time
// padding (the caller prefixes frames) and symmetric spatial padding kh/2, kw/2.
func conv3d(x, w, b *Node) *Node {
	kh, kw := w.Shape().Dim(3), w.Shape().Dim(4)
	return convGeneral(x, w, b, [][2]int{{0, 0}, {kh / 2, kh / 2}, {kw / 2, kw / 2}}, nil)
}

// convGeneral is a channels-first Conv3d with explicit padding per axis and optional strides.
func convGeneral(x, w, b *Node, pad [][2]int, strides []int) *Node {
	x = ConvertDType(x, w.DType())
	c := Convolve(x, w).ChannelsAxis(images.ChannelsFirst).PaddingPerDim(pad)
	if strides != nil {
		c = c.StridePerAxis(strides...)
	}
	y := c.Done()
	if b != nil {
		y = Add(y, Reshape(ConvertDType(b, y.DType()), 1, b.Shape().Dim(0), 1, 1, 1))
	}
	return y
}

// cachedConv is a WanCausalConv3d with kernel depth 3 and its feature-cache slot.
func (g *chunkGraph) cachedConv(x *Node, name string) *Node {
	slot := len(g.next)
	var prefix *Node
	if g.first {
		d := x.Shape().Clone().Dimensions
		d[2] = 2
		prefix = Zeros(x.Graph(), shapes.Make(x.DType(), d...))
	} else {
		prefix = ConvertDType(g.cache[slot], x.DType())
	}
	full := Concatenate([]*Node{prefix, x}, 2)
	t := full.Shape().Dim(2)
	g.next = append(g.next, Slice(full, AxisRange(), AxisRange(), AxisRange(t-2, t)))
	return conv3d(full, g.p.Get(name+".weight"), g.p.Get(name+".bias"))
}

// rmsNorm is WanRMS_norm over the channel axis 1: x / max(‖x‖₂, 1e-12) · √C · γ, in float32.
// The result is float32.
func rmsNorm(x, gamma *Node) *Node {
	c := x.Shape().Dim(1)
	xf := ConvertDType(x, dtypes.Float32)
	norm := Sqrt(ReduceAndKeep(Square(xf), ReduceSum, 1))
	y := Div(xf, MaxScalar(norm, 1e-12))
	y = MulScalar(y, math.Sqrt(float64(c)))
	dims := make([]int, x.Rank())
	for i := range dims {
		dims[i] = 1
	}
	dims[1] = c
	return Mul(y, Reshape(ConvertDType(gamma, dtypes.Float32), dims...))
}

// normAct is RMS norm then SiLU, computed in float32 and handed on in the compute dtype.
func (g *chunkGraph) normAct(x *Node, gammaName string) *Node {
	return ConvertDType(nn.SiLU(rmsNorm(x, g.p.Get(gammaName))), g.dt)
}

// resBlock is WanResidualBlock: conv2(act(norm2(conv1(act(norm1(x)))))) + shortcut(x).
func (g *chunkGraph) resBlock(x *Node, prefix string, in, out int) *Node {
	h := x
	if in != out {
		h = conv3d(x, g.p.Get(prefix+".conv_shortcut.weight"), g.p.Get(prefix+".conv_shortcut.bias"))
	}
	y := g.cachedConv(g.normAct(x, prefix+".norm1.gamma"), prefix+".conv1")
	y = g.cachedConv(g.normAct(y, prefix+".norm2.gamma"), prefix+".conv2")
	return Add(y, h)
}

// attentionBlock is WanAttentionBlock: per frame, single-head self-attention over the H·W
// positions (scale 1/√C) of the RMS-normed input, then a 1×1 projection and the residual.
func (g *chunkGraph) attentionBlock(x *Node, prefix string) *Node {
	c, t, h, w := x.Shape().Dim(1), x.Shape().Dim(2), x.Shape().Dim(3), x.Shape().Dim(4)
	xn := ConvertDType(rmsNorm(x, g.p.Get(prefix+".norm.gamma")), g.dt)
	tok := Reshape(TransposeAllAxes(xn, 0, 2, 3, 4, 1), t, h*w, c) // frames are the batch
	qkv := nn.LinearF32(tok, Reshape(g.p.Get(prefix+".to_qkv.weight"), 3*c, c), g.p.Get(prefix+".to_qkv.bias"))
	part := func(i int) *Node {
		return Reshape(Slice(qkv, AxisRange(), AxisRange(), AxisRange(i*c, (i+1)*c)), t, h*w, 1, c)
	}
	// The exact path: the fused kernel takes head widths up to 256, these heads are C wide (384, 1024).
	o := attention.Exact(part(0), part(1), part(2), 1/math.Sqrt(float64(c)))
	o = nn.LinearF32(Reshape(o, t, h*w, c), Reshape(g.p.Get(prefix+".proj.weight"), c, c), g.p.Get(prefix+".proj.bias"))
	o = TransposeAllAxes(Reshape(o, 1, t, h, w, c), 0, 4, 1, 2, 3)
	return Add(x, ConvertDType(o, x.DType()))
}

// timeConv is the up3d upsampler's causal time conv (C → 2C, kernel (3,1,1)) with its cache slot;
// output channel halves [0:C] and [C:2C] become frames 2τ and 2τ+1. On the first chunk it is
// skipped and its cache starts as zeros.
func (g *chunkGraph) timeConv(x *Node, name string) *Node {
	if g.first {
		d := x.Shape().Clone().Dimensions
		d[2] = 2
		g.next = append(g.next, Zeros(x.Graph(), shapes.Make(x.DType(), d...)))
		return x
	}
	y := g.cachedConv(x, name)
	c, t, h, w := x.Shape().Dim(1), x.Shape().Dim(2), x.Shape().Dim(3), x.Shape().Dim(4)
	y = TransposeAllAxes(Reshape(y, 1, 2, c, t, h, w), 0, 2, 3, 1, 4, 5)
	return Reshape(y, 1, c, 2*t, h, w)
}

// upsample2x is nearest-neighbour 2× in H and W (nearest-exact at scale 2 is plain nearest).
func upsample2x(x *Node) *Node {
	d := x.Shape().Dimensions
	b, c, t, h, w := d[0], d[1], d[2], d[3], d[4]
	y := BroadcastToDims(Reshape(x, b, c, t, h, 1, w, 1), b, c, t, h, 2, w, 2)
	return Reshape(y, b, c, t, 2*h, 2*w)
}

// resample is WanResample's upsample2d / upsample3d: [time conv], nearest 2×, per-frame 3×3 conv.
func (g *chunkGraph) resample(x *Node, prefix string, mode int) *Node {
	if mode == up3D {
		x = g.timeConv(x, prefix+".time_conv")
	}
	x = upsample2x(x)
	w := g.p.Get(prefix + ".resample.1.weight") // Conv2d [Cout, Cin, 3, 3] as a depth-1 Conv3d
	ws := w.Shape()
	return conv3d(x, Reshape(w, ws.Dim(0), ws.Dim(1), 1, ws.Dim(2), ws.Dim(3)), g.p.Get(prefix+".resample.1.bias"))
}

// dupUp3D is Wan2.2's parameter-free shortcut: each input channel repeated, the repeats laid out
// as (cout, ft, fs, fs) and scattered into time and space; the first chunk drops ft−1 frames.
func (g *chunkGraph) dupUp3D(x *Node, cout, ft int) *Node {
	const fs = 2
	d := x.Shape().Dimensions
	b, cin, t, h, w := d[0], d[1], d[2], d[3], d[4]
	repeats := cout * ft * fs * fs / cin
	y := BroadcastToDims(Reshape(x, b, cin, 1, t, h, w), b, cin, repeats, t, h, w)
	y = Reshape(y, b, cout, ft, fs, fs, t, h, w)
	y = TransposeAllAxes(y, 0, 1, 5, 2, 6, 3, 7, 4) // b, cout, t, ft, h, fs, w, fs
	y = Reshape(y, b, cout, t*ft, h*fs, w*fs)
	if g.first && ft > 1 {
		y = Slice(y, AxisRange(), AxisRange(), AxisRange(ft-1, t*ft))
	}
	return y
}

// unpatchify is "b (c r q) f h w -> b c f (h q) (w r)" with q = r = p.
func unpatchify(x *Node, p int) *Node {
	if p <= 1 {
		return x
	}
	d := x.Shape().Dimensions
	b, ch, f, h, w := d[0], d[1], d[2], d[3], d[4]
	c := ch / (p * p)
	y := Reshape(x, b, c, p, p, f, h, w)         // b, c, r, q, f, h, w
	y = TransposeAllAxes(y, 0, 1, 4, 5, 3, 6, 2) // b, c, f, h, q, w, r
	return Reshape(y, b, c, f, h*p, w*p)
}

// decode runs post_quant_conv and the decoder on one latent frame z [1, z, 1, h, w] and returns
// the clamped pixels [1, 3, frames, H, W] in float32.
func (g *chunkGraph) decode(z *Node) *Node {
	cfg := g.cfg
	x := conv3d(ConvertDType(z, g.dt), g.p.Get("post_quant_conv.weight"), g.p.Get("post_quant_conv.bias"))
	g.tap("post_quant_conv", x)
	x = g.cachedConv(x, "decoder.conv_in")
	dims := cfg.dims()
	x = g.resBlock(x, "decoder.mid_block.resnets.0", dims[0], dims[0])
	x = g.attentionBlock(x, "decoder.mid_block.attentions.0")
	x = g.resBlock(x, "decoder.mid_block.resnets.1", dims[0], dims[0])
	for i, b := range cfg.upBlocks() {
		prefix := fmt.Sprintf("decoder.up_blocks.%d", i)
		in := x
		cur := b.in
		for j := 0; j <= cfg.NumResBlocks; j++ {
			x = g.resBlock(x, fmt.Sprintf("%s.resnets.%d", prefix, j), cur, b.out)
			cur = b.out
		}
		if b.mode != upNone {
			x = g.resample(x, upsamplerPrefix(cfg, prefix), b.mode)
		}
		if b.shortcut {
			x = Add(x, g.dupUp3D(in, b.out, b.ft))
		}
	}
	x = g.normAct(x, "decoder.norm_out.gamma")
	x = g.cachedConv(x, "decoder.conv_out")
	if len(g.next) != cfg.numCacheSlots() {
		panic(fmt.Errorf("wan: internal error: the graph used %d cache slots, the config counts %d", len(g.next), cfg.numCacheSlots()))
	}
	x = ConvertDType(x, dtypes.Float32)
	g.tap("decoder", x)
	return ClipScalar(unpatchify(x, cfg.patch()), -1, 1)
}

// upsamplerPrefix is where an up block's WanResample lives: Wan2.1's WanUpBlock keeps it in a
// ModuleList ("upsamplers.0"), Wan2.2's WanResidualUpBlock as "upsampler".
func upsamplerPrefix(cfg Config, block string) string {
	if cfg.IsResidual {
		return block + ".upsampler"
	}
	return block + ".upsamplers.0"
}
