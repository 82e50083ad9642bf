package h3video

import (
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/nn"
)

// Index of each tensor of one decoder block in the slice the block graph receives.
const (
	bNorm1 = iota
	bQW
	bQB
	bKW
	bKB
	bVW
	bVB
	bOW
	bOB
	bScale1
	bNorm2
	bFF0W
	bFF0B
	bFF2W
	bFF2B
	bScale2
	numBlockTensors
)

// blockTensorNames are the released names of a block's tensors, relative to
// "decoder.transformer_blocks.{i}.", in the b* order above.
var blockTensorNames = [numBlockTensors]string{
	"norm1.weight",
	"attn.to_q.weight", "attn.to_q.bias",
	"attn.to_k.weight", "attn.to_k.bias",
	"attn.to_v.weight", "attn.to_v.bias",
	"attn.to_out.0.weight", "attn.to_out.0.bias",
	"scale1",
	"norm2.weight",
	"ff.net.0.proj.weight", "ff.net.0.proj.bias",
	"ff.net.2.weight", "ff.net.2.bias",
	"scale2",
}

// graphs holds the decoder geometry that the graph functions need. Weights are graph inputs (in the
// weight dtype); the residual stream, norms, RoPE and softmax stay in float32 whatever that dtype is,
// because the released decoder is an FP32 model and bf16 is only a speed option. Every graph takes a
// leading batch axis of spatial tiles (all of one size), so that one device call serves several tiles.
type graphs struct {
	heads, headDim, registers  int
	outChannels, patch, patchT int
	eps                        float64
	attn                       attention.Options
}

// linearOut is nn.LinearF32 for the decoder blocks' big activations: with half-precision weights the
// product is written in that dtype (as PyTorch's half-precision linears do) and widened to float32
// only inside the fused elementwise consumer that adds the bias, so [tokens, 2·FFN] and the q/k/v
// projections never exist in float32 in device memory (half the memory traffic, ~7% of the decode
// on an H200). For float32 weights it is nn.LinearF32.
func linearOut(x, w, b *Node) *Node {
	if w.DType() == dtypes.Float32 {
		return nn.LinearF32(x, w, b)
	}
	x = ConvertDType(x, w.DType())
	y := ConvertDType(Dot(x, w).WithOutputDType(w.DType()).General([]int{x.Rank() - 1}, nil, []int{1}, nil), dtypes.Float32)
	return nn.AddBias(y, b)
}

// rope rotates the first rot channels of each head (half-split pairs (i, i+rot/2)); x is
// [B, L, H, Dh] float32, cos/sin are [L, rot].
func rope(x, cos, sin *Node) *Node {
	l, rot, dh := x.Shape().Dim(1), cos.Shape().Dim(-1), x.Shape().Dim(-1)
	xr := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, rot))
	first := Slice(xr, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, rot/2))
	second := Slice(xr, AxisRange(), AxisRange(), AxisRange(), AxisRange(rot/2, rot))
	rotated := Concatenate([]*Node{Neg(second), first}, -1)
	c := Reshape(cos, 1, l, 1, rot)
	s := Reshape(sin, 1, l, 1, rot)
	out := Add(Mul(xr, c), Mul(rotated, s))
	if rot == dh {
		return out
	}
	pass := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(rot, dh))
	return Concatenate([]*Node{out, pass}, -1)
}

// pre builds the decoder's input tokens for a batch of B tiles of one clip.
// in: z [B, C, T, h, w] f32, post_quant_conv weight [C, C, 1, 1, 1], bias [C], proj_in weight [D, C],
// bias [D], register tokens [1, R, D].
// out: tokens [B, T·h·w + R + 1, D] f32 (patches, registers, one zero token per tile) and, for parity
// tests, the post_quant_conv output in token order [B, T·h·w, C].
func (gs *graphs) pre(in []*Node) []*Node {
	z, pqW, pqB, piW, piB, reg := in[0], in[1], in[2], in[3], in[4], in[5]
	b, c, t, h, w := z.Shape().Dim(0), z.Shape().Dim(1), z.Shape().Dim(2), z.Shape().Dim(3), z.Shape().Dim(4)
	n := t * h * w
	d := piW.Shape().Dim(0)
	tok := Reshape(TransposeAllAxes(z, 0, 2, 3, 4, 1), b, n, c)
	pq := nn.LinearF32(tok, Reshape(pqW, c, c), pqB)
	x := nn.LinearF32(pq, piW, piB)
	r := BroadcastToDims(ConvertDType(Reshape(reg, 1, gs.registers, d), dtypes.Float32), b, gs.registers, d)
	zero := Zeros(x.Graph(), shapes.Make(dtypes.Float32, b, 1, d))
	x = Concatenate([]*Node{x, r, zero}, 1)
	return []*Node{x, pq}
}

// blockInputs feed one ViT block: X [B, L, D] f32, Cos and Sin [L, rot]; the numBlockTensors
// weights follow.
type blockInputs[T any] struct{ X, Cos, Sin T }

func (a *blockInputs[T]) Fields() []*T { return []*T{&a.X, &a.Cos, &a.Sin} }

