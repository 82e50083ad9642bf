package wan

import "fastvideo/fastvideo/familykit"

// FamilyName is the Wan family's identifier (ModelInfo.Family, Plan.Family).
const FamilyName = "wan"

// Options are Wan's own request knobs (family.Request.Options).
type Options struct {
	// RenoiseNoise (DMD samplers only) replaces the fresh noise drawn before every DMD step after
	// the first: (steps-1)·C·T·Hl·Wl float32 values, one [C][T][Hl][Wl] block per step, in order
	// (PlanDetails.RenoiseNoiseLen). nil continues the seed's video noise stream after the initial
	// noise, as FastVideo draws both from one generator.
	RenoiseNoise []float32
	// WarpDenoisingSteps (DMD samplers only) feeds the DMD rungs warped onto the model's flow-shift
	// training grid, t' = grid[1000 - t] (1000, 757, 522 -> 1000, 939.67, 845.21 at shift 5),
	// instead of the raw integers. FastVideo's torch DMD stage
	// (fastvideo/pipelines/stages/denoising.py, DmdDenoisingStage) and the published FastWan
	// distillation recipes do not warp; its Apple MLX runtime warps for Wan2.2-5B (FastMetal-5B),
	// and upstream calls the better choice for 5B unresolved, so both are offered. nil: the
	// model's default (false for every FastWan checkpoint).
	WarpDenoisingSteps *bool
	// VSA tunes Video Sparse Attention (checkpoints whose transformer carries to_gate_compress; nil
	// keeps the defaults).
	VSA *VSA
	// AttentionWindow makes the DiT's self-attention windowed with sink tokens, the MLX Wan runtime's
	// FASTVIDEO_MLX_WINDOW (nil or 0 tokens: off). It excludes VSA (asking both is a RequestError); on
	// a VSA-trained checkpoint it runs instead of VSA. The checkpoints are dense-trained, so the video
	// drifts from the dense run's: the run says so in Result.Warnings.
	AttentionWindow *AttentionWindow
}

// AttentionWindow is the windowed attention a request asks for (familykit.AttentionWindow documents
// the knobs).
type AttentionWindow = familykit.AttentionWindow

// FamilyName tells the pipeline which family the options belong to.
func (*Options) FamilyName() string { return FamilyName }

// VSA are the Video Sparse Attention knobs of a VSA-trained checkpoint (FastVideo's VSA_sparsity, and
// as for H3 dense first steps and dense layers). The FastWan students run with VSA by default at the
// sparsity FastVideo runs them (0.8 for FastWan2.1-1.3B, 0.9 for 14B: examples/inference/basic/basic_dmd.py,
// scripts/inference/inference_wan_VSA_DMD_1_3B.yaml, examples/inference/gradio/serving/ray_serve_backend.py;
// 0.8 for FastWan2.2-5B as distilled). Wan's tiles are always (4,4,4) = 64 rows and there is no prefix,
// so there is no tile size or mode to choose.
type VSA struct {
	// Off runs dense attention (the trained gates then go unused).
	Off bool
	// Sparsity in [0, 1): the fraction of key tiles each query tile drops; nil keeps the default.
	Sparsity *float64
	// DenseFirstSteps runs the first N denoising steps with every tile selected.
	DenseFirstSteps int
	// DenseLayers lists blocks that always select every tile.
	DenseLayers []int
}
