package wan

import (
	"fmt"

	"fastvideo/attention"
	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/familykit"
)

// vsaSparsity is the default VSA sparsity of the VSA-trained variants (see VSA).
var vsaSparsity = map[string]float64{
	"fastwan2.1-t2v-1.3b": 0.8, "fastwan2.1-t2v-14b-480p": 0.9, "fastwan2.2-ti2v-5b": 0.8,
}

// VSAPlan reports the VSA geometry of one forward and what it saves (PlanDetails.VSA).
type VSAPlan struct {
	Sparsity float64 `json:"sparsity"`
	TileSize int     `json:"tile_size"`
	Tiles    int     `json:"tiles"`
	// FineStage is how the selected tiles are attended: "triton" (in place) or "gather".
	FineStage string `json:"fine_stage"`
	// TopK is the number of key tiles each query tile keeps.
	TopK            int   `json:"top_k"`
	DenseFirstSteps int   `json:"dense_first_steps,omitempty"`
	DenseLayers     []int `json:"dense_layers,omitempty"`
	// AttentionTFLOPsSaved is the self-attention work (QKᵀ and PV over the blocks) the sparse steps skip
	// against dense attention, over the whole denoise.
	AttentionTFLOPsSaved float64 `json:"attention_tflops_saved"`
}

// resolveVSA applies the checkpoint's VSA default and the request's knobs; a request with an attention
// window runs without VSA (resolveWindow refused one asking both).
func (r *resolved) resolveVSA(api.Request) (err error) {
	if r.windowAsked() {
		return nil
	}
	var knobs *familykit.VSAKnobs
	if o := r.opts.VSA; o != nil {
		knobs = &familykit.VSAKnobs{Off: o.Off, Sparsity: o.Sparsity, DenseFirstSteps: o.DenseFirstSteps, DenseLayers: o.DenseLayers}
	}
	r.vsa, r.attentionWhy, err = familykit.ResolveVSA(knobs, familykit.VSACheckpoint{
		Gates: r.spec.VSAGates, GatesHint: "a VSA-trained checkpoint (FastWan: its transformer carries to_gate_compress)",
		Default: r.spec.VSA, NumLayers: r.spec.DiT.NumLayers})
	return err
}

// vsaForStep returns the DiT's VSA for denoising step k (nil when VSA is off).
func vsaForStep(c *familykit.VSA, k int) *wandit.VSA {
	if c == nil {
		return nil
	}
	return &wandit.VSA{Sparsity: c.SparsityAt(k), DenseLayers: c.DenseLayers}
}

// vsaPlan reports the tiling of the token grid and the attention work saved over the denoise's DiT
// forwards.
func vsaPlan(c *familykit.VSA, grid [3]int, steps, forwardsPerStep int, dit wandit.Config) (*VSAPlan, error) {
	if c == nil {
		return nil, nil
	}
	tl, err := attention.NewTiling(nil, grid, c.TileSize)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	k := attention.TopKTiles(c.Sparsity, tl.NumVideo)
	saved := c.TFLOPsSaved(tl, k, max(0, steps-c.DenseFirstSteps)*forwardsPerStep, dit.NumLayers, dit.HiddenSize())
	return &VSAPlan{Sparsity: c.Sparsity, TileSize: c.TileSize, Tiles: tl.NumVideo, TopK: k,
		DenseFirstSteps: c.DenseFirstSteps, DenseLayers: c.DenseLayers, AttentionTFLOPsSaved: saved}, nil
}
