package rife

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// The graph's building blocks against plain-Go transcriptions of PyTorch's kernels (aten's
// upsample_bilinear2d with align_corners=False, grid_sampler_2d bilinear/border/align_corners=True,
// ConvTranspose2d, PixelShuffle): the IFNet fixtures test them together, these test each alone.

func randVals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}

func run1(t *testing.T, fn func(in []*Node) *Node, args ...*tensors.Tensor) []float32 {
	t.Helper()
	e := MustNewExec(testutil.Backend(t), fn)
	defer e.Finalize()
	in := make([]any, len(args))
	for i, a := range args {
		in[i] = a
	}
	out := e.MustCall(in...)
	v, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// refBilinear is aten's upsample_bilinear2d (align_corners=False) with the size ratio as scale, on
// NHWC.
func refBilinear(x []float32, n, h, w, c, oh, ow int) []float32 {
	src := func(d, in, out int) (int, int, float64) {
		s := (float64(d)+0.5)*float64(in)/float64(out) - 0.5
		if s < 0 {
			s = 0
		}
		i0 := int(s)
		i1 := min(i0+1, in-1)
		return i0, i1, s - float64(i0)
	}
	out := make([]float32, n*oh*ow*c)
	for b := range n {
		for y := range oh {
			y0, y1, ly := src(y, h, oh)
			for xx := range ow {
				x0, x1, lx := src(xx, w, ow)
				for ch := range c {
					at := func(yy, xi int) float64 { return float64(x[((b*h+yy)*w+xi)*c+ch]) }
					v := (1-ly)*((1-lx)*at(y0, x0)+lx*at(y0, x1)) + ly*((1-lx)*at(y1, x0)+lx*at(y1, x1))
					out[((b*oh+y)*ow+xx)*c+ch] = float32(v)
				}
			}
		}
	}
	return out
}

func TestResizeMatchesPyTorchBilinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, h, w, c := 2, 16, 32, 3
	x := randVals(rng, n*h*w*c)
	xt := tensors.FromFlatDataAndDimensions(x, n, h, w, c)
	for _, s := range []int{1, 2, 4, 8, 16} {
		down := run1(t, func(in []*Node) *Node { return resize(in[0], s, true) }, xt)
		testutil.AssertClose(t, "down", down, refBilinear(x, n, h, w, c, h/s, w/s), []int{n, h / s, w / s, c}, 1e-6)
		up := run1(t, func(in []*Node) *Node { return resize(in[0], s, false) }, xt)
		testutil.AssertClose(t, "up", up, refBilinear(x, n, h, w, c, h*s, w*s), []int{n, h * s, w * s, c}, 1e-6)
	}
}

// refWarp is grid_sample(input, linspace grid + flow/((size-1)/2), bilinear, border,
// align_corners=True) on NHWC, in float64.
func refWarp(img, flow []float32, n, h, w, c int) []float32 {
	out := make([]float32, n*h*w*c)
	lx, ly := linspace(w), linspace(h)
	coord := func(g float64, size int) float64 {
		v := (g + 1) / 2 * float64(size-1)
		return math.Min(math.Max(v, 0), float64(size-1))
	}
	for b := range n {
		for y := range h {
			for x := range w {
				p := (b*h+y)*w + x
				ix := coord(float64(lx[x])+float64(flow[p*2])/((float64(w)-1)/2), w)
				iy := coord(float64(ly[y])+float64(flow[p*2+1])/((float64(h)-1)/2), h)
				x0, y0 := int(math.Floor(ix)), int(math.Floor(iy))
				x1, y1 := min(x0+1, w-1), min(y0+1, h-1)
				fx, fy := ix-float64(x0), iy-float64(y0)
				for ch := range c {
					at := func(yy, xi int) float64 { return float64(img[((b*h+yy)*w+xi)*c+ch]) }
					v := (1-fy)*((1-fx)*at(y0, x0)+fx*at(y0, x1)) + fy*((1-fx)*at(y1, x0)+fx*at(y1, x1))
					out[p*c+ch] = float32(v)
				}
			}
		}
	}
	return out
}

func TestWarpMatchesGridSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n, h, w, c := 2, 12, 20, 4
	img := randVals(rng, n*h*w*c)
	flow := randVals(rng, n*h*w*2)
	for i := range flow {
		flow[i] *= 6 // some samples leave the frame: the border rule
	}
	got := run1(t, func(in []*Node) *Node { return warp(in[0], in[1]) },
		tensors.FromFlatDataAndDimensions(img, n, h, w, c), tensors.FromFlatDataAndDimensions(flow, n, h, w, 2))
	testutil.AssertClose(t, "warp", got, refWarp(img, flow, n, h, w, c), []int{n, h, w, c}, 1e-5)
}

