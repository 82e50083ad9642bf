// Package nn holds the graph operations several models compute the same way (linear layers, norms,
// activations, AdaLN modulation). Weights use the PyTorch layout [out, in]; "over the last axis" means
// per row of activations [..., width].
package nn

import (
	"math"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
)

// F32 converts x to float32 (a no-op for float32 x).
func F32(x *Node) *Node { return ConvertDType(x, dtypes.Float32) }

// Linear is x·wᵀ + b over the last axis of x, for w [out, in] and b [out] or nil, in w's dtype: x is
// converted to w's dtype first, and b to the result's.
func Linear(x, w, b *Node) *Node {
	if x.DType() != w.DType() {
		x = ConvertDType(x, w.DType())
	}
	y := Dot(x, w).General([]int{x.Rank() - 1}, nil, []int{1}, nil)
	if y.DType() != w.DType() {
		y = ConvertDType(y, w.DType())
	}
	return AddBias(y, b)
}

// LinearF32 is Linear with a float32 result accumulated in float32, whatever w's dtype (x is converted
// to w's dtype; b, when set, is added in float32).
func LinearF32(x, w, b *Node) *Node {
	x = ConvertDType(x, w.DType())
	y := Dot(x, w).WithOutputDType(dtypes.Float32).General([]int{x.Rank() - 1}, nil, []int{1}, nil)
	return AddBias(y, b)
}

// AddBias adds b [out] (nil: nothing) to the last axis of y, in y's dtype.
func AddBias(y, b *Node) *Node {
	if b == nil {
		return y
	}
	return Add(y, ExpandLeftToRank(ConvertDType(b, y.DType()), y.Rank()))
}

// SiLU is x·sigmoid(x), in x's dtype.
func SiLU(x *Node) *Node { return Mul(x, Sigmoid(x)) }

// GeluTanh is PyTorch's gelu(approximate="tanh"), 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated
// in float32 and returned in x's dtype.
func GeluTanh(x *Node) *Node {
	xf := F32(x)
	inner := MulScalar(Add(xf, MulScalar(Mul(Mul(xf, xf), xf), 0.044715)), math.Sqrt(2/math.Pi))
	return ConvertDType(Mul(MulScalar(xf, 0.5), OnePlus(Tanh(inner))), x.DType())
}

// RMSNorm is x·rsqrt(mean(x²) + eps) over the last axis, times weight (nil: none), with the statistics
// and the weight product in float32; the result has x's dtype.
func RMSNorm(x, weight *Node, eps float64) *Node {
	dt := x.DType()
	xf := F32(x)
	y := Mul(xf, Rsqrt(AddScalar(ReduceAndKeep(Square(xf), ReduceMean, -1), eps)))
	if weight != nil {
		y = Mul(y, ExpandLeftToRank(F32(weight), y.Rank()))
	}
	return ConvertDType(y, dt)
}

// RMSNormCastFirst is RMSNorm in the order of transformers' T5LayerNorm and Qwen3RMSNorm: the
// normalized value is cast back to x's dtype before the weight, converted to that dtype, multiplies it.
// In float32 it equals RMSNorm; in half precision the product is rounded differently.
func RMSNormCastFirst(x, weight *Node, eps float64) *Node {
	dt := x.DType()
	xf := F32(x)
	y := Mul(xf, Rsqrt(AddScalar(ReduceAndKeep(Square(xf), ReduceMean, -1), eps)))
	y = ConvertDType(y, dt)
	return Mul(y, ExpandLeftToRank(ConvertDType(weight, dt), y.Rank()))
}

// LayerNorm normalizes over the last axis in float32 (mean and biased variance, as PyTorch) and, when w
// and b are set, applies the affine map in float32. The result is float32.
func LayerNorm(x, w, b *Node, eps float64) *Node {
	xf := F32(x)
	xc := Sub(xf, ReduceAndKeep(xf, ReduceMean, -1))
	y := Mul(xc, Rsqrt(AddScalar(ReduceAndKeep(Square(xc), ReduceMean, -1), eps)))
	if w != nil {
		y = Mul(y, ExpandLeftToRank(F32(w), y.Rank()))
	}
	if b != nil {
		y = Add(y, ExpandLeftToRank(F32(b), y.Rank()))
	}
	return y
}

// Modulate is the AdaLN modulation x·(1 + scale) + shift, in x's dtype.
func Modulate(x, shift, scale *Node) *Node {
	return Add(Mul(x, OnePlus(ConvertDType(scale, x.DType()))), ConvertDType(shift, x.DType()))
}

// Project is x·wᵀ over the last axis of x for w [out, in], computed in x's dtype (w is converted to
// it), without bias: the text encoders' convention, where x may be wider than the weights.
func Project(x, w *Node) *Node {
	w = ConvertDType(w, x.DType())
	return DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil)
}

// AllReduce is the hook a tensor-parallel block calls on its partial sums (after the attention output
// projection and after FFN-out) to sum them across shards. nil means one device: identity.
type AllReduce func(*Node) *Node

// Apply sums x across the shards, or returns it unchanged when r is nil.
func (r AllReduce) Apply(x *Node) *Node {
	if r == nil {
		return x
	}
	return r(x)
}
