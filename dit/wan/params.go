package wan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/weights"
)

// The parameter table of the transformer under its released (diffusers WanTransformer3DModel) names
// (fastvideo/models/dits/wanvideo.py). Shapes come from the config. Storage: the large matrices (attention, FFN, text embedder,
// time_proj) take the compute dtype; the small boundary modules (patch embedding, time embedder,
// proj_out) and every vector the reference keeps in float32 math (norm weights, scale_shift_table) stay
// float32, which costs < 0.1 % of the weights. Biases are optional (some diffusers exports are
// bias-free); a missing bias is bound to zeros so the block executable keeps one signature.

type linearParams struct{ W, B *weights.Param }

type attnParams struct {
	Q, K, V, Out linearParams
	NormQ, NormK *weights.Param
}

type blockParams struct {
	Table       *weights.Param // scale_shift_table [1, 6, D], f32
	Self        attnParams
	Norm2W      *weights.Param // cross_attn_norm LayerNorm affine, f32
	Norm2B      *weights.Param
	Cross       attnParams
	FFIn, FFOut linearParams
	// Gate is the VSA compression gate to_gate_compress [D, D] of FastWan students (WanTransformerBlock_VSA);
	// unbound when the checkpoint has none. Only the VSA forward uses it.
	Gate linearParams
}

func (l linearParams) bound() linearWeights[*tensors.Tensor] {
	return linearWeights[*tensors.Tensor]{W: l.W.T, B: l.B.T}
}

func (a *attnParams) bound() attnWeights[*tensors.Tensor] {
	return attnWeights[*tensors.Tensor]{Q: a.Q.bound(), K: a.K.bound(), V: a.V.bound(), Out: a.Out.bound(), NormQ: a.NormQ.T, NormK: a.NormK.T}
}

// bound is the block's bound weights by name, the VSA gate an input when gate is set.
func (b *blockParams) bound(gate bool) *blockWeights[*tensors.Tensor] {
	w := &blockWeights[*tensors.Tensor]{Table: b.Table.T, Self: b.Self.bound(), Norm2W: b.Norm2W.T, Norm2B: b.Norm2B.T,
		Cross: b.Cross.bound(), FFIn: b.FFIn.bound(), FFOut: b.FFOut.bound(), gate: gate}
	if gate {
		w.Gate = b.Gate.bound()
	}
	return w
}

type params struct {
	set            *weights.Set
	PatchW, PatchB *weights.Param // [D, Cin, pt, ph, pw], [D], f32
	Time1, Time2   linearParams   // f32
	TimeProj       linearParams   // [6D, D]
	Text1, Text2   linearParams
	Blocks         []blockParams
	HeadTable      *weights.Param // scale_shift_table [1, 2, D], f32
	ProjOut        linearParams   // f32
	optionalBiases []*weights.Param
}

// declareParams builds the parameter table for cfg.
func declareParams(cfg Config) *params {
	s := weights.NewSet("")
	p := &params{set: s}
	d, f := cfg.HiddenSize(), cfg.FFNDim
	bias := func(set *weights.Set, name string, dt dtypes.DType, n int) *weights.Param {
		b := set.AddTyped(name, dt, n) // InvalidDType: the compute dtype, as Add
		b.Optional = true
		p.optionalBiases = append(p.optionalBiases, b)
		return b
	}
	// compute-dtype linear
	lin := func(set *weights.Set, name string, out, in int) linearParams {
		return linearParams{W: set.Add(name+".weight", out, in), B: bias(set, name+".bias", dtypes.InvalidDType, out)}
	}
	lin32 := func(set *weights.Set, name string, out, in int) linearParams {
		return linearParams{W: set.AddF32(name+".weight", out, in), B: bias(set, name+".bias", dtypes.Float32, out)}
	}
	attn := func(set *weights.Set) attnParams {
		return attnParams{
			Q: lin(set, "to_q", d, d), K: lin(set, "to_k", d, d), V: lin(set, "to_v", d, d),
			Out:   lin(set, "to_out.0", d, d),
			NormQ: set.AddF32("norm_q.weight", d), NormK: set.AddF32("norm_k.weight", d),
		}
	}

	pt, ph, pw := cfg.PatchSize[0], cfg.PatchSize[1], cfg.PatchSize[2]
	p.PatchW = s.AddF32("patch_embedding.weight", d, cfg.InChannels, pt, ph, pw)
	p.PatchB = bias(s, "patch_embedding.bias", dtypes.Float32, d)
	ce := s.Sub("condition_embedder")
	p.Time1 = lin32(ce, "time_embedder.linear_1", d, cfg.FreqDim)
	p.Time2 = lin32(ce, "time_embedder.linear_2", d, d)
	p.TimeProj = lin(ce, "time_proj", 6*d, d)
	p.Text1 = lin(ce, "text_embedder.linear_1", d, cfg.TextDim)
	p.Text2 = lin(ce, "text_embedder.linear_2", d, d)
	for i := 0; i < cfg.NumLayers; i++ {
		name := fmt.Sprintf("blocks.%d", i)
		b := s.Sub(name)
		bp := blockParams{
			Table:  b.AddF32("scale_shift_table", 1, 6, d),
			Self:   attn(b.Sub("attn1")),
			Norm2W: b.AddF32("norm2.weight", d),
			Norm2B: bias(b, "norm2.bias", dtypes.Float32, d),
			Cross:  attn(b.Sub("attn2")),
			FFIn:   lin(b, "ffn.net.0.proj", f, d),
			FFOut:  lin(b, "ffn.net.2", d, f),
		}
		// The attention-level gate placement is LTX-2's, not a Wan gate.
		b.Ignore("attn1.to_gate_compress.")
		p.Blocks = append(p.Blocks, bp)
	}
	p.HeadTable = s.AddF32("scale_shift_table", 1, 2, d)
	p.ProjOut = lin32(s, "proj_out", cfg.OutChannels*cfg.PatchVolume(), d)
	// VSA-trained students (FastWan) carry the gate projection of the sparse attention under FastVideo's
	// own name (wanvideo.py has no mapping for it); the dense forward does not use it. Declared last, so
	// that random weights of a given seed (drawn in declaration order) keep their values for the rest.
	for i := range p.Blocks {
		b := s.Sub(fmt.Sprintf("blocks.%d", i))
		p.Blocks[i].Gate = linearParams{W: b.AddOptional("to_gate_compress.weight", d, d), B: bias(b, "to_gate_compress.bias", dtypes.InvalidDType, d)}
	}
	return p
}

// Params is the checkpoint parameter table of a released transformer for cfg (biases included), in
// declaration order.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The optional VSA gates belong to FastWan students, not to the released model.
	released := slices.DeleteFunc(declareParams(cfg).set.Params(), func(q *weights.Param) bool {
		return strings.Contains(q.Name, "to_gate_compress.")
	})
	return weights.ShapesOf(released), nil
}
