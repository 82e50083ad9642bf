package wan

import (
	"fmt"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/attention"
	"fastvideo/internal/nn"
)

// Graph building blocks of the Wan forward. Activations are row matrices [rows, width] (tokens of one
// sample; the batch of one is implicit). Weights use the PyTorch layout [out, in]. The shared operations
// (linear, norms, GELU, modulation) are package nn's.

// AllReduce is the tensor-parallel hook of a block (nil: one device).
type AllReduce = nn.AllReduce

// blockSpec carries the static sizes of one block graph. Heads and FFN are the local (per-device) head
// count and FFN width: with tensor parallelism Q/K/V (and their biases and QK-norm weights) and FFN-in
// would be split by rows, to_out and FFN-out by columns, and AllReduce sums the partial results; output
// biases are added once, after the reduction. Width is the global hidden size D, over which the QK
// RMSNorm statistic is taken.
type blockSpec struct {
	Heads, HeadDim, FFN, Width int
	Eps                        float64
	Attention                  attention.Options
	AllReduce                  AllReduce
	// VSA, when set, makes the self-attention block-sparse (WanTransformerBlock_VSA); its Gate is filled
	// in the graph from the block's to_gate_compress.
	VSA *attention.Sparse
	// Window, when set, makes the self-attention windowed (never with VSA; cross-attention stays dense).
	Window *attention.Window
}

// linearWeights, attnWeights and blockWeights are a block's weights by name: graph nodes while an
// executable is built (T = *Node), the bound tensors when it is called (T = *tensors.Tensor).
type linearWeights[T any] struct{ W, B T }

type attnWeights[T any] struct {
	Q, K, V, Out linearWeights[T]
	NormQ, NormK T
}

type blockWeights[T any] struct {
	Table          T
	Self, Cross    attnWeights[T]
	Norm2W, Norm2B T
	FFIn, FFOut    linearWeights[T]
	// Gate is the VSA compression gate to_gate_compress, an input of the VSA executables only (gate).
	Gate linearWeights[T]
	gate bool
}

func (l *linearWeights[T]) fields() []*T { return []*T{&l.W, &l.B} }

func (a *attnWeights[T]) fields() []*T {
	return append(append(append(append(a.Q.fields(), a.K.fields()...), a.V.fields()...), a.Out.fields()...), &a.NormQ, &a.NormK)
}

// Fields lists the block's executable inputs in call order (graphexec.Inputs).
func (w *blockWeights[T]) Fields() []*T {
	f := append([]*T{&w.Table}, w.Self.fields()...)
	f = append(append(f, &w.Norm2W, &w.Norm2B), w.Cross.fields()...)
	f = append(append(f, w.FFIn.fields()...), w.FFOut.fields()...)
	if w.gate {
		f = append(f, w.Gate.fields()...)
	}
	return f
}

func (s blockSpec) check(w *blockWeights[*Node]) {
	inner := s.Heads * s.HeadDim
	if d := w.Self.Q.W.Shape().Dim(0); d != inner {
		panic(fmt.Errorf("wan: attn1.to_q has %d rows, the block expects %d local heads × %d = %d", d, s.Heads, s.HeadDim, inner))
	}
	if d := w.FFIn.W.Shape().Dim(0); d != s.FFN {
		panic(fmt.Errorf("wan: ffn.net.0.proj has %d rows, the block expects the local FFN width %d", d, s.FFN))
	}
}

