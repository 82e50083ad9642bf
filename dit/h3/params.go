package h3

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/weights"
)

// The parameter table of the transformer under its released (diffusers) names, h3.md §10.1. Shapes come
// from the config; storage dtypes follow the reference precision map (§4.9): the five boundary modules
// stay float32, everything else takes the compute dtype, and the rank-reduced AdaLN tensors are float16
// whenever the compute dtype is a half type (they lose ~1.7x accuracy in bf16).

type linearParams struct{ W, B *weights.Param }

type coreParams struct {
	Norm1, Norm2               *weights.Param
	Q, K, V, NormQ, NormK, Out *weights.Param
	FFIn, FFOut                *weights.Param
}

// tensors returns the block weights in the order coreFromSlice expects.
func (c *coreParams) tensors() []*tensors.Tensor {
	return []*tensors.Tensor{c.Norm1.T, c.Q.T, c.K.T, c.V.T, c.NormQ.T, c.NormK.T, c.Out.T, c.Norm2.T, c.FFIn.T, c.FFOut.T}
}

type blockParams struct {
	coreParams
	AdaLN linearParams // nil W when the checkpoint carries an AdaLN cache instead
}

type params struct {
	set                                  *weights.Set
	ProjIn, AudioProjIn, ContextEmbedder linearParams
	Time1, Time2                         linearParams
	Refiner                              []coreParams
	RefinerFinalNorm                     *weights.Param
	Blocks                               []blockParams
	AdaLNBasis                           *weights.Param // rank-reduced variant only
	NormOutNorm                          *weights.Param
	NormOut                              linearParams
	ProjOut, AudioProjOut                linearParams
	Cache                                *cacheParams // checkpoint-carried AdaLN cache, if any
}

// cacheParams are the AdaLN cache tensors of a converted checkpoint (names as the MLX converter writes
// them, h3.md §10.3): per block six tables [n·3, D], and norm_out shift/scale [n, D].
type cacheParams struct {
	Tables        [][6]*weights.Param
	NormOutShift  *weights.Param
	NormOutScale  *weights.Param
	NumTimesteps  int
	TimestepsUsed []float32
}

// CacheTableName is the checkpoint name of block b's table k (k in shift_msa, scale_msa, gate_msa,
// shift_mlp, scale_mlp, gate_mlp order) of an AdaLN cache.
func CacheTableName(b, k int) string { return fmt.Sprintf("__adaln_cache.block.%d.table.%d", b, k) }

// Names of the norm_out tables of an AdaLN cache.
const (
	CacheNormOutShift = "__adaln_cache.norm_out_shift"
	CacheNormOutScale = "__adaln_cache.norm_out_scale"
)

