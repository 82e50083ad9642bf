package rife

import (
	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
)

// The graph is NHWC ([N, H, W, C]): the warp gathers whole pixels, and the MLX port (the released
// weights' layout) is NHWC too. Kernels stay in the checkpoint's layout; the convolution's axis
// configuration reads them in place.

// layer is one convolution's weights inside a graph build.
type layer struct {
	c          conv
	w, b, beta *Node
}

// apply runs the convolution: stride 2 and padding 1 for the 3x3 ones named by stride, the
// transposed 4x4 ones as upstream's ConvTranspose2d(k=4, s=2, p=1), each plus its bias. matmul
// lowers it to matrix products (for the pure-Go backend, whose direct convolution walks every output
// element through a generic index iterator: 0.8 s a tiny 128x128 pair); accelerators keep the
// convolution op, which their libraries implement best.
func (ly layer) apply(x *Node, l Layout, stride int, matmul bool) *Node {
	axes := compute.ConvolveAxesConfig{
		InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
		OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2},
	}
	w := ConvertDType(ly.w, x.DType())
	switch {
	case l == MLX: // [out, kh, kw, in] for both kinds (mlx.nn.ConvTranspose2d keeps PyTorch's semantics)
		axes.KernelOutputChannels, axes.KernelSpatial, axes.KernelInputChannels = 0, []int{1, 2}, 3
	case ly.c.transposed: // PyTorch ConvTranspose2d [in, out, kh, kw]
		axes.KernelInputChannels, axes.KernelOutputChannels, axes.KernelSpatial = 0, 1, []int{2, 3}
	default: // PyTorch Conv2d [out, in, kh, kw]
		axes.KernelOutputChannels, axes.KernelInputChannels, axes.KernelSpatial = 0, 1, []int{2, 3}
	}
	var y *Node
	switch {
	case matmul:
		// [kh, kw, in, out], whatever the checkpoint's layout.
		hwio := TransposeAllAxes(w, axes.KernelSpatial[0], axes.KernelSpatial[1], axes.KernelInputChannels, axes.KernelOutputChannels)
		if ly.c.transposed {
			y = transposedConvMatmul(x, hwio)
		} else {
			y = convMatmul(x, hwio, stride)
		}
	case ly.c.transposed:
		// A transposed convolution is the convolution of the input dilated by the stride, padded by
		// k-1-p, with the spatially flipped kernel: (H-1)*2 - 2 + 4 = 2H.
		pad := ly.c.k - 1 - 1
		y = ConvGeneral(x, Reverse(w, axes.KernelSpatial...), axes, []int{1, 1},
			[][2]int{{pad, pad}, {pad, pad}}, []int{2, 2}, nil, 1, 1)
	default:
		y = ConvGeneral(x, w, axes, []int{stride, stride}, [][2]int{{1, 1}, {1, 1}}, nil, nil, 1, 1)
	}
	return Add(y, Reshape(ConvertDType(ly.b, y.DType()), 1, 1, 1, ly.c.out))
}

// padSpatial zero-pads x [N,H,W,C] by one pixel on every side.
func padSpatial(x *Node) *Node {
	one := compute.PadAxis{Start: 1, End: 1}
	return Pad(x, ScalarZero(x.Graph(), x.DType()), compute.PadAxis{}, one, one, compute.PadAxis{})
}

// taps is one matrix product over the shifted windows of the padded input p: window i samples
// p[oy + stride*r, ox + stride*c] for the h x w output pixels (r, c), weighted by the kernel slice
// hwio[ky, kx] [in, out] of offset i; the windows sit side by side on the channel axis.
func taps(p, hwio *Node, stride, h, w int, offsets, kernel [][2]int) *Node {
	windows := make([]*Node, len(offsets))
	kernels := make([]*Node, len(offsets))
	for i, o := range offsets {
		rows := AxisRange(o[0], o[0]+stride*(h-1)+1).Stride(stride)
		cols := AxisRange(o[1], o[1]+stride*(w-1)+1).Stride(stride)
		windows[i] = Slice(p, AxisRange(), rows, cols, AxisRange())
		kernels[i] = Squeeze(Slice(hwio, AxisElem(kernel[i][0]), AxisElem(kernel[i][1]), AxisRange(), AxisRange()), 0, 1)
	}
	return DotGeneral(Concatenate(windows, 3), []int{3}, nil, Concatenate(kernels, 0), []int{0}, nil)
}

