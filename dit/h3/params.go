package h3

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/weights"
	"fastvideo/quant"
)

// The parameter table of the transformer under its released (diffusers) names (fastvideo/models/dits/minimax_h3.py).
// Shapes come from the config; storage dtypes follow the reference's precision: the five boundary modules
// stay float32, everything else takes the compute dtype, and the rank-reduced AdaLN tensors are float16
// whenever the compute dtype is a half type (they lose ~1.7x accuracy in bf16).

type linearParams struct{ W, B *weights.Param }

// coreParams are the weights shared by refiner and joint blocks. The six core linears are *quant.Weight:
// dense, or affine-quantized when the checkpoint quantizes them (a converted MLX checkpoint, see package quant).
type coreParams struct {
	Norm1, Norm2, NormQ, NormK *weights.Param
	Q, K, V, Out, FFIn, FFOut  *quant.Weight
}

// linears returns the six core linears in linearLayout order.
func (c *coreParams) linears() [numCoreLinears]*quant.Weight {
	return [numCoreLinears]*quant.Weight{c.Q, c.K, c.V, c.Out, c.FFIn, c.FFOut}
}

// layout is the quantization of the block's linears, which fixes its executable's input layout.
func (c *coreParams) layout() linearLayout {
	var l linearLayout
	for i, w := range c.linears() {
		l[i] = w.Scheme
	}
	return l
}

type blockParams struct {
	coreParams
	AdaLN linearParams // nil W when the checkpoint carries an AdaLN cache instead
	// Gate is FastH3's VSA gate to_gate_compress [inner, D]; unbound when the checkpoint has none.
	Gate *weights.Param
}

// cores lists the core weights of every refiner block, then of every joint block: the linears that
// quantization, random drawing and memory accounting treat alike wherever they sit.
func (p *params) cores() []*coreParams {
	out := make([]*coreParams, 0, len(p.Refiner)+len(p.Blocks))
	for j := range p.Refiner {
		out = append(out, &p.Refiner[j])
	}
	for i := range p.Blocks {
		out = append(out, &p.Blocks[i].coreParams)
	}
	return out
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
	// RefinerLayout and BlockLayout are the (uniform) quantization of the refiner and joint blocks.
	RefinerLayout, BlockLayout linearLayout
	// BlockFP8 says the joint blocks' core linears are converted to FP8 once bound (Options.FP8).
	BlockFP8 bool
}

// cacheParams are the AdaLN cache tensors of a converted checkpoint (names as the MLX converter writes
// them, scripts/checkpoint_conversion/convert_minimax_h3_mlx.py): per block six tables [n·3, D], and norm_out shift/scale [n, D].
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

// schemeFunc returns the quantization of the weight under a released name, nil when it is dense.
type schemeFunc func(name string) *quant.Scheme

// schemesOf is the schemeFunc of a checkpoint: quantized where src is a quantized checkpoint
// (quant.SchemeSource), dense otherwise.
func schemesOf(src weights.Source) schemeFunc {
	return func(name string) *quant.Scheme { return quant.SchemeOf(src, name) }
}

// declareParams builds the parameter table. manifest, when not nil, declares a checkpoint-carried AdaLN
// cache for its timesteps and drops the AdaLN projection weights (adaln_proj, norm_out.linear,
// adaln_basis) from the table: they are then ignored if present. schemes (nil: all dense) says which of
// the six core linears of the refiner and joint blocks are quantized; within each kind of block they must
// all be quantized alike, since one executable serves every block of a kind.
//
// The declaration order is the checkpoint's; NewRandom draws in it, so it also fixes the random weights.
func declareParams(cfg Config, compute dtypes.DType, manifest *AdaLNManifest, schemes schemeFunc) (*params, error) {
	dl := &declarer{s: weights.NewSet(""), cfg: cfg, compute: compute, adalnDT: compute, schemes: schemes}
	if cfg.AdaLNRank > 0 && compute != dtypes.Float32 {
		dl.adalnDT = dtypes.Float16
	}
	p := &params{set: dl.s}
	d := cfg.HiddenSize
	p.ProjIn = dl.lin32("proj_in", d, cfg.VideoPatchDim())
	p.AudioProjIn = dl.lin32("audio_proj_in", d, cfg.AudioInChannels)
	p.ContextEmbedder = dl.lin("context_embedder", d, cfg.TextDim)
	p.Time1 = dl.lin32("time_embedder.linear_1", cfg.TimeEmbedHiddenDim, cfg.FreqDim)
	p.Time2 = dl.lin32("time_embedder.linear_2", cfg.TimeEmbedDim, cfg.TimeEmbedHiddenDim)
	for j := 0; j < cfg.NumRefinerLayers; j++ {
		c, err := dl.core(fmt.Sprintf("token_refiner.refiner_blocks.%d", j))
		if err != nil {
			return nil, err
		}
		p.Refiner = append(p.Refiner, c)
	}
	p.RefinerFinalNorm = dl.s.Add("token_refiner.final_norm.weight", d)
	for i := 0; i < cfg.NumLayers; i++ {
		bp, err := dl.block(i, manifest == nil)
		if err != nil {
			return nil, err
		}
		p.Blocks = append(p.Blocks, bp)
	}
	p.NormOutNorm = dl.s.Add("norm_out.norm.weight", d)
	if manifest == nil {
		dl.adaLNOut(p)
	} else {
		p.Cache = dl.cache(manifest)
	}
	p.ProjOut = dl.lin32("proj_out", cfg.VideoPatchDim(), d)
	p.AudioProjOut = dl.lin32("audio_proj_out", cfg.AudioInChannels, d)
	if err := p.setLayouts(); err != nil {
		return nil, err
	}
	return p, nil
}

