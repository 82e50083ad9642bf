package wan

import (
	"fmt"

	"fastvideo/attention"
	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// vsaSparsity is the default VSA sparsity of the VSA-trained variants (see VSA).
var vsaSparsity = map[string]float64{
	"fastwan2.1-t2v-1.3b": 0.8, "fastwan2.1-t2v-14b-480p": 0.9, "fastwan2.2-ti2v-5b": 0.8,
}

// vsaConfig is the resolved VSA of a run (nil: dense attention).
type vsaConfig struct {
	sparsity        float64
	denseFirstSteps int
	denseLayers     []int
}

// VSAPlan reports the VSA geometry of one forward and what it saves (PlanDetails.VSA).
type VSAPlan struct {
	Sparsity float64 `json:"sparsity"`
	TileSize int     `json:"tile_size"`
	Tiles    int     `json:"tiles"`
	// TopK is the number of key tiles each query tile keeps.
	TopK            int   `json:"top_k"`
	DenseFirstSteps int   `json:"dense_first_steps,omitempty"`
	DenseLayers     []int `json:"dense_layers,omitempty"`
	// AttentionTFLOPsSaved is the self-attention work (QKᵀ and PV over the blocks) the sparse steps skip
	// against dense attention, over the whole denoise.
	AttentionTFLOPsSaved float64 `json:"attention_tflops_saved"`
}

// resolveVSA applies the checkpoint's VSA default and the request's knobs.
func (r *resolved) resolveVSA(family.Request) error {
	o := r.opts.VSA
	if o != nil && !o.Off && !r.spec.VSAGates {
		return &family.RequestError{Field: "vsa", Value: "on", Allowed: "a VSA-trained checkpoint (FastWan: its transformer carries to_gate_compress)"}
	}
	if !r.spec.VSAGates || (o != nil && o.Off) {
		return nil
	}
	if o == nil && !attention.BlockSparseKernel() {
		r.attentionWhy = familykit.DenseByDefault
		return nil
	}
	c := &vsaConfig{sparsity: r.spec.VSASparsity}
	if o != nil {
		if o.Sparsity != nil {
			c.sparsity = *o.Sparsity
		}
		c.denseFirstSteps, c.denseLayers = o.DenseFirstSteps, o.DenseLayers
	}
	if err := familykit.CheckVSAKnobs(c.sparsity, c.denseFirstSteps, c.denseLayers, r.spec.DiT.NumLayers); err != nil {
		return err
	}
	r.vsa = c
	return nil
}

// forStep returns the DiT's VSA for denoising step k (nil when VSA is off).
func (c *vsaConfig) forStep(k int) *wandit.VSA {
	if c == nil {
		return nil
	}
	v := &wandit.VSA{Sparsity: c.sparsity, DenseLayers: c.denseLayers}
	if k < c.denseFirstSteps {
		v.Sparsity = 0
	}
	return v
}

// plan reports the tiling of the token grid and the attention work saved over forwards DiT forwards.
func (c *vsaConfig) plan(grid [3]int, steps, forwardsPerStep int, dit wandit.Config) (*VSAPlan, error) {
	if c == nil {
		return nil, nil
	}
	tl, err := attention.NewTiling(nil, grid, wandit.VSATileSize)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	k := attention.TopKTiles(c.sparsity, tl.NumVideo)
	n := int64(tl.Rows())
	sparseForwards := max(0, steps-c.denseFirstSteps) * forwardsPerStep
	sparseLayers := dit.NumLayers - len(c.denseLayers)
	perPair := 4 * float64(dit.HiddenSize()) // QKᵀ and PV, 2 FLOPs per multiply-add each
	saved := float64(n*n-tl.AttendedPairs(k)) * perPair * float64(sparseLayers*sparseForwards) / 1e12
	return &VSAPlan{Sparsity: c.sparsity, TileSize: wandit.VSATileSize, Tiles: tl.NumVideo, TopK: k,
		DenseFirstSteps: c.denseFirstSteps, DenseLayers: c.denseLayers, AttentionTFLOPsSaved: saved}, nil
}