// convMatmul is the 3x3 convolution with padding 1 at the given stride as one matrix product
// (im2col): offset (ky, kx) of the padded input meets kernel tap (ky, kx).
func convMatmul(x, hwio *Node, stride int) *Node {
	d := x.Shape().Dimensions
	h, w := (d[1]-1)/stride+1, (d[2]-1)/stride+1
	var offsets [][2]int
	for ky := range 3 {
		for kx := range 3 {
			offsets = append(offsets, [2]int{ky, kx})
		}
	}
	return taps(padSpatial(x), hwio, stride, h, w, offsets, offsets)
}

// transposedConvMatmul is ConvTranspose2d(k=4, s=2, p=1) as four matrix products, one per output
// phase: output row 2i+a takes input rows i+o-1 for o in {a, a+1} with kernel row 3+a-2o (and
// likewise for columns), i.e. offsets o of the input padded by one; the phases are then
// interleaved into the doubled frame.
func transposedConvMatmul(x, hwio *Node) *Node {
	d := x.Shape().Dimensions
	n, h, w := d[0], d[1], d[2]
	p := padSpatial(x)
	phases := make([]*Node, 0, 4)
	for a := range 2 {
		for b := range 2 {
			var offsets, kernel [][2]int
			for oy := a; oy <= a+1; oy++ {
				for ox := b; ox <= b+1; ox++ {
					offsets = append(offsets, [2]int{oy, ox})
					kernel = append(kernel, [2]int{3 + a - 2*oy, 3 + b - 2*ox})
				}
			}
			phases = append(phases, taps(p, hwio, 1, h, w, offsets, kernel))
		}
	}
	out := phases[0].Shape().Dimensions[3]
	y := Reshape(Stack(phases, 3), n, h, w, 2, 2, out) // phase (a, b) at axes 3, 4
	y = TransposeAllAxes(y, 0, 1, 3, 2, 4, 5)
	return Reshape(y, n, 2*h, 2*w, out)
}

// leakyReLU is LeakyReLU(0.2): max(x, 0.2x) for a slope below 1.
func leakyReLU(x *Node) *Node { return Max(x, MulScalar(x, slope)) }

// pixelShuffle is PyTorch's PixelShuffle(r) in NHWC: channel c*r*r + i*r + j of pixel (h, w) goes
// to channel c of pixel (h*r+i, w*r+j) (fastvideo/third_party/rife_mlx/ops/spatial.py).
func pixelShuffle(x *Node, r int) *Node {
	d := x.Shape().Dimensions
	n, h, w, c := d[0], d[1], d[2], d[3]/(r*r)
	y := Reshape(x, n, h, w, c, r, r)
	y = TransposeAllAxes(y, 0, 1, 4, 2, 5, 3)
	return Reshape(y, n, h*r, w*r, c)
}

// resize is F.interpolate(x, scale_factor, mode="bilinear", align_corners=False) on both spatial
// axes for an integer factor: down by s when down, else up by s. Sizes are multiples of the factor
// (the frame is padded to 64), so PyTorch's scale and the size ratio agree.
func resize(x *Node, s int, down bool) *Node {
	if s == 1 {
		return x
	}
	for _, axis := range []int{1, 2} {
		if down {
			x = downsample(x, axis, s)
		} else {
			x = upsample(x, axis, s)
		}
	}
	return x
}

// downsample: output d samples source s*d + (s-1)/2, i.e. the mean of the two middle pixels of
// each group of s for an even s, the middle pixel for an odd one.
func downsample(x *Node, axis, s int) *Node {
	d := x.Shape().Dimensions
	split := append(append(append([]int(nil), d[:axis]...), d[axis]/s, s), d[axis+1:]...)
	g := Reshape(x, split...)
	pick := func(i int) *Node {
		spec := make([]SliceAxisSpec, len(split))
		for k := range spec {
			spec[k] = AxisRange()
		}
		spec[axis+1] = AxisElem(i)
		return Squeeze(Slice(g, spec...), axis+1)
	}
	if s%2 == 1 {
		return pick((s - 1) / 2)
	}
	return MulScalar(Add(pick(s/2-1), pick(s/2)), 0.5)
}

