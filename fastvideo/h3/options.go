package h3

// FamilyName is the MiniMax H3 family's identifier (ModelInfo.Family, Plan.Family).
const FamilyName = "minimax_h3"

// Options are MiniMax H3's own request knobs (family.Request.Options).
type Options struct {
	// AudioNoise replaces the initial audio noise drawn from the seed: 2·C·N float32 values in the
	// stereo latent layout [2][C][N] (PlanDetails.AudioNoiseLen values). Inject the reference's
	// noise to reproduce a PyTorch run.
	AudioNoise []float32
}

// FamilyName tells the pipeline which family the options belong to.
func (*Options) FamilyName() string { return FamilyName }
