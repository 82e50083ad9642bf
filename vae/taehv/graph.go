package taehv

import (
	"strconv"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors/images"

	"fastvideo/internal/graphexec"
)

// relu is nn.ReLU.
func relu(x *Node) *Node { return MaxScalar(x, 0) }

// chunkGraph builds upstream's apply_model_with_memblocks_parallel over one chunk of latent frames
// (the frames are the batch axis of every 2-D conv). Each MemBlock's past is its input shifted one
// frame later: the frame before the chunk comes from mem (the previous chunk's last input of that
// block), or zeros on the first chunk, as upstream pads with zeros at t = 0.
type chunkGraph struct {
	cfg  Config
	dt   dtypes.DType
	p    graphexec.Bound
	mem  []*Node // incoming memories [1, n, H, W], one per MemBlock (nil: first chunk)
	next []*Node // outgoing memories, in MemBlock order
	keep []int   // the raw frames to output, ascending (nil: all)
	rgb  bool    // output interleaved 8-bit RGB [n, H, W, 3] instead of [3, n, H, W] in [0, 1]
	taps map[int]*Node
}

func (g *chunkGraph) tap(layer int, x *Node) {
	if g.taps != nil {
		g.taps[layer] = x
	}
}

func (g *chunkGraph) w(name string) *Node { return g.p.Get(name) }

// conv is nn.Conv2d with padding k/2 on [N, Cin, H, W] and an OIHW weight; b may be nil. On the
// pure-Go backend, whose direct convolution walks every output pixel, it is one matrix product
// instead (convMatmul: ~30x faster there; the same sums in another order).
func conv(x, w, b *Node) *Node {
	k := w.Shape().Dim(2)
	var y *Node
	if x.Graph().Backend().String() == "go" {
		y = convMatmul(x, w)
	} else {
		y = Convolve(x, w).ChannelsAxis(images.ChannelsFirst).PaddingPerDim([][2]int{{k / 2, k / 2}, {k / 2, k / 2}}).Done()
	}
	if b != nil {
		y = Add(y, Reshape(b, 1, b.Shape().Dim(0), 1, 1))
	}
	return y
}

// convMatmul is the stride-1 k×k convolution with padding k/2 of x [N, C, H, W] by w [O, C, k, k] as
// one matrix product (im2col): the k² shifted windows of the padded input side by side on the
// channel axis, offset-major, against the weight reordered to [O, ky, kx, C].
func convMatmul(x, w *Node) *Node {
	d, o, k := x.Shape().Dimensions, w.Shape().Dim(0), w.Shape().Dim(2)
	c, h, wd := d[1], d[2], d[3]
	cols := x
	if k > 1 {
		pad := compute.PadAxis{Start: k / 2, End: k / 2}
		p := Pad(x, ScalarZero(x.Graph(), x.DType()), compute.PadAxis{}, compute.PadAxis{}, pad, pad)
		windows := make([]*Node, 0, k*k)
		for ky := range k {
			for kx := range k {
				windows = append(windows, Slice(p, AxisRange(), AxisRange(), AxisRange(ky, ky+h), AxisRange(kx, kx+wd)))
			}
		}
		cols = Concatenate(windows, 1)
	}
	wm := Reshape(TransposeAllDims(w, 0, 2, 3, 1), o, k*k*c)
	y := DotGeneral(cols, []int{1}, nil, wm, []int{1}, nil) // [N, H, W, O]
	return TransposeAllDims(y, 0, 3, 1, 2)
}

// memBlock is MemBlock(n, n) at layer l: ReLU(conv.4(ReLU(conv.2(ReLU(conv.0(cat[x, past]))))) + x).
func (g *chunkGraph) memBlock(x *Node, l int) *Node {
	i := len(g.next)
	nt := x.Shape().Dim(0)
	var prev *Node
	if g.mem == nil {
		d := x.Shape().Clone().Dimensions
		d[0] = 1
		prev = Zeros(x.Graph(), shapes.Make(x.DType(), d...))
	} else {
		prev = g.mem[i]
	}
	past := prev
	if nt > 1 {
		past = Concatenate([]*Node{prev, Slice(x, AxisRange(0, nt-1))}, 0)
	}
	g.next = append(g.next, Slice(x, AxisRange(nt-1, nt)))
	return memBlockApply(x, past, g.p, "decoder."+strconv.Itoa(l)+".conv.")
}

// memBlockApply is MemBlock.forward(x, past) with the weights under prefix (…".conv.").
func memBlockApply(x, past *Node, p graphexec.Bound, prefix string) *Node {
	y := relu(conv(Concatenate([]*Node{x, past}, 1), p.Get(prefix+"0.weight"), p.Get(prefix+"0.bias")))
	y = relu(conv(y, p.Get(prefix+"2.weight"), p.Get(prefix+"2.bias")))
	y = conv(y, p.Get(prefix+"4.weight"), p.Get(prefix+"4.bias"))
	return relu(Add(y, x))
}

