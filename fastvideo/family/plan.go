package family

import (
	"fmt"

	"fastvideo/fastvideo/api"
)

// NewPlan starts the plan of a resolution: its common fields, the output canvas, the video latent
// [C, T, H, W] and the video ladder; the family adds the rest.
func (r *Resolved) NewPlan(latent [4]int, sigmas, timesteps []float32) *api.Plan {
	return &api.Plan{
		Model: r.Model.Name, Preset: r.Preset, Family: r.Model.Family,
		Height: r.Height, Width: r.Width, CanvasHeight: r.Height, CanvasWidth: r.Width,
		RequestedFrames: r.RequestedFrames, NumFrames: r.NumFrames, FPS: r.FPS,
		DurationSeconds: float64(r.NumFrames) / float64(r.FPS), Steps: r.Steps, Seed: r.Seed,
		LatentChannels: latent[0], VideoLatentFrames: latent[1], LatentHeight: latent[2], LatentWidth: latent[3],
		LatentShape:   latent[:],
		GuidanceScale: r.Guidance, ForwardsPerStep: 1,
		VideoSigmas: sigmas, VideoTimesteps: timesteps,
		Decoder: r.Decoder, Preview: r.Preview,
	}
}

// PlanModel resolves req against m without requiring a prompt, plans it at dtype and returns the
// family's details as their own type D (e.g. *h3.PlanDetails).
func PlanModel[D api.PlanDetails](m Model, req api.Request, dtype api.DType) (*api.Plan, D, error) {
	var none D
	r, err := m.Resolve(req, false)
	if err != nil {
		return nil, none, err
	}
	p, err := r.Plan(dtype)
	if err != nil {
		return nil, none, err
	}
	d, ok := p.Details.(D)
	if !ok {
		return nil, none, fmt.Errorf("fastvideo: the plan of %s has details %T, not %T", p.Model, p.Details, none)
	}
	return p, d, nil
}