// qkNorm is the across-heads RMSNorm of a q or k projection y [L, local width], reshaped to heads
// [1, L, H, Dh], followed by the rotation when cos != nil. The rotation is linear, so the statistic
// rsqrt(mean y²) is applied after rotating y·w: XLA then fuses norm and rotation into one pass over the
// projection instead of materializing the normalized tensor (measured faster on an H200). Under tensor parallelism
// the sum of squares is all-reduced, so the statistic still spans all D channels.
func (s blockSpec) qkNorm(y, w, cos, sin *Node) *Node {
	dt := y.DType()
	l := y.Shape().Dim(0)
	yf := nn.F32(y)
	ss := s.AllReduce.Apply(ReduceAndKeep(Square(yf), ReduceSum, -1)) // [L, 1]
	r := Rsqrt(AddScalar(DivScalar(ss, float64(s.Width)), s.Eps))
	yw := Reshape(Mul(yf, ExpandAxes(nn.F32(w), 0)), 1, l, s.Heads, s.HeadDim)
	if cos != nil {
		yw = applyRope(yw, cos, sin)
	}
	return ConvertDType(Mul(yw, Reshape(r, 1, l, 1, 1)), dt)
}

// applyRope rotates interleaved channel pairs (2j, 2j+1) of every head by the angle of pair j (GPT-J
// style, FastVideo's is_neox_style=False): y[2j] = x[2j]·cos − x[2j+1]·sin, y[2j+1] = x[2j+1]·cos +
// x[2j]·sin. x is [1, L, H, Dh] float32; cos/sin are [L, Dh/2].
func applyRope(x, cos, sin *Node) *Node {
	l, h, dh := x.Shape().Dim(1), x.Shape().Dim(2), x.Shape().Dim(3)
	pairs := Reshape(x, 1, l, h, dh/2, 2)
	re := Squeeze(Slice(pairs, AxisRange(), AxisRange(), AxisRange(), AxisRange(), AxisElem(0)), -1)
	im := Squeeze(Slice(pairs, AxisRange(), AxisRange(), AxisRange(), AxisRange(), AxisElem(1)), -1)
	c := Reshape(nn.F32(cos), 1, l, 1, dh/2)
	sn := Reshape(nn.F32(sin), 1, l, 1, dh/2)
	outRe := Sub(Mul(re, c), Mul(im, sn))
	outIm := Add(Mul(im, c), Mul(re, sn))
	return Reshape(Stack([]*Node{outRe, outIm}, -1), 1, l, h, dh)
}

// attend runs attention of q [1, Lq, H, Dh] over k/v projections and the output projection (all-reduce,
// then bias). kv is the key/value source rows [Lk, D]; cos/sin rotate q and k (self-attention) or are nil.
// sparse (self-attention under VSA only) makes the attention block-sparse, with the compression gate
// to_gate_compress(h) when gate.W is set (WanTransformerBlock_VSA.forward: the gate is neither normed
// nor rotated); window (self-attention only) makes it windowed.
func (s blockSpec) attend(h, kv *Node, w attnWeights[*Node], cos, sin *Node, sparse *attention.Sparse, window *attention.Window,
	gate linearWeights[*Node]) *Node {
	l, lk := h.Shape().Dim(0), kv.Shape().Dim(0)
	q := s.qkNorm(nn.Linear(h, w.Q.W, w.Q.B), w.NormQ, cos, sin)
	k := s.qkNorm(nn.Linear(kv, w.K.W, w.K.B), w.NormK, cos, sin)
	v := Reshape(nn.Linear(kv, w.V.W, w.V.B), 1, lk, s.Heads, s.HeadDim)
	opts := s.Attention
	opts.Window = window
	if sparse != nil {
		sp := *sparse
		if gate.W != nil {
			sp.Gate = Reshape(nn.Linear(h, gate.W, gate.B), 1, l, s.Heads, s.HeadDim)
		}
		opts.Sparse = &sp
	}
	o := Reshape(attention.Attend(q, k, v, opts), l, s.Heads*s.HeadDim)
	return nn.AddBias(s.AllReduce.Apply(nn.Linear(o, w.Out.W, nil)), w.Out.B)
}

// feedForward is GELU-tanh(h·W_inᵀ + b_in)·W_outᵀ (all-reduce) + b_out.
func (s blockSpec) feedForward(h *Node, in, out linearWeights[*Node]) *Node {
	return nn.AddBias(s.AllReduce.Apply(nn.Linear(nn.GeluTanh(nn.Linear(h, in.W, in.B)), out.W, nil)), out.B)
}

