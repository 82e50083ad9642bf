package h3

import (
	"fmt"

	"fastvideo/attention"
	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// vsaConfig is the resolved VSA of a run (nil: dense attention).
type vsaConfig struct {
	sparsity        float64
	tileSize        int
	mode            attention.Mode
	denseFirstSteps int
	denseLayers     []int
}

// VSAPlan reports the VSA geometry of one forward and what it saves (PlanDetails.VSA).
type VSAPlan struct {
	Sparsity    float64 `json:"sparsity"`
	TileSize    int     `json:"tile_size"`
	Mode        string  `json:"mode"`
	PrefixTiles int     `json:"prefix_tiles"`
	VideoTiles  int     `json:"video_tiles"`
	// TopK is the number of video key tiles each video query tile keeps.
	TopK            int `json:"top_k"`
	DenseFirstSteps int `json:"dense_first_steps,omitempty"`
	// AttentionTFLOPsSaved is the attention work (QKᵀ and PV over the joint blocks) the sparse steps skip
	// against dense attention, over the whole denoise.
	AttentionTFLOPsSaved float64 `json:"attention_tflops_saved"`
}

// resolveVSA applies the checkpoint's VSA defaults and the request's knobs.
func (r *resolved) resolveVSA(family.Request, family.Preset) error {
	o := r.opts.VSA
	if o != nil && !o.Off && !r.spec.VSAGates {
		return &family.RequestError{Field: "vsa", Value: "on", Allowed: "a FastH3 checkpoint (its transformer carries to_gate_compress)"}
	}
	if !r.spec.VSAGates || (o != nil && o.Off) {
		return nil
	}
	if o == nil && !attention.BlockSparseKernel() {
		r.attentionWhy = familykit.DenseByDefault
		return nil
	}
	c := &vsaConfig{sparsity: r.spec.VSASparsity, tileSize: r.spec.VSATileSize, mode: attention.ModeExempt}
	if o != nil {
		if o.Sparsity != nil {
			c.sparsity = *o.Sparsity
		}
		if o.TileSize != 0 {
			c.tileSize = o.TileSize
		}
		m, err := attention.ParseMode(o.Mode)
		if err != nil {
			return &family.RequestError{Field: "vsa_mode", Value: o.Mode, Allowed: "exempt or compete"}
		}
		c.mode, c.denseFirstSteps, c.denseLayers = m, o.DenseFirstSteps, o.DenseLayers
	}
	if c.tileSize != 64 && c.tileSize != 256 {
		return &family.RequestError{Field: "vsa_tile_size", Value: fmt.Sprint(c.tileSize), Allowed: "64 or 256"}
	}
	if err := familykit.CheckVSAKnobs(c.sparsity, c.denseFirstSteps, c.denseLayers, r.spec.DiT.NumLayers); err != nil {
		return err
	}
	r.vsa = c
	return nil
}

// forStep returns the DiT's VSA for step k over layout l (nil when VSA is off).
func (c *vsaConfig) forStep(l *packing.Layout, k int) *h3dit.VSA {
	if c == nil {
		return nil
	}
	v := h3dit.LayoutVSA(l, c.sparsity, c.tileSize, c.mode)
	v.DenseLayers = c.denseLayers
	if k < c.denseFirstSteps {
		v.Sparsity = 0
	}
	return v
}

// plan reports the tiling of layout l and the attention work saved over steps forwards.
func (c *vsaConfig) plan(l *packing.Layout, steps, layers, heads, headDim int) (*VSAPlan, error) {
	if c == nil {
		return nil, nil
	}
	tl, err := c.forStep(l, c.denseFirstSteps).Tiling()
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	k := attention.TopKTiles(c.sparsity, tl.NumVideo)
	n := int64(tl.Rows())
	sparseSteps := max(0, steps-c.denseFirstSteps)
	sparseLayers := layers - len(c.denseLayers)
	perPair := 4 * float64(heads*headDim) // QKᵀ and PV, 2 FLOPs per multiply-add each
	saved := float64(n*n-tl.AttendedPairs(k)) * perPair * float64(sparseLayers*sparseSteps) / 1e12
	return &VSAPlan{Sparsity: c.sparsity, TileSize: c.tileSize, Mode: c.mode.String(), PrefixTiles: tl.NumPrefix,
		VideoTiles: tl.NumVideo, TopK: k, DenseFirstSteps: c.denseFirstSteps, AttentionTFLOPsSaved: saved}, nil
}
