package fusedops

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/xlaext"
)

// errQKShape: the pass is not one the kernel computes.
var errQKShape = errors.New("the qk_norm_rope kernel does not cover this pass")

// QKNormRope is the per-head RMSNorm of q or k [1, L, H, Dh] with weight w [Dh], followed by the
// half-split ("NeoX") rotation of each head's first rot channels by the token's angles cos, sin [L, rot]:
// out[:rot/2] = x1·cos − x2·sin, out[rot/2:rot] = x2·cos + x1·sin, the other channels passed through
// (MiniMax H3's q/k pass, fastvideo/models/dits/minimax_h3.py). It is computed in float32 and returned in
// x's dtype. Because the rotation is linear, the statistic rsqrt(mean x²) is its own reduction, applied
// after rotating x·w: XLA then fuses norm and rotation into one pass instead of writing the normalized
// tensor (measured faster on an H200). form chooses the graph ops or the kernel (FormKernel panics where
// the kernel cannot run, as graph building does).
func QKNormRope(x, w, cos, sin *Node, eps float64, rot int, form Form) *Node {
	if form != FormGraph {
		out, err := qkKernel(x, w, cos, sin, eps, rot)
		if err == nil {
			return out
		}
		if form == FormKernel {
			panic(fmt.Errorf("fusedops: the qk_norm_rope kernel was asked for: %w", err))
		}
	}
	dt := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	r := Rsqrt(AddScalar(ReduceAndKeep(Square(xf), ReduceMean, -1), eps)) // [1, L, H, 1]
	xw := Mul(xf, ExpandLeftToRank(ConvertDType(w, dtypes.Float32), 4))
	return ConvertDType(Mul(rotate(xw, cos, sin, rot), r), dt)
}

// rotate rotates the first rot channels of every head of x [1, L, H, Dh] (float32) half-split by
// cos/sin [L, rot]; the remaining channels pass through.
func rotate(x, cos, sin *Node, rot int) *Node {
	dh := x.Shape().Dim(3)
	half := rot / 2
	c := ExpandAxes(ConvertDType(cos, dtypes.Float32), 0, 2) // [1, L, 1, rot]
	sn := ExpandAxes(ConvertDType(sin, dtypes.Float32), 0, 2)
	x1 := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, half))
	x2 := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(half, rot))
	rotated := Concatenate([]*Node{Neg(x2), x1}, -1)
	xr := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, rot))
	out := Add(Mul(xr, c), Mul(rotated, sn))
	if rot < dh {
		out = Concatenate([]*Node{out, Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(rot, dh))}, -1)
	}
	return out
}

// QKNormRopeKernel reports why the qk_norm_rope kernel cannot compute the pass on backend for x of dtype
// with heads of headDim channels, rot of them rotated (nil: it can).
func QKNormRopeKernel(backend compute.Backend, dtype, wDType dtypes.DType, heads, headDim, rot int) error {
	_, err := qkKernelFor(backend, dtype, wDType, heads, headDim, rot)
	return err
}

// qkKernelFor is the qk_norm_rope kernel where it computes the pass (QKNormRopeKernel), or why not.
func qkKernelFor(backend compute.Backend, dtype, wDType dtypes.DType, heads, headDim, rot int) (*kernelRecord, error) {
	k, f, err := kernel("qk_norm_rope", backend)
	if err != nil {
		return nil, err
	}
	switch {
	case dtype != dtypes.BFloat16 || wDType != dtypes.BFloat16:
		return nil, fmt.Errorf("%w: x %s and w %s (it takes bfloat16)", errQKShape, dtype, wDType)
	case headDim != f.Head:
		return nil, fmt.Errorf("%w: heads of %d channels (it takes %d)", errQKShape, headDim, f.Head)
	case heads < 1 || heads > f.Heads:
		return nil, fmt.Errorf("%w: %d heads (it takes 1 to %d)", errQKShape, heads, f.Heads)
	case rot < 16 || rot > headDim || rot%16 != 0:
		// The kernel reads each channel's partner as a row shifted by rot/2, in 16-byte loads.
		return nil, fmt.Errorf("%w: %d rotated channels (it takes a multiple of 16 up to %d)", errQKShape, rot, headDim)
	}
	return k, nil
}

// qkKernel is QKNormRope through the kernel: its operands as testdata/gen_fused_triton.py documents them.
func qkKernel(x, w, cos, sin *Node, eps float64, rot int) (*Node, error) {
	g := x.Graph()
	l, h, dh := x.Shape().Dim(1), x.Shape().Dim(2), x.Shape().Dim(3)
	k, err := qkKernelFor(g.Backend(), x.DType(), w.DType(), h, dh, rot)
	if err != nil {
		return nil, err
	}
	if n := l * h * dh; n > 1<<31-1 {
		return nil, fmt.Errorf("%w: %d elements, past the kernel's int32 offsets", errQKShape, n)
	}
	c, s := expandedAngles(cos, sin, rot, dh)
	params := Const(g, []int32{int32(l * h), int32(h), int32(rot)})
	out, err := xlaext.TritonCall(k.Launch("qk_norm_rope", [3]int{l, 1, 1}), []*Node{params, Reshape(x, l*h*dh), w, c, s, Const(g, []float32{float32(eps)})},
		[]shapes.Shape{shapes.Make(x.DType(), l*h*dh)})
	if err != nil {
		return nil, err
	}
	return Reshape(out[0], 1, l, h, dh), nil
}

// expandedAngles are the kernel's angle tables [L·Dh] float32: cos then 1 past rot; −sin on the first
// half, sin on the second, 0 past rot. The sign of the first half's product moves into the table:
// −(x2·sin) = x2·(−sin) exactly.
func expandedAngles(cos, sin *Node, rot, dh int) (c, s *Node) {
	l, half := cos.Shape().Dim(0), rot/2
	cf, sf := ConvertDType(cos, dtypes.Float32), ConvertDType(sin, dtypes.Float32)
	c, s = cf, Concatenate([]*Node{Neg(Slice(sf, AxisRange(), AxisRange(0, half))), Slice(sf, AxisRange(), AxisRange(half, rot))}, -1)
	if rot < dh {
		c = Concatenate([]*Node{c, Ones(cos.Graph(), shapes.Make(dtypes.Float32, l, dh-rot))}, -1)
		s = Concatenate([]*Node{s, Zeros(cos.Graph(), shapes.Make(dtypes.Float32, l, dh-rot))}, -1)
	}
	return Reshape(c, l*dh), Reshape(s, l*dh)
}
