package umt5

import (
	"fmt"
	"math"
	"strconv"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/nn"
	"fastvideo/internal/weights"
)

// BlockTensorNames are the per-block checkpoint names (after
// "encoder.block.<i>.") that the block executable takes, in order, for cfg:
// the relative-position table is passed separately because T5 shares block 0's.
func BlockTensorNames(cfg Config) []string {
	names := []string{
		"layer.0.layer_norm.weight",
		"layer.0.SelfAttention.q.weight",
		"layer.0.SelfAttention.k.weight",
		"layer.0.SelfAttention.v.weight",
		"layer.0.SelfAttention.o.weight",
		"layer.1.layer_norm.weight",
	}
	if cfg.Gated {
		return append(names, "layer.1.DenseReluDense.wi_0.weight", "layer.1.DenseReluDense.wi_1.weight", "layer.1.DenseReluDense.wo.weight")
	}
	return append(names, "layer.1.DenseReluDense.wi.weight", "layer.1.DenseReluDense.wo.weight")
}

// BlockTensorShapes are the shapes of BlockTensorNames (PyTorch Linear layout
// [out, in]).
func BlockTensorShapes(cfg Config) [][]int {
	d, inner, f := cfg.DModel, cfg.InnerDim(), cfg.DFF
	s := [][]int{{d}, {inner, d}, {inner, d}, {inner, d}, {d, inner}, {d}}
	if cfg.Gated {
		return append(s, []int{f, d}, []int{f, d}, []int{d, f})
	}
	return append(s, []int{f, d}, []int{d, f})
}

// RelativeBiasName is the relative-position table of block i: [num_buckets, num_heads].
func RelativeBiasName(i int) string {
	return blockPrefix(i) + "layer.0.SelfAttention.relative_attention_bias.weight"
}

func blockPrefix(i int) string { return "encoder.block." + strconv.Itoa(i) + "." }

const (
	wNorm0 = iota
	wQ
	wK
	wV
	wO
	wNorm1
	wFF // wi_0, wi_1, wo (gated) or wi, wo
)

// activation applies an HF ACT2FN activation in float32.
func activation(name string, x *Node) *Node {
	dt := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	var y *Node
	switch name {
	case "gelu_new", "gelu_pytorch_tanh":
		y = nn.GeluTanh(xf)
	case "gelu": // exact erf form
		y = Mul(MulScalar(xf, 0.5), OnePlus(Erf(MulScalar(xf, 1/math.Sqrt2))))
	case "relu":
		y = Max(xf, ZerosLike(xf))
	case "silu", "swish":
		y = nn.SiLU(xf)
	default:
		panic(fmt.Sprintf("umt5: activation %q is not implemented", name)) // Config.Validate rejects it first
	}
	return ConvertDType(y, dt)
}

// Block is one T5/UMT5 encoder block on x [S, d_model] (batch 1).
//
//   - buckets: int32 [S, S], RelativePositionBuckets(S, ...).
//   - keyMask: float32 [S], 1 for a real token and 0 for padding; padded keys get
//     the lowest float32 as score (FastVideo's masked_fill with finfo.min; HF adds
//     finfo.min to the bias — both give those keys a softmax weight of exactly 0
//     in every row that has a real key).
//   - relBias: [num_buckets, num_heads], the block's (or, for T5, block 0's) table.
//   - w: the tensors of BlockTensorNames in order, any float dtype.
//
// Attention scores and softmax are float32 whatever x's dtype, and the scores are
// not scaled by 1/√d_kv: T5 folds that scale into the initialization of q.
func Block(cfg Config, x, buckets, keyMask, relBias *Node, w []*Node) *Node {
	s := x.Shape().Dim(0)
	dt := x.DType()
	h, dk := cfg.NumHeads, cfg.DKV

	n := nn.RMSNormCastFirst(x, w[wNorm0], cfg.LayerNormEps)
	q := ConvertDType(Reshape(nn.Project(n, w[wQ]), s, h, dk), dtypes.Float32)
	k := ConvertDType(Reshape(nn.Project(n, w[wK]), s, h, dk), dtypes.Float32)
	v := ConvertDType(Reshape(nn.Project(n, w[wV]), s, h, dk), dtypes.Float32)
	scores := Einsum("qhd,khd->hqk", q, k)

	// bias[h, i, j] = table[bucket(i, j), h]
	bias := Gather(ConvertDType(relBias, dtypes.Float32), ExpandAxes(buckets, -1)) // [S, S, H]
	scores = Add(scores, TransposeAllAxes(bias, 2, 0, 1))
	valid := BroadcastToDims(Reshape(GreaterThan(keyMask, ScalarZero(x.Graph(), dtypes.Float32)), 1, 1, s), h, s, s)
	scores = Where(valid, scores, Scalar(x.Graph(), dtypes.Float32, -math.MaxFloat32))
	p := Softmax(scores, -1)
	o := ConvertDType(Reshape(Einsum("hqk,khd->qhd", p, v), s, h*dk), dt)
	x = Add(x, nn.Project(o, w[wO]))

	n = nn.RMSNormCastFirst(x, w[wNorm1], cfg.LayerNormEps)
	var ff *Node
	if cfg.Gated {
		ff = nn.Project(Mul(activation(cfg.Act, nn.Project(n, w[wFF])), nn.Project(n, w[wFF+1])), w[wFF+2])
	} else {
		ff = nn.Project(activation(cfg.Act, nn.Project(n, w[wFF])), w[wFF+1])
	}
	return Add(x, ff)
}

// Params is the checkpoint parameter table of the encoder stack for cfg under the released HF T5
// names: the token embedding (as EmbeddingNames[0]), every block with its relative-position table,
// and the final norm.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := weights.Shapes{{Name: EmbeddingNames[0], Shape: []int{cfg.VocabSize, cfg.DModel}}}
	shapes := BlockTensorShapes(cfg)
	for i := 0; i < cfg.NumLayers; i++ {
		for k, n := range BlockTensorNames(cfg) {
			out = append(out, weights.TensorShape{Name: blockPrefix(i) + n, Shape: shapes[k]})
		}
		out = append(out, weights.TensorShape{Name: RelativeBiasName(i), Shape: []int{cfg.NumBuckets, cfg.NumHeads}})
	}
	return append(out, weights.TensorShape{Name: "encoder.final_layer_norm.weight", Shape: []int{cfg.DModel}}), nil
}
