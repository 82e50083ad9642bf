package h3

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/attention"
	"fastvideo/internal/fusedops"
	"fastvideo/internal/nn"
	"fastvideo/quant"
)

// Graph building blocks of the H3 forward. Activations are row matrices [rows, width]; the batch of one is
// implicit. Weights use the PyTorch layout [out, in]. The shared operations (linear, RMSNorm, modulation)
// are package nn's.

// AllReduce is the tensor-parallel hook of a block (nil: one device).
type AllReduce = nn.AllReduce

// blockSpec carries the static sizes of one block graph. Heads and FFN are the local (per-device) head
// count and FFN width: with tensor parallelism the Q/K/V/FFN-in weights are split by rows and to_out/
// FFN-out by columns at load time, and AllReduce sums the partial outputs.
//
// Quantized weights would split the same way (tensor parallelism refuses quantized joint blocks today,
// shard.go; this is the contract a quantized split must keep): a
// row split takes the same rows of the packed words, the scales and the biases. A column split of to_out
// or FFN-out (the input axis, along which MLX groups) must fall on group boundaries: a shard of columns
// [c0, c1) with c0, c1 multiples of the group size (64) takes words [c0·bits/32, c1·bits/32) — whole words
// for every width, since a 64-value group is 2·bits words, 6-bit rows included — and scales/biases
// [c0/64, c1/64). Head-aligned splits qualify: a head is 128 columns (2 groups); so do FFN splits of
// 14336/tp for tp dividing 224.
type blockSpec struct {
	Heads, HeadDim, RotaryDim, FFN int
	NormEps, QKNormEps             float64
	Attention                      attention.Options
	Dispatch                       quant.Dispatch
	QKPass, NormPass               fusedops.Form
	AllReduce                      AllReduce
}

// attnWeights are the graph inputs of one attention module.
type attnWeights struct {
	Q, K, V, Out quant.GraphWeight
	NormQ, NormK *Node
	// Gate is the VSA compression gate to_gate_compress [inner, D], or nil.
	Gate *Node
}

// coreWeights are the graph inputs shared by refiner and joint blocks.
type coreWeights struct {
	Norm1, Norm2 *Node
	Attn         attnWeights
	FFIn, FFOut  quant.GraphWeight
}

// numCoreLinears is the number of linears of a block that a converted checkpoint may quantize.
const numCoreLinears = 6

// coreLinearNames are the block-relative names of the core linears, in linearLayout order.
var coreLinearNames = [numCoreLinears]string{
	"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight",
	"ff.net.0.proj.weight", "ff.net.2.weight",
}

// linearLayout is the quantization of a block's core linears (Q, K, V, Out, FFIn, FFOut; a zero Scheme
// is dense). It fixes statically which graph inputs each linear takes (blockWeights) and how the words
// are unpacked, so the block executable is built for it once.
type linearLayout [numCoreLinears]quant.Scheme

func describeScheme(s quant.Scheme) string {
	if s == (quant.Scheme{}) {
		return "dense"
	}
	return fmt.Sprintf("int%d (group %d)", s.Bits, s.GroupSize)
}

func (s blockSpec) check(w coreWeights) {
	inner := s.Heads * s.HeadDim
	if d := w.Attn.Q.Out(); d != inner {
		panic(fmt.Errorf("h3: to_q has %d rows, the block expects %d local heads × %d = %d", d, s.Heads, s.HeadDim, inner))
	}
	if d := w.FFIn.Out(); d != 2*s.FFN {
		panic(fmt.Errorf("h3: ff.net.0.proj has %d rows, the block expects 2 × local FFN width %d", d, s.FFN))
	}
}

// attentionOut runs QKV projection, per-head QK RMSNorm, optional partial RoPE, joint attention and the
// output projection (followed by the all-reduce hook). h is [L, D]; cos, sin are [L, rotary] or nil.
func (s blockSpec) attentionOut(h *Node, w attnWeights, cos, sin *Node) *Node {
	l := h.Shape().Dim(0)
	heads := func(x *Node) *Node { return Reshape(x, 1, l, s.Heads, s.HeadDim) }
	q := s.qkNormRope(heads(quant.Linear(h, w.Q, nil, s.Dispatch)), w.NormQ, cos, sin)
	k := s.qkNormRope(heads(quant.Linear(h, w.K, nil, s.Dispatch)), w.NormK, cos, sin)
	v := heads(quant.Linear(h, w.V, nil, s.Dispatch))
	opts := s.Attention
	if opts.Sparse != nil && w.Gate != nil {
		// fastvideo/models/dits/minimax_h3.py MiniMaxH3Attention.forward: the gate projects the attention
		// input, per head.
		sparse := *opts.Sparse
		sparse.Gate = heads(nn.Linear(h, w.Gate, nil))
		opts.Sparse = &sparse
	}
	o := attention.Attend(q, k, v, opts)
	o = Reshape(o, l, s.Heads*s.HeadDim)
	return s.AllReduce.Apply(quant.Linear(o, w.Out, nil, s.Dispatch))
}

// qkNormRope is the per-head RMSNorm of q or k followed by the partial rotation (cos == nil: norm only),
// in the form s.QKPass chooses (package fusedops).
func (s blockSpec) qkNormRope(x, w, cos, sin *Node) *Node {
	if cos == nil {
		return nn.RMSNorm(x, w, s.QKNormEps)
	}
	return fusedops.QKNormRope(x, w, cos, sin, s.QKNormEps, s.RotaryDim, s.QKPass)
}

