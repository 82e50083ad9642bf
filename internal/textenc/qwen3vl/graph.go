package qwen3vl

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/nn"
	"fastvideo/internal/weights"
)

// LayerTensorNames are the per-layer checkpoint names (after
// "<prefix>layers.<i>."), in the order the decoder-layer executable takes them.
var LayerTensorNames = []string{
	"input_layernorm.weight",
	"self_attn.q_proj.weight",
	"self_attn.k_proj.weight",
	"self_attn.v_proj.weight",
	"self_attn.q_norm.weight",
	"self_attn.k_norm.weight",
	"self_attn.o_proj.weight",
	"post_attention_layernorm.weight",
	"mlp.gate_proj.weight",
	"mlp.up_proj.weight",
	"mlp.down_proj.weight",
}

const (
	wInputNorm = iota
	wQ
	wK
	wV
	wQNorm
	wKNorm
	wO
	wPostNorm
	wGate
	wUp
	wDown
	numLayerTensors
)

// LayerTensorShapes are the expected shapes of LayerTensorNames for cfg
// (PyTorch Linear layout [out, in]).
func LayerTensorShapes(cfg Config) [][]int {
	d, f, hd := cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim
	q, kv := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	return [][]int{{d}, {q, d}, {kv, d}, {kv, d}, {hd}, {hd}, {d, q}, {d}, {f, d}, {f, d}, {d, f}}
}

// applyRope rotates x [S, heads, head_dim] by cos/sin [S, head_dim] (float32):
// x·cos + rotate_half(x)·sin with rotate_half(x) = [-x2, x1].
func applyRope(x, cos, sin *Node) *Node {
	dt := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	half := x.Shape().Dim(-1) / 2
	x1 := Slice(xf, AxisRange(), AxisRange(), AxisRange(0, half))
	x2 := Slice(xf, AxisRange(), AxisRange(), AxisRange(half))
	rot := Concatenate([]*Node{Neg(x2), x1}, -1)
	c, s := ExpandAxes(cos, 1), ExpandAxes(sin, 1)
	return ConvertDType(Add(Mul(xf, c), Mul(rot, s)), dt)
}

// causalGQA is exact causal attention with grouped KV heads, scores and softmax in
// float32. q [S, H, D], k/v [S, KV, D]; query head h uses KV head h / (H/KV), the
// grouping of the reference's expand + reshape. Prompts are short (tens to
// hundreds of tokens), so the [KV, G, S, S] score tensor is small and the exact
// decomposed form costs nothing next to the projections.
func causalGQA(q, k, v *Node) *Node {
	g := q.Graph()
	dt := q.DType()
	s, h, d := q.Shape().Dim(0), q.Shape().Dim(1), q.Shape().Dim(2)
	kvh := k.Shape().Dim(1)
	groups := h / kvh
	qf := Reshape(ConvertDType(q, dtypes.Float32), s, kvh, groups, d)
	kf := ConvertDType(k, dtypes.Float32)
	vf := ConvertDType(v, dtypes.Float32)
	scores := MulScalar(Einsum("skgd,tkd->kgst", qf, kf), 1/math.Sqrt(float64(d)))
	mask := BroadcastToDims(Reshape(LowerTriangular(g, s), 1, 1, s, s), kvh, groups, s, s)
	scores = Where(mask, scores, Infinity(g, dtypes.Float32, -1))
	p := Softmax(scores, -1)
	o := Einsum("kgst,tkd->skgd", p, vf)
	return ConvertDType(Reshape(o, s, h*d), dt)
}

// DecoderLayer is one Qwen3-VL text decoder layer on x [S, hidden] (batch 1):
// pre-norm attention with per-head q/k RMSNorm and rotary positions, then a
// pre-norm SwiGLU MLP, both residual. w holds the tensors of LayerTensorNames in
// order, in any float dtype (converted to x's dtype in the graph); cos and sin are
// the float32 [S, head_dim] tables from RopeTables.
func DecoderLayer(cfg Config, x, cos, sin *Node, w []*Node) *Node {
	s := x.Shape().Dim(0)
	eps := cfg.RMSNormEps
	hd := cfg.HeadDim

	h := nn.RMSNormCastFirst(x, w[wInputNorm], eps)
	q := Reshape(nn.Project(h, w[wQ]), s, cfg.NumHeads, hd)
	k := Reshape(nn.Project(h, w[wK]), s, cfg.NumKVHeads, hd)
	v := Reshape(nn.Project(h, w[wV]), s, cfg.NumKVHeads, hd)
	q = applyRope(nn.RMSNormCastFirst(q, w[wQNorm], eps), cos, sin)
	k = applyRope(nn.RMSNormCastFirst(k, w[wKNorm], eps), cos, sin)
	x = Add(x, nn.Project(causalGQA(q, k, v), w[wO]))

	h = nn.RMSNormCastFirst(x, w[wPostNorm], eps)
	gate := nn.Project(h, w[wGate])
	up := nn.Project(h, w[wUp])
	act := Mul(Mul(gate, Sigmoid(gate)), up)
	return Add(x, nn.Project(act, w[wDown]))
}

// Params is the checkpoint parameter table of the text stack an encoder with default Options reads
// for cfg: the token embedding and the decoder layers up to the returned hidden state, under
// DefaultPrefix.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, err := Options{}.ResolveHiddenState(cfg)
	if err != nil {
		return nil, err
	}
	out := weights.Shapes{{Name: DefaultPrefix + "embed_tokens.weight", Shape: []int{cfg.VocabSize, cfg.HiddenSize}}}
	shapes := LayerTensorShapes(cfg)
	for i := 0; i < n; i++ {
		for k, name := range LayerTensorNames {
			out = append(out, weights.TensorShape{Name: fmt.Sprintf("%slayers.%d.%s", DefaultPrefix, i, name), Shape: shapes[k]})
		}
	}
	return out, nil
}