func TestLinspaceMatchesTorch(t *testing.T) {
	// torch.linspace(-1, 1, 5) and (-1, 1, 2); ends exact, symmetric halves.
	for n, want := range map[int][]float32{2: {-1, 1}, 5: {-1, -0.5, 0, 0.5, 1}} {
		got := linspace(n)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("linspace(%d) = %v, want %v", n, got, want)
			}
		}
	}
}

// TestTransposedConvAndShuffle checks the transposed convolution (both layouts) against
// ConvTranspose2d(k=4, s=2, p=1) written out, and PixelShuffle's channel order.
func TestTransposedConvAndShuffle(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n, h, w, ci, co := 1, 3, 4, 2, 3
	x := randVals(rng, n*h*w*ci)
	wt := randVals(rng, ci*co*16) // PyTorch [in, out, 4, 4]
	bias := randVals(rng, co)
	want := make([]float32, n*2*h*2*w*co)
	for oy := range 2 * h {
		for ox := range 2 * w {
			for o := range co {
				v := float64(bias[o])
				for iy := range h {
					for ix := range w {
						ky, kx := oy+1-2*iy, ox+1-2*ix // out = in*2 - pad + k
						if ky < 0 || ky >= 4 || kx < 0 || kx >= 4 {
							continue
						}
						for i := range ci {
							v += float64(x[(iy*w+ix)*ci+i]) * float64(wt[((i*co+o)*4+ky)*4+kx])
						}
					}
				}
				want[(oy*2*w+ox)*co+o] = float32(v)
			}
		}
	}
	mlx := make([]float32, len(wt)) // [out, kh, kw, in]
	for i := range ci {
		for o := range co {
			for k := range 16 {
				mlx[(o*16+k)*ci+i] = wt[(i*co+o)*16+k]
			}
		}
	}
	c := conv{out: co, in: ci, k: 4, transposed: true}
	for l, kernel := range map[Layout][]float32{PyTorch: wt, MLX: mlx} {
		shape := c.weightShape(l)
		for _, matmul := range []bool{false, true} {
			got := run1(t, func(in []*Node) *Node { return layer{c: c, w: in[1], b: in[2]}.apply(in[0], l, 1, matmul) },
				tensors.FromFlatDataAndDimensions(x, n, h, w, ci), tensors.FromFlatDataAndDimensions(kernel, shape...),
				tensors.FromFlatDataAndDimensions(bias, co))
			testutil.AssertClose(t, fmt.Sprintf("%s matmul=%v", l, matmul), got, want, []int{n, 2 * h, 2 * w, co}, 1e-5)
		}
	}
	// PixelShuffle(2): input channel c*4 + i*2 + j lands at (2y+i, 2x+j), channel c.
	sh := make([]float32, 1*1*1*8)
	for i := range sh {
		sh[i] = float32(i)
	}
	got := run1(t, func(in []*Node) *Node { return pixelShuffle(in[0], 2) }, tensors.FromFlatDataAndDimensions(sh, 1, 1, 1, 8))
	want2 := []float32{0, 4, 1, 5, 2, 6, 3, 7} // [1,2,2,2]: (y,x,c)
	testutil.AssertBitExact(t, "pixel shuffle", got, want2)
}

// TestConvLoweringsAgree: the 3x3 convolutions as matrix products (the pure-Go backend's lowering)
// equal the convolution op (the accelerators'), at both strides, in both layouts, on odd sizes.
func TestConvLoweringsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n, h, w, ci, co = 2, 7, 9, 5, 6
	x := make([]float32, n*h*w*ci)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	bias := make([]float32, co)
	for i := range bias {
		bias[i] = rng.Float32()
	}
	for _, l := range []Layout{PyTorch, MLX} {
		c := conv{out: co, in: ci, k: 3}
		shape := c.weightShape(l)
		kernel := make([]float32, co*ci*9)
		for i := range kernel {
			kernel[i] = rng.Float32()*2 - 1
		}
		for _, stride := range []int{1, 2} {
			lower := func(matmul bool) []float32 {
				return run1(t, func(in []*Node) *Node { return layer{c: c, w: in[1], b: in[2]}.apply(in[0], l, stride, matmul) },
					tensors.FromFlatDataAndDimensions(x, n, h, w, ci), tensors.FromFlatDataAndDimensions(kernel, shape...),
					tensors.FromFlatDataAndDimensions(bias, co))
			}
			want := lower(false)
			testutil.AssertClose(t, fmt.Sprintf("%s stride %d", l, stride), lower(true), want,
				[]int{n, (h-1)/stride + 1, (w-1)/stride + 1, co}, 1e-5)
		}
	}
}