// block is one Wan transformer block (WanTransformerBlock in fastvideo/models/dits/wanvideo.py). x [L, D] and text [S, D] are in the compute
// dtype; tproj [nT, 6, D] float32 is the time modulation, and tIdx [L] int32 (nil when nT == 1) selects
// each token's row. The modulation, norms and gated residual adds are float32, as upstream.
func (s blockSpec) block(x, text, tproj, tIdx, cos, sin *Node, w *blockWeights[*Node]) *Node {
	s.check(w)
	dt := x.DType()
	mod := Add(nn.F32(tproj), nn.F32(w.Table)) // [nT, 6, D]
	if tIdx != nil {
		mod = Gather(mod, ExpandAxes(tIdx, -1)) // [L, 6, D]
	}
	part := func(i int) *Node { return Squeeze(Slice(mod, AxisRange(), AxisElem(i), AxisRange()), 1) }
	shiftMSA, scaleMSA, gateMSA := part(0), part(1), part(2)
	cShift, cScale, cGate := part(3), part(4), part(5)

	// Self-attention with the gated residual in float32.
	n := ConvertDType(nn.Modulate(nn.LayerNorm(x, nil, nil, s.Eps), shiftMSA, scaleMSA), dt)
	attn := s.attend(n, n, w.Self, cos, sin, s.VSA, s.Window, w.Gate)
	r := Add(nn.F32(x), Mul(nn.F32(attn), gateMSA))
	x = ConvertDType(r, dt)

	// Cross-attention on the affine LayerNorm (norm2) of the float32 residual; ungated add.
	n2 := Add(Mul(nn.LayerNorm(r, nil, nil, s.Eps), ExpandAxes(nn.F32(w.Norm2W), 0)), ExpandAxes(nn.F32(w.Norm2B), 0))
	cross := s.attend(ConvertDType(n2, dt), text, w.Cross, nil, nil, nil, nil, linearWeights[*Node]{})
	x = Add(x, ConvertDType(cross, dt))

	// Feed-forward with the gated residual in float32.
	n3 := ConvertDType(nn.Modulate(nn.LayerNorm(x, nil, nil, s.Eps), cShift, cScale), dt)
	ff := s.feedForward(n3, w.FFIn, w.FFOut)
	return ConvertDType(Add(nn.F32(x), Mul(nn.F32(ff), cGate)), dt)
}

// patchEmbed is the Conv3d with kernel = stride = patch as a matmul: latent [C, T, H, W] float32 →
// patch rows [L, C·pt·ph·pw] (tokens t-major, features ordered c, kt, kh, kw as the conv weight)
// → [L, D] float32.
func patchEmbed(latent, w, b *Node, patch []int) *Node {
	c, t, h, wd := latent.Shape().Dim(0), latent.Shape().Dim(1), latent.Shape().Dim(2), latent.Shape().Dim(3)
	pt, ph, pw := patch[0], patch[1], patch[2]
	nt, nh, nw := t/pt, h/ph, wd/pw
	x := Reshape(latent, c, nt, pt, nh, ph, nw, pw)
	x = TransposeAllAxes(x, 1, 3, 5, 0, 2, 4, 6)
	x = Reshape(x, nt*nh*nw, c*pt*ph*pw)
	wm := Reshape(w, w.Shape().Dim(0), c*pt*ph*pw)
	return nn.Linear(x, wm, b)
}

// unpatchify maps proj_out rows [L, pt·ph·pw·C] (features ordered kt, kh, kw, c) on the token grid
// nt×nh×nw back to a latent [C, T, H, W].
func unpatchify(y *Node, nt, nh, nw int, patch []int) *Node {
	pt, ph, pw := patch[0], patch[1], patch[2]
	c := y.Shape().Dim(1) / (pt * ph * pw)
	x := Reshape(y, nt, nh, nw, pt, ph, pw, c)
	x = TransposeAllAxes(x, 6, 0, 3, 1, 4, 2, 5)
	return Reshape(x, c, nt*pt, nh*ph, nw*pw)
}