// block is one ViT block: x + Attn(RMSNorm(x))·scale1, then + FFN(RMSNorm(x))·scale2.
func (gs *graphs) block(in []*Node) *Node {
	var named blockInputs[*Node]
	wt := graphexec.Unpack(in, &named)
	x, cos, sin := named.X, named.Cos, named.Sin
	b, l, d := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2)
	dt := wt[bQW].DType()

	h := nn.RMSNorm(x, wt[bNorm1], gs.eps)
	// One matmul for q, k and v: the weights are concatenated in the graph (a 3·D² copy per call,
	// negligible next to the matmul), which runs ~3% faster on an H200 than three matmuls.
	qkv := linearOut(h, Concatenate([]*Node{wt[bQW], wt[bKW], wt[bVW]}, 0), Concatenate([]*Node{wt[bQB], wt[bKB], wt[bVB]}, 0))
	heads := func(i int) *Node {
		return Reshape(Slice(qkv, AxisRange(), AxisRange(), AxisRange(i*d, (i+1)*d)), b, l, gs.heads, gs.headDim)
	}
	q := gs.qkNorm(heads(0), cos, sin)
	k := gs.qkNorm(heads(1), cos, sin)
	o := attention.Attend(ConvertDType(q, dt), ConvertDType(k, dt), ConvertDType(heads(2), dt), gs.attn)
	a := linearOut(Reshape(o, b, l, d), wt[bOW], wt[bOB])
	x = Add(x, Mul(a, ExpandLeftToRank(ConvertDType(wt[bScale1], dtypes.Float32), 3)))

	h = nn.RMSNorm(x, wt[bNorm2], gs.eps)
	f := linearOut(h, wt[bFF0W], wt[bFF0B])
	inner := f.Shape().Dim(-1) / 2
	val := Slice(f, AxisRange(), AxisRange(), AxisRange(0, inner))
	gate := Slice(f, AxisRange(), AxisRange(), AxisRange(inner, 2*inner))
	f = linearOut(Mul(val, Mul(gate, Sigmoid(gate))), wt[bFF2W], wt[bFF2B])
	return Add(x, Mul(f, ExpandLeftToRank(ConvertDType(wt[bScale2], dtypes.Float32), 3)))
}

// qkNorm is the per-head RMSNorm (no weight) followed by RoPE, in float32. The statistic
// rsqrt(mean(x²)+eps) is its own reduction and scales the rotated head afterwards (the rotation is
// linear, so this equals rotating the normalized head up to rounding): the normalized f32 q and k
// then never materialize between the reduction and the rotation.
func (gs *graphs) qkNorm(x, cos, sin *Node) *Node {
	x = ConvertDType(x, dtypes.Float32)
	s := Rsqrt(AddScalar(ReduceAndKeep(Square(x), ReduceMean, -1), gs.eps))
	return Mul(rope(x, cos, sin), s)
}

// post maps the tokens of a batch of t×h×w tiles back to pixels. in: x [B, L, D], norm_out
// weight/bias [D], proj_out weight [C·pt·p·p, D] and bias. out: [B, C, t·pt, h·p, w·p] f32 in
// normalized pixel space.
func (gs *graphs) post(t, h, w int, in []*Node) *Node {
	x, nw, nb, pw, pb := in[0], in[1], in[2], in[3], in[4]
	b, n := x.Shape().Dim(0), t*h*w
	y := nn.LinearF32(nn.LayerNorm(x, nw, nb, gs.eps), pw, pb)
	y = Slice(y, AxisRange(), AxisRange(0, n), AxisRange())
	c, pt, p := gs.outChannels, gs.patchT, gs.patch
	y = Reshape(y, b, t, h, w, c, pt, p, p)
	y = TransposeAllAxes(y, 0, 4, 1, 5, 2, 6, 3, 7)
	return Reshape(y, b, c, t*pt, h*p, w*p)
}

// ropeTables builds the decoder's RoPE cos/sin [L, rot] for a tile of t×h×w tokens followed by
// `suffix` tokens at coordinate (0,0,0), reproducing the reference's float32 arithmetic:
// coordinate 2·((i+0.5)/D)−1, angle (2π·coord)·inv_freq, inv_freq = 1/θ^(j·6/rot).
func ropeTables(t, h, w, suffix, rot int, theta float64) (cos, sin []float32) {
	nf := rot / 6
	step := 6 / float64(rot)
	inv := make([]float32, nf)
	for j := range inv {
		e := float32(float64(j) * step)
		inv[j] = float32(1 / float64(float32(math.Pow(theta, float64(e)))))
	}
	grid := func(size int) []float32 {
		g := make([]float32, size)
		for i := range g {
			g[i] = 2*(float32(float64(i)+0.5)/float32(size)) - 1
		}
		return g
	}
	gt, gh, gw := grid(t), grid(h), grid(w)
	l := t*h*w + suffix
	cos = make([]float32, l*rot)
	sin = make([]float32, l*rot)
	twoPi := float32(2 * math.Pi)
	row := make([]float32, rot)
	fill := func(tok int, coord [3]float32) {
		for a := 0; a < 3; a++ {
			base := twoPi * coord[a]
			for j := 0; j < nf; j++ {
				ang := base * inv[j]
				row[a*nf+j] = ang
				row[3*nf+a*nf+j] = ang
			}
		}
		for k, ang := range row {
			cos[tok*rot+k] = float32(math.Cos(float64(ang)))
			sin[tok*rot+k] = float32(math.Sin(float64(ang)))
		}
	}
	tok := 0
	for i := 0; i < t; i++ {
		for j := 0; j < h; j++ {
			for k := 0; k < w; k++ {
				fill(tok, [3]float32{gt[i], gh[j], gw[k]})
				tok++
			}
		}
	}
	for ; tok < l; tok++ {
		fill(tok, [3]float32{})
	}
	return cos, sin
}