// declareParams builds the parameter table. manifest, when not nil, declares a checkpoint-carried AdaLN
// cache for its timesteps and drops the AdaLN projection weights (adaln_proj, norm_out.linear,
// adaln_basis) from the table: they are then ignored if present.
func declareParams(cfg Config, compute dtypes.DType, manifest *AdaLNManifest) *params {
	s := weights.NewSet("")
	p := &params{set: s}
	d, inner, f := cfg.HiddenSize, cfg.InnerDim(), cfg.FFNDim
	lin := func(name string, out, in int, bias bool) linearParams {
		lp := linearParams{W: s.Add(name+".weight", out, in)}
		if bias {
			lp.B = s.Add(name+".bias", out)
		}
		return lp
	}
	lin32 := func(name string, out, in int) linearParams {
		return linearParams{W: s.AddF32(name+".weight", out, in), B: s.AddF32(name+".bias", out)}
	}
	adalnDT := compute
	if cfg.AdaLNRank > 0 && compute != dtypes.Float32 {
		adalnDT = dtypes.Float16
	}
	linAda := func(name string, out, in int) linearParams {
		return linearParams{W: s.AddTyped(name+".weight", adalnDT, out, in), B: s.AddTyped(name+".bias", adalnDT, out)}
	}
	core := func(prefix string) coreParams {
		b := s.Sub(prefix)
		return coreParams{
			Norm1: b.Add("norm1.weight", d),
			Q:     b.Add("attn.to_q.weight", inner, d),
			K:     b.Add("attn.to_k.weight", inner, d),
			V:     b.Add("attn.to_v.weight", inner, d),
			NormQ: b.Add("attn.norm_q.weight", cfg.AttentionHeadDim),
			NormK: b.Add("attn.norm_k.weight", cfg.AttentionHeadDim),
			Out:   b.Add("attn.to_out.0.weight", d, inner),
			Norm2: b.Add("norm2.weight", d),
			FFIn:  b.Add("ff.net.0.proj.weight", 2*f, d),
			FFOut: b.Add("ff.net.2.weight", d, f),
		}
	}

	p.ProjIn = lin32("proj_in", d, cfg.VideoPatchDim())
	p.AudioProjIn = lin32("audio_proj_in", d, cfg.AudioInChannels)
	p.ContextEmbedder = lin("context_embedder", d, cfg.TextDim, true)
	p.Time1 = lin32("time_embedder.linear_1", cfg.TimeEmbedHiddenDim, cfg.FreqDim)
	p.Time2 = lin32("time_embedder.linear_2", cfg.TimeEmbedDim, cfg.TimeEmbedHiddenDim)
	for j := 0; j < cfg.NumRefinerLayers; j++ {
		p.Refiner = append(p.Refiner, core(fmt.Sprintf("token_refiner.refiner_blocks.%d", j)))
	}
	p.RefinerFinalNorm = s.Add("token_refiner.final_norm.weight", d)
	for i := 0; i < cfg.NumLayers; i++ {
		name := fmt.Sprintf("transformer_blocks.%d", i)
		bp := blockParams{coreParams: core(name)}
		if manifest == nil {
			bp.AdaLN = linAda(name+".adaln_proj.linear", cfg.ModulationWidth(), cfg.AdaLNInDim())
		} else {
			s.Ignore(name + ".adaln_proj.")
		}
		// FastH3 students carry VSA gate matrices; the dense forward does not use them.
		s.Ignore(name + ".attn.to_gate_compress.weight")
		p.Blocks = append(p.Blocks, bp)
	}
	p.NormOutNorm = s.Add("norm_out.norm.weight", d)
	if manifest == nil {
		p.NormOut = linAda("norm_out.linear", 2*d, cfg.AdaLNInDim())
		if cfg.AdaLNRank > 0 {
			p.AdaLNBasis = s.AddTyped("adaln_basis.weight", adalnDT, cfg.AdaLNRank, cfg.TimeEmbedDim)
		}
	} else {
		s.Ignore("norm_out.linear.", "adaln_basis.")
		n := len(manifest.Timesteps)
		c := &cacheParams{NumTimesteps: n, TimestepsUsed: append([]float32(nil), manifest.Timesteps...)}
		for b := 0; b < cfg.NumLayers; b++ {
			var t [6]*weights.Param
			for k := range t {
				t[k] = s.AddTyped(CacheTableName(b, k), compute, n*Modalities, d)
			}
			c.Tables = append(c.Tables, t)
		}
		c.NormOutShift = s.AddTyped(CacheNormOutShift, compute, n, d)
		c.NormOutScale = s.AddTyped(CacheNormOutScale, compute, n, d)
		p.Cache = c
	}
	p.ProjOut = lin32("proj_out", cfg.VideoPatchDim(), d)
	p.AudioProjOut = lin32("audio_proj_out", cfg.AudioInChannels, d)
	return p
}

// ParamNames lists the checkpoint names and shapes the model binds for cfg (full AdaLN projections), in
// declaration order. It is what a converter or a checkpoint check compares against.
func ParamNames(cfg Config) map[string][]int {
	out := map[string][]int{}
	for _, p := range declareParams(cfg, dtypes.Float32, nil).set.Params() {
		out[p.Name] = p.Shape
	}
	return out
}
