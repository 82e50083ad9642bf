package h3

import "fastvideo/fastvideo/familykit"

// FamilyName is the MiniMax H3 family's identifier (ModelInfo.Family, Plan.Family).
const FamilyName = "minimax_h3"

// Options are MiniMax H3's own request knobs (family.Request.Options).
type Options struct {
	// AudioNoise replaces the initial audio noise drawn from the seed: 2·C·N float32 values in the
	// stereo latent layout [2][C][N] (PlanDetails.AudioNoiseLen values). Inject the reference's
	// noise to reproduce a PyTorch run.
	AudioNoise []float32
	// VSA tunes Video Sparse Attention (FastH3 checkpoints only; nil keeps the defaults).
	VSA *VSA
}

// FamilyName tells the pipeline which family the options belong to.
func (*Options) FamilyName() string { return FamilyName }

// VSA are the Video Sparse Attention knobs (FastVideo's VSA_sparsity, VSA_tile_size, vsa_mode,
// vsa_dense_first_n_steps, vsa_dense_layers; familykit.VSAKnobs documents each). A FastH3 checkpoint
// runs with VSA by default, as trained (sparsity 0.9, 64-row tiles, exempt prefix), or with its
// fastvideo_inference.json values.
type VSA = familykit.VSAKnobs