// declarer declares the parameters of the transformer's parts into one table.
type declarer struct {
	s                *weights.Set
	cfg              Config
	compute, adalnDT dtypes.DType // adalnDT: the AdaLN projections' (float16 for rank-r bases in half precision)
	schemes          schemeFunc
}

// lin is a compute-dtype linear with bias.
func (dl *declarer) lin(name string, out, in int) linearParams {
	return linearParams{W: dl.s.Add(name+".weight", out, in), B: dl.s.Add(name+".bias", out)}
}

// lin32 is a linear kept in float32.
func (dl *declarer) lin32(name string, out, in int) linearParams {
	return linearParams{W: dl.s.AddF32(name+".weight", out, in), B: dl.s.AddF32(name+".bias", out)}
}

// linAda is an AdaLN projection.
func (dl *declarer) linAda(name string, out, in int) linearParams {
	return linearParams{W: dl.s.AddTyped(name+".weight", dl.adalnDT, out, in), B: dl.s.AddTyped(name+".bias", dl.adalnDT, out)}
}

// core declares the norms and the six core linears (dense or as the checkpoint quantizes them) of a
// refiner or joint block.
func (dl *declarer) core(prefix string) (coreParams, error) {
	cfg := dl.cfg
	d, inner, f := cfg.HiddenSize, cfg.InnerDim(), cfg.FFNDim
	b := dl.s.Sub(prefix)
	dims := [numCoreLinears][2]int{{inner, d}, {inner, d}, {inner, d}, {d, inner}, {2 * f, d}, {d, f}} // [out, in]
	var ws [numCoreLinears]*quant.Weight
	var err error
	linear := func(k int) {
		if err != nil {
			return
		}
		var sc *quant.Scheme
		if dl.schemes != nil {
			sc = dl.schemes(prefix + "." + coreLinearNames[k])
		}
		if ws[k], err = quant.Declare(b, coreLinearNames[k], dims[k][0], dims[k][1], sc); err != nil {
			err = fmt.Errorf("h3: %w", err)
		}
	}
	var c coreParams
	c.Norm1 = b.Add("norm1.weight", d)
	linear(0)
	linear(1)
	linear(2)
	c.NormQ = b.Add("attn.norm_q.weight", cfg.AttentionHeadDim)
	c.NormK = b.Add("attn.norm_k.weight", cfg.AttentionHeadDim)
	linear(3)
	c.Norm2 = b.Add("norm2.weight", d)
	linear(4)
	linear(5)
	c.Q, c.K, c.V, c.Out, c.FFIn, c.FFOut = ws[0], ws[1], ws[2], ws[3], ws[4], ws[5]
	return c, err
}

