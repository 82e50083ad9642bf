package familykit

import (
	"fmt"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
)

// DenseByDefault is why a VSA-trained model runs dense attention when the request does not name
// one: without the block-sparse kernel (attention.BlockSparseKernel) dense is faster.
const DenseByDefault = "dense (the default: this build has no block-sparse kernel, bash bench/build_gpu.sh builds one, and VSA on gathered tiles measured slower than dense attention; family.Options.VSA / -vsa forces VSA)"

// VSA is a run's resolved Video Sparse Attention, the one configuration both families resolve a
// request to (FastVideo's VSA_sparsity, VSA_tile_size, vsa_mode, vsa_dense_first_n_steps,
// vsa_dense_layers); each family turns it into its DiT's per-forward VSA. nil means dense attention.
type VSA struct {
	Sparsity        float64
	TileSize        int            // rows per tile: 64 (Wan always, H3 as trained) or 256 (H3)
	Mode            attention.Mode // how prefix key tiles are routed (H3; Wan has no prefix)
	DenseFirstSteps int
	DenseLayers     []int
}

// VSAKnobs is what a request asks of VSA (a family's Options.VSA; nil: the checkpoint's default).
// TileSize and Mode are H3's alone: zero values keep the default.
type VSAKnobs struct {
	// Off runs dense attention (the trained gates then go unused).
	Off bool
	// Sparsity in [0, 1): the fraction of video key tiles each video query tile drops; nil keeps the
	// default.
	Sparsity *float64
	// TileSize is 64 or 256 rows per tile (0: the default).
	TileSize int
	// Mode is "exempt" (prefix key tiles always attended) or "compete" ("" keeps the default).
	Mode string
	// DenseFirstSteps runs the first N denoising steps with every tile selected.
	DenseFirstSteps int
	// DenseLayers lists blocks that always select every tile.
	DenseLayers []int
}

// VSACheckpoint is what the checkpoint brings: whether it was trained with VSA (carries the
// to_gate_compress gates; gatesHint names such a checkpoint for the error), its default settings and
// its block count.
type VSACheckpoint struct {
	Gates     bool
	GatesHint string
	Default   VSA
	NumLayers int
}

// ResolveVSA applies the checkpoint's VSA defaults and the request's knobs. It returns nil when the
// run is dense, with why when dense is the default of a VSA-trained checkpoint (the plan's attention
// row), and a *family.RequestError for a bad knob.
func ResolveVSA(knobs *VSAKnobs, ck VSACheckpoint) (vsa *VSA, why string, err error) {
	if knobs != nil && !knobs.Off && !ck.Gates {
		return nil, "", &api.RequestError{Field: "vsa", Value: "on", Allowed: ck.GatesHint}
	}
	if !ck.Gates || (knobs != nil && knobs.Off) {
		return nil, "", nil
	}
	if knobs == nil && !attention.BlockSparseKernel() {
		return nil, DenseByDefault, nil
	}
	c := ck.Default
	c.DenseLayers = nil
	if knobs != nil {
		if knobs.Sparsity != nil {
			c.Sparsity = *knobs.Sparsity
		}
		if knobs.TileSize != 0 {
			c.TileSize = knobs.TileSize
		}
		if knobs.Mode != "" {
			if c.Mode, err = attention.ParseMode(knobs.Mode); err != nil {
				return nil, "", &api.RequestError{Field: "vsa_mode", Value: knobs.Mode, Allowed: "exempt or compete"}
			}
		}
		c.DenseFirstSteps, c.DenseLayers = knobs.DenseFirstSteps, knobs.DenseLayers
	}
	if c.TileSize != 64 && c.TileSize != 256 {
		return nil, "", &api.RequestError{Field: "vsa_tile_size", Value: fmt.Sprint(c.TileSize), Allowed: "64 or 256"}
	}
	if err := checkVSAKnobs(c.Sparsity, c.DenseFirstSteps, c.DenseLayers, ck.NumLayers); err != nil {
		return nil, "", err
	}
	return &c, "", nil
}

// FineStage names how the sparse attention's selected tiles are attended in this build at dtype:
// "triton" (the block-sparse kernel reads them in place: the GPU build, 64-row tiles, not float32) or
// "gather" (XLA ops copy them out first). A CUDA plugin other than the kernel's falls back to
// "gather" at run time.
func (c *VSA) FineStage(dtype api.DType) string {
	if attention.BlockSparseKernel() && c.TileSize == 64 && dtype != api.F32 {
		return attention.SparseTriton.String()
	}
	return attention.SparseGather.String()
}

// SparsityAt is the sparsity of denoising step k: 0 (every tile) during the dense first steps.
func (c *VSA) SparsityAt(k int) float64 {
	if k < c.DenseFirstSteps {
		return 0
	}
	return c.Sparsity
}

// TFLOPsSaved is the attention work (QKᵀ and PV, 2 FLOPs a multiply-add each, over width = heads ×
// head dim) that the sparse forwards skip against dense attention: sparseForwards forwards through
// layers blocks of which the dense layers attend every tile.
func (c *VSA) TFLOPsSaved(tl *attention.Tiling, topK, sparseForwards, layers, width int) float64 {
	n := int64(tl.Rows())
	perPair := 4 * float64(width)
	return float64(n*n-tl.AttendedPairs(topK)) * perPair * float64((layers-len(c.DenseLayers))*sparseForwards) / 1e12
}

// checkVSAKnobs validates the Video Sparse Attention knobs the families share (FastVideo's
// VSA_sparsity, vsa_dense_first_n_steps, vsa_dense_layers) for a DiT of numLayers blocks.
func checkVSAKnobs(sparsity float64, denseFirstSteps int, denseLayers []int, numLayers int) error {
	switch {
	case !(sparsity >= 0 && sparsity < 1): // NaN too
		return &api.RequestError{Field: "vsa_sparsity", Value: fmt.Sprint(sparsity), Allowed: "[0, 1)"}
	case denseFirstSteps < 0:
		return &api.RequestError{Field: "vsa_dense_first_n_steps", Value: fmt.Sprint(denseFirstSteps), Allowed: "0 or more"}
	}
	for _, b := range denseLayers {
		if b < 0 || b >= numLayers {
			return &api.RequestError{Field: "vsa_dense_layers", Value: fmt.Sprint(b), Allowed: fmt.Sprintf("0..%d", numLayers-1)}
		}
	}
	return nil
}
