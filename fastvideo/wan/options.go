package wan

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
}

// FamilyName tells the pipeline which family the options belong to.
func (*Options) FamilyName() string { return FamilyName }