// block declares joint block i, with its AdaLN projection when adaLN (else it is ignored).
func (dl *declarer) block(i int, adaLN bool) (blockParams, error) {
	name := fmt.Sprintf("transformer_blocks.%d", i)
	c, err := dl.core(name)
	if err != nil {
		return blockParams{}, err
	}
	bp := blockParams{coreParams: c}
	if adaLN {
		bp.AdaLN = dl.linAda(name+".adaln_proj.linear", dl.cfg.ModulationWidth(), dl.cfg.AdaLNInDim())
	} else {
		dl.s.Ignore(name + ".adaln_proj.")
	}
	// FastH3 students carry VSA gate matrices, used by the VSA forward's compression branch. A checkpoint
	// converted with -include-vsa stores them quantized (.scales/.biases), which the VSA forward does not
	// read yet: those are ignored and the branch is off.
	if dl.schemes != nil && dl.schemes(name+"."+gateSuffix) != nil {
		dl.s.Ignore(name + ".attn.to_gate_compress.")
	} else {
		bp.Gate = dl.s.AddOptional(name+"."+gateSuffix, dl.cfg.InnerDim(), dl.cfg.HiddenSize)
	}
	return bp, nil
}

// adaLNOut declares norm_out's AdaLN projection and, for a rank-r AdaLN, the shared basis.
func (dl *declarer) adaLNOut(p *params) {
	cfg := dl.cfg
	p.NormOut = dl.linAda("norm_out.linear", 2*cfg.HiddenSize, cfg.AdaLNInDim())
	if cfg.AdaLNRank > 0 {
		p.AdaLNBasis = dl.s.AddTyped("adaln_basis.weight", dl.adalnDT, cfg.AdaLNRank, cfg.TimeEmbedDim)
	}
}

// cache declares the checkpoint-carried AdaLN tables of manifest's timesteps in place of the AdaLN
// projections, which are then ignored.
func (dl *declarer) cache(manifest *AdaLNManifest) *cacheParams {
	dl.s.Ignore("norm_out.linear.", "adaln_basis.")
	d, n := dl.cfg.HiddenSize, len(manifest.Timesteps)
	c := &cacheParams{NumTimesteps: n, TimestepsUsed: append([]float32(nil), manifest.Timesteps...)}
	for b := 0; b < dl.cfg.NumLayers; b++ {
		var t [6]*weights.Param
		for k := range t {
			t[k] = dl.s.AddTyped(CacheTableName(b, k), dl.compute, n*Modalities, d)
		}
		c.Tables = append(c.Tables, t)
	}
	c.NormOutShift = dl.s.AddTyped(CacheNormOutShift, dl.compute, n, d)
	c.NormOutScale = dl.s.AddTyped(CacheNormOutScale, dl.compute, n, d)
	return c
}

// setLayouts records the quantization layout each kind of block shares.
func (p *params) setLayouts() error {
	refiners := make([]*coreParams, len(p.Refiner))
	for j := range p.Refiner {
		refiners[j] = &p.Refiner[j]
	}
	blocks := make([]*coreParams, len(p.Blocks))
	for i := range p.Blocks {
		blocks[i] = &p.Blocks[i].coreParams
	}
	var err error
	if p.RefinerLayout, err = uniformLayout("token_refiner.refiner_blocks", refiners); err != nil {
		return err
	}
	p.BlockLayout, err = uniformLayout("transformer_blocks", blocks)
	return err
}

// uniformLayout returns the layout the blocks share, or an error naming the first block and linear that
// is quantized differently from block 0.
func uniformLayout(kind string, blocks []*coreParams) (linearLayout, error) {
	if len(blocks) == 0 {
		return linearLayout{}, nil
	}
	first := blocks[0].layout()
	for i, b := range blocks[1:] {
		l := b.layout()
		for k := range l {
			if l[k] != first[k] {
				return first, fmt.Errorf("h3: %s.%d.%s is %s but %s.0 has it %s; every block of one kind must be "+
					"quantized alike (one block executable serves them all): re-convert the checkpoint with one scheme",
					kind, i+1, coreLinearNames[k], describeScheme(l[k]), kind, describeScheme(first[k]))
			}
		}
	}
	return first, nil
}

// Params is the checkpoint parameter table of a released (dense) transformer for cfg, with the full
// AdaLN projections, in declaration order.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := declareParams(cfg, dtypes.Float32, nil, nil)
	if err != nil {
		return nil, err
	}
	// The optional VSA gates belong to FastH3 students, not to the released model.
	released := slices.DeleteFunc(p.set.Params(), func(q *weights.Param) bool { return q.Optional })
	return weights.ShapesOf(released), nil
}

func releaseParams(ps ...*weights.Param) {
	for _, p := range ps {
		if p != nil && p.T != nil {
			p.T.FinalizeAll()
			p.T = nil
		}
	}
}
