package h3

import (
	"fmt"

	"fastvideo/attention"
	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// VSAPlan reports the VSA geometry of one forward and what it saves (PlanDetails.VSA).
type VSAPlan struct {
	Sparsity    float64 `json:"sparsity"`
	TileSize    int     `json:"tile_size"`
	Mode        string  `json:"mode"`
	PrefixTiles int     `json:"prefix_tiles"`
	VideoTiles  int     `json:"video_tiles"`
	// FineStage is how the selected tiles are attended: "triton" (in place) or "gather".
	FineStage string `json:"fine_stage"`
	// TopK is the number of video key tiles each video query tile keeps.
	TopK            int `json:"top_k"`
	DenseFirstSteps int `json:"dense_first_steps,omitempty"`
	// AttentionTFLOPsSaved is the attention work (QKᵀ and PV over the joint blocks) the sparse steps skip
	// against dense attention, over the whole denoise.
	AttentionTFLOPsSaved float64 `json:"attention_tflops_saved"`
}

// trainedVSA is the VSA the FastH3 students were trained with (FastVideo PR #1776): sparsity 0.9,
// 64-row tiles, the prefix exempt from selection.
var trainedVSA = familykit.VSA{Sparsity: 0.9, TileSize: 64, Mode: attention.ModeExempt}

// resolveVSA applies the checkpoint's VSA defaults and the request's knobs.
func (r *resolved) resolveVSA(api.Request, family.Preset) (err error) {
	r.vsa, r.attentionWhy, err = familykit.ResolveVSA(r.opts.VSA, familykit.VSACheckpoint{
		Gates: r.spec.VSAGates, GatesHint: "a FastH3 checkpoint (its transformer carries to_gate_compress)",
		Default: r.spec.VSA, NumLayers: r.spec.DiT.NumLayers})
	return err
}

// vsaForStep returns the DiT's VSA for step k over layout l (nil when VSA is off).
func vsaForStep(c *familykit.VSA, l *packing.Layout, k int) *h3dit.VSA {
	if c == nil {
		return nil
	}
	v := h3dit.LayoutVSA(l, c.SparsityAt(k), c.TileSize, c.Mode)
	v.DenseLayers = c.DenseLayers
	return v
}

// vsaPlan reports the tiling of layout l and the attention work saved over steps forwards.
func vsaPlan(c *familykit.VSA, l *packing.Layout, steps, layers, heads, headDim int) (*VSAPlan, error) {
	if c == nil {
		return nil, nil
	}
	tl, err := vsaForStep(c, l, c.DenseFirstSteps).Tiling()
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	k := attention.TopKTiles(c.Sparsity, tl.NumVideo)
	saved := c.TFLOPsSaved(tl, k, max(0, steps-c.DenseFirstSteps), layers, heads*headDim)
	return &VSAPlan{Sparsity: c.Sparsity, TileSize: c.TileSize, Mode: c.Mode.String(), PrefixTiles: tl.NumPrefix,
		VideoTiles: tl.NumVideo, TopK: k, DenseFirstSteps: c.DenseFirstSteps, AttentionTFLOPsSaved: saved}, nil
}