// feedForward is the bias-free value-first SwiGLU: u = h·W_inᵀ, value = u[:, :F], gate = u[:, F:],
// out = (value·SiLU(gate))·W_outᵀ, followed by the all-reduce hook.
func (s blockSpec) feedForward(h *Node, wIn, wOut quant.GraphWeight) *Node {
	u := quant.Linear(h, wIn, nil, s.Dispatch)
	value := Slice(u, AxisRange(), AxisRange(0, s.FFN))
	gate := Slice(u, AxisRange(), AxisRange(s.FFN, 2*s.FFN))
	return s.AllReduce.Apply(quant.Linear(Mul(value, nn.SiLU(gate)), wOut, nil, s.Dispatch))
}

// refinerBlock is the text token-refiner block: pre-norm attention (no RoPE, no modulation) and FFN.
func (s blockSpec) refinerBlock(x *Node, w coreWeights) *Node {
	s.check(w)
	x = Add(x, s.attentionOut(nn.RMSNorm(x, w.Norm1, s.NormEps), w.Attn, nil, nil))
	return Add(x, s.feedForward(nn.RMSNorm(x, w.Norm2, s.NormEps), w.FFIn, w.FFOut))
}

// jointBlock is one modulated joint block. mod is the block's modulation table [R, 6, D] (rows
// timestep·3 + modality; tables shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp) and
// rowIdx [L] int32 selects each packed row's table row. It returns the block output and, for tracing,
// the attention and FFN outputs before gating.
func (s blockSpec) jointBlock(x, mod, rowIdx, cos, sin *Node, w coreWeights) (out, attnOut, ffOut *Node) {
	s.check(w)
	m := fusedops.Modulation{Mod: mod, Rows: rowIdx}
	attnOut = s.jointAttention(x, m, cos, sin, w)
	x, ffOut = s.jointFeedForward(x, m, attnOut, w)
	return jointResidual(x, m, ffOut), attnOut, ffOut
}

// The modulation tables of a joint block, in the order jointBlock documents.
const (
	shiftMSA = iota
	scaleMSA
	gateMSA
	shiftMLP
	scaleMLP
	gateMLP
)

// The joint block in its three parts, cut where a tensor-parallel block all-reduces (docs/architecture.md,
// "Tensor parallelism"): the attention output, then the FFN output. The pre-norms run in the form
// s.NormPass chooses (package fusedops).

// jointAttention is the modulated attention branch (ungated), all-reduced through the hook.
func (s blockSpec) jointAttention(x *Node, m fusedops.Modulation, cos, sin *Node, w coreWeights) *Node {
	h := fusedops.NormModulate(x, m, w.Norm1, s.NormEps, shiftMSA, scaleMSA, s.NormPass)
	return s.attentionOut(h, w.Attn, cos, sin)
}

// jointFeedForward adds the gated attention output to x and runs the modulated FFN branch on the sum;
// it returns the sum and the (ungated, all-reduced) FFN output.
func (s blockSpec) jointFeedForward(x *Node, m fusedops.Modulation, attnOut *Node, w coreWeights) (sum, ffOut *Node) {
	h, sum := fusedops.ResidualNormModulate(x, attnOut, m, w.Norm2, s.NormEps, gateMSA, shiftMLP, scaleMLP, s.NormPass)
	return sum, s.feedForward(h, w.FFIn, w.FFOut)
}

// jointResidual adds the gated FFN output.
func jointResidual(x *Node, m fusedops.Modulation, ffOut *Node) *Node {
	return Add(x, Mul(m.Table(gateMLP, x.DType()), ffOut))
}

// timeEmbedding maps the sinusoidal projection [nT, freq] (float32) to temb [nT, time_embed_dim] with
// the FP32 MLP linear_1 → SiLU → linear_2.
func timeEmbedding(proj, w1, b1, w2, b2 *Node) *Node {
	return nn.Linear(nn.SiLU(nn.Linear(proj, w1, b1)), w2, b2)
}

// adaLNInput is what every AdaLN projection consumes: SiLU(temb) for full tables, or the rank-r basis
// adaln_basis(SiLU(temb)) (no further SiLU) for the rank-reduced variant; in dtype dt.
func adaLNInput(temb, basis *Node, dt dtypes.DType) *Node {
	a := nn.SiLU(temb)
	if basis != nil {
		return nn.Linear(ConvertDType(a, basis.DType()), basis, nil)
	}
	return ConvertDType(a, dt)
}

// modulationTable is one block's AdaLN projection reshaped to [nT·3, 6, D]: feature f of the linear is
// modality·6D + table·D + c.
func modulationTable(cond, w, b *Node, hidden int) *Node {
	y := nn.Linear(cond, w, b) // [nT, 18·D]
	n := y.Shape().Dim(0)
	return Reshape(y, n*Modalities, 6, hidden)
}

// normOutTable is norm_out's projection reshaped to [nT, 2, D] (shift, scale).
func normOutTable(cond, w, b *Node, hidden int) *Node {
	y := nn.Linear(cond, w, b)
	return Reshape(y, y.Shape().Dim(0), 2, hidden)
}