// upsample: output s*i + k samples source i + (k+0.5)/s - 0.5, between pixels i-1 and i or i and
// i+1, clamped at the borders (PyTorch clamps a negative source to 0 and the upper neighbor to the
// last pixel: the edge-replicated neighbors below give the same values).
func upsample(x *Node, axis, s int) *Node {
	n := x.Shape().Dimensions[axis]
	edge := func(i int) *Node { return SliceAxis(x, axis, AxisRange(i, i+1)) }
	padded := Concatenate([]*Node{edge(0), x, edge(n - 1)}, axis)
	prev := SliceAxis(padded, axis, AxisRange(0, n))
	next := SliceAxis(padded, axis, AxisRange(2, n+2))
	phases := make([]*Node, s)
	for k := range s {
		frac := (float64(k)+0.5)/float64(s) - 0.5
		if frac < 0 {
			phases[k] = Add(MulScalar(prev, -frac), MulScalar(x, 1+frac))
		} else {
			phases[k] = Add(MulScalar(x, 1-frac), MulScalar(next, frac))
		}
	}
	y := Stack(phases, axis+1)
	d := x.Shape().Dimensions
	out := append([]int(nil), d...)
	out[axis] = n * s
	return Reshape(y, out...)
}

// linspace is torch.linspace(-1, 1, n) in float32 as PyTorch computes it: the first half from the
// start, the second half from the end (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp).
func linspace(n int) []float32 {
	out := make([]float32, n)
	if n == 1 {
		out[0] = -1
		return out
	}
	step := float32(2) / float32(n-1)
	half := n / 2
	for i := range n {
		if i < half {
			out[i] = -1 + step*float32(i)
		} else {
			out[i] = 1 - step*float32(n-1-i)
		}
	}
	return out
}

// warp is upstream's backward warp (vsrife/warplayer.py): grid_sample(input, grid + flow/((size-1)/2),
// bilinear, padding_mode="border", align_corners=True), in float32, the result in input's dtype.
// input [N,H,W,C], flow [N,H,W,2] (x then y, in pixels).
func warp(input, flow *Node) *Node {
	g := input.Graph()
	d := input.Shape().Dimensions
	n, h, w, c := d[0], d[1], d[2], d[3]
	f := ConvertDType(flow, dtypes.Float32)
	coord := func(axis, size int, grid []float32) *Node {
		fl := Squeeze(SliceAxis(f, 3, AxisElem(axis)), 3)
		shape := []int{1, 1, 1}
		shape[2-axis] = size // x varies along W (axis 2), y along H (axis 1)
		gr := Reshape(Const(g, grid), shape...)
		gc := Add(gr, DivScalar(fl, (float64(size)-1)/2))
		// grid_sampler_unnormalize(align_corners) then clip_coordinates (border).
		return ClipScalar(MulScalar(DivScalar(AddScalar(gc, 1), 2), float64(size-1)), 0, float64(size-1))
	}
	ix, iy := coord(0, w, linspace(w)), coord(1, h, linspace(h))
	x0, y0 := Floor(ix), Floor(iy)
	wx1, wy1 := Sub(ix, x0), Sub(iy, y0)
	wx0, wy0 := OneMinus(wx1), OneMinus(wy1)
	xi0, yi0 := ConvertDType(x0, dtypes.Int32), ConvertDType(y0, dtypes.Int32)
	xi1 := MinScalar(AddScalar(xi0, 1), float64(w-1))
	yi1 := MinScalar(AddScalar(yi0, 1), float64(h-1))
	base := MulScalar(Iota(g, shapes.Make(dtypes.Int32, n, 1, 1), 0), float64(h*w))
	idx := func(yi, xi *Node) *Node { return Add(Add(base, MulScalar(yi, float64(w))), xi) }
	corners := Stack([]*Node{idx(yi0, xi0), idx(yi0, xi1), idx(yi1, xi0), idx(yi1, xi1)}, 3) // [N,H,W,4]
	table := Reshape(ConvertDType(input, dtypes.Float32), n*h*w, c)
	v := Gather(table, ExpandAxes(corners, -1)) // [N,H,W,4,C]
	wts := Stack([]*Node{Mul(wy0, wx0), Mul(wy0, wx1), Mul(wy1, wx0), Mul(wy1, wx1)}, 3)
	out := ReduceSum(Mul(v, ExpandAxes(wts, -1)), 3)
	return ConvertDType(out, input.DType())
}