// convStride2 is nn.Conv2d(k=3, stride=2, padding=1, bias=False).
func convStride2(x, w *Node) *Node {
	return Convolve(x, w).ChannelsAxis(images.ChannelsFirst).StridePerAxis(2, 2).PaddingPerDim([][2]int{{1, 1}, {1, 1}}).Done()
}

// upsample2x is nn.Upsample(scale_factor=2) (nearest) on [N, C, H, W].
func upsample2x(x *Node) *Node {
	d := x.Shape().Dimensions
	n, c, h, w := d[0], d[1], d[2], d[3]
	y := BroadcastToDims(Reshape(x, n, c, h, 1, w, 1), n, c, h, 2, w, 2)
	return Reshape(y, n, c, 2*h, 2*w)
}

// tgrow is TGrow(n, s) at layer l: a 1×1 conv n→n·s, then frame t's channel block j becomes frame
// t·s+j (upstream's reshape(-1, C, H, W)).
func (g *chunkGraph) tgrow(x *Node, l int) *Node {
	d := x.Shape().Dimensions
	y := conv(x, g.w("decoder."+strconv.Itoa(l)+".conv.weight"), nil)
	s := y.Shape().Dim(1) / d[1]
	return Reshape(y, d[0]*s, d[1], d[2], d[3])
}

// decode runs the decoder on latents [C, t, h, w] and returns pixels [3, len(keep), H, W] in [0, 1],
// in the decoder's dtype: the frames upstream keeps are picked on the device, so the host receives
// (and copies) only those, and a half dtype's pixels are exact in it (upstream's output dtype).
func (g *chunkGraph) decode(z *Node) *Node {
	x := ConvertDType(TransposeAllAxes(z, 1, 0, 2, 3), g.dt) // [t, C, h, w]
	x = MulScalar(Tanh(DivScalar(x, 3)), 3)                  // 0: Clamp
	x = relu(conv(x, g.w("decoder.1.weight"), g.w("decoder.1.bias")))
	mb := 0
	for s, tg := range tgrowLayers {
		for range 3 {
			x = g.memBlock(x, memLayers[mb].layer)
			mb++
		}
		g.tap(tg.layer-2, x)
		x = g.tgrow(upsample2x(x), tg.layer)
		g.tap(tg.layer, x)
		x = conv(x, g.w("decoder."+strconv.Itoa(tg.layer+1)+".weight"), nil)
		if s == 2 {
			x = relu(x) // 21
		}
	}
	x = conv(x, g.w("decoder.22.weight"), g.w("decoder.22.bias"))
	g.tap(22, x)
	x = pickFrames(x, g.keep)
	if g.rgb {
		return rgb24(x, g.cfg.PatchSize)
	}
	return pixelShuffle(x, g.cfg.PatchSize)
}

// pickFrames is x [N, …] restricted to frames keep (ascending; nil: all), a slice per run of
// consecutive frames.
func pickFrames(x *Node, keep []int) *Node {
	if keep == nil {
		return x
	}
	var runs []*Node
	for i := 0; i < len(keep); {
		j := i + 1
		for j < len(keep) && keep[j] == keep[j-1]+1 {
			j++
		}
		runs = append(runs, Slice(x, AxisRange(keep[i], keep[j-1]+1)))
		i = j
	}
	if len(runs) == 1 {
		return runs[0]
	}
	return Concatenate(runs, 0)
}

// rgb24 is pixelShuffle's frames as interleaved 8-bit RGB [N, H·p, W·p, 3] (ffmpeg's rgb24), quantized
// as media.Quantize does: x·255 in float32, NaN and negatives to 0, then truncated toward zero and
// saturated at 255 (XLA's float-to-integer conversion truncates). A quarter of the float32 frames'
// bytes to move to the host, and no host pass over every value.
func rgb24(x *Node, p int) *Node {
	d := x.Shape().Dimensions
	n, h, w := d[0], d[2], d[3]
	y := Reshape(ConvertDType(x, dtypes.Float32), n, 3, p, p, h, w)
	y = TransposeAllAxes(y, 0, 4, 2, 5, 3, 1) // [n, h, p, w, p, 3]
	v := MulScalar(Reshape(y, n, h*p, w*p, 3), 255)
	v = Where(GreaterThan(v, ZerosLike(v)), v, ZerosLike(v)) // NaN > 0 is false
	return ConvertDType(MinScalar(v, 255), dtypes.Uint8)
}

// pixelShuffle is F.pixel_shuffle(p) then clamp to [0, 1], laid out [3, N, H·p, W·p]:
// out[c, n, h·p+i, w·p+j] = in[n, c·p²+i·p+j, h, w].
func pixelShuffle(x *Node, p int) *Node {
	d := x.Shape().Dimensions
	n, h, w := d[0], d[2], d[3]
	y := Reshape(x, n, 3, p, p, h, w)
	y = TransposeAllAxes(y, 1, 0, 4, 2, 5, 3) // [3, n, h, p, w, p]
	return ClipScalar(Reshape(y, 3, n, h*p, w*p), 0, 1)
}
