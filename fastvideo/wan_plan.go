package fastvideo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	wandit "fastvideo/dit/wan"
	"fastvideo/schedule"
)

// wanLadder is a Wan run's denoising ladder: one of the two samplers, and what the plan shows of
// it. The UniPC solver is stateful, so every run builds a fresh ladder.
type wanLadder struct {
	unipc *schedule.UniPC
	dmd   *schedule.DMDLadder
	// timesteps are fed to the DiT; sigmas are the ladder's noise levels (UniPC: steps+1 values
	// ending at 0; DMD: one per rung).
	timesteps, sigmas []float32
}

func (r *ResolvedRequest) wanLadder() (*wanLadder, error) {
	l := &wanLadder{}
	switch r.Sampler {
	case SamplerUniPC:
		u, err := schedule.NewUniPC(r.FlowShift, r.Steps)
		if err != nil {
			return nil, err
		}
		l.unipc, l.sigmas = u, append([]float32(nil), u.Sigmas...)
		for _, t := range u.Timesteps {
			l.timesteps = append(l.timesteps, float32(t))
		}
	case SamplerDMD:
		var d *schedule.DMDLadder
		var err error
		if r.WarpDenoisingSteps {
			d, err = schedule.NewWarpedDMDLadder(r.DMDSteps, r.FlowShift)
		} else {
			d, err = schedule.NewDMDLadder(r.DMDSteps)
		}
		if err != nil {
			return nil, err
		}
		l.dmd, l.sigmas = d, append([]float32(nil), d.Sigmas...)
		if r.WarpDenoisingSteps {
			l.timesteps = append([]float32(nil), d.WarpedTimesteps...)
		} else {
			for _, t := range d.Timesteps {
				l.timesteps = append(l.timesteps, float32(t))
			}
		}
	default:
		return nil, fmt.Errorf("fastvideo: unknown Wan sampler %q", r.Sampler)
	}
	return l, nil
}

// wanPlan is Plan for a Wan model.
func (r *ResolvedRequest) wanPlan(dtype DType) (*GenerationPlan, error) {
	m, ws, g := r.Model, r.Model.Wan, r.WanGeometry
	ladder, err := r.wanLadder()
	if err != nil {
		return nil, err
	}
	forwards := 1
	if r.CFG {
		forwards = 2
	}
	p := &GenerationPlan{
		Model: m.Name, Preset: r.Preset.Name, Family: m.Family,
		Height: r.Height, Width: r.Width, CanvasHeight: r.Height, CanvasWidth: r.Width,
		RequestedFrames: r.RequestedFrames, NumFrames: r.NumFrames, FPS: r.FPS,
		DurationSeconds: float64(r.NumFrames) / float64(r.FPS), Steps: r.Steps, Seed: r.Seed,
		VideoLatentFrames: g.LatentFrames, LatentHeight: g.LatentHeight, LatentWidth: g.LatentWidth,
		LatentChannels: g.VAE.LatentChannels,
		LatentShape:    []int{g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth},
		TokenGrid:      []int{g.TokenFrames, g.TokenHeight, g.TokenWidth}, Tokens: g.Tokens, TextTokens: ws.TextLen,
		Sampler: r.Sampler, FlowShift: r.FlowShift, GuidanceScale: r.Guidance, CFG: r.CFG, ForwardsPerStep: forwards,
		NegativePrompt: r.NegativePrompt, DMDSteps: r.DMDSteps, WarpDenoisingSteps: r.WarpDenoisingSteps,
		VideoSigmas: ladder.sigmas, VideoTimesteps: ladder.timesteps,
	}
	perStep := float64(forwards) * ws.DiT.ForwardFLOPs(g.Tokens, ws.TextLen)
	p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal = perStep/1e12, perStep*float64(r.Steps)/1e12
	f32, half := wanParamGroups(ws.DiT)
	p.DiTParams = f32 + half
	if dtype == DTypeAuto {
		dtype = ws.WeightsDType
	}
	p.WeightsDType = string(dtype)
	switch dtype {
	case BF16:
		p.WeightsBytes = 4*f32 + 2*half
	case F32:
		p.WeightsBytes = 4 * (f32 + half)
	default:
		return nil, &RequestError{Field: "dtype", Value: string(dtype), Allowed: `"bf16" or "f32"`}
	}
	return p, nil
}

// wanParamGroups splits the DiT's parameters (dit/wan's table, biases included) by the precision
// the model keeps them in: the boundary modules (patch embedding, time embedder, proj_out) and
// every vector the reference computes with in float32 (norm weights, scale_shift_tables) stay
// float32; the rest takes the compute dtype.
func wanParamGroups(cfg wandit.Config) (f32, half int64) {
	params, _ := wandit.Params(cfg) // an invalid config has no table: both groups stay empty
	for _, p := range params {
		name, shape := p.Name, p.Shape
		n := int64(1)
		for _, d := range shape {
			n *= int64(d)
		}
		switch {
		case strings.HasPrefix(name, "patch_embedding."), strings.HasPrefix(name, "condition_embedder.time_embedder."),
			strings.HasPrefix(name, "proj_out."), strings.HasSuffix(name, "scale_shift_table"),
			strings.HasSuffix(name, "norm_q.weight"), strings.HasSuffix(name, "norm_k.weight"),
			strings.HasSuffix(name, "norm2.weight"), strings.HasSuffix(name, "norm2.bias"):
			f32 += n
		default:
			half += n
		}
	}
	return f32, half
}

// writeWanTable is WriteTable for a Wan plan.
func (p *GenerationPlan) writeWanTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("model", "%s (preset %s)", p.Model, p.Preset)
	row("output", "%dx%d (HxW), %d frames at %d fps = %.3f s, video only", p.Height, p.Width, p.NumFrames, p.FPS, p.DurationSeconds)
	row("latent", "%d x %d x %d x %d (C x T x H x W)", p.LatentChannels, p.VideoLatentFrames, p.LatentHeight, p.LatentWidth)
	row("tokens", "%d = %d x %d x %d, cross-attention over %d text rows", p.Tokens, p.TokenGrid[0], p.TokenGrid[1], p.TokenGrid[2], p.TextTokens)
	switch p.Sampler {
	case SamplerDMD:
		warp := "raw"
		if p.WarpDenoisingSteps {
			warp = fmt.Sprintf("warped onto the shift-%g grid", p.FlowShift)
		}
		row("sampler", "DMD, rungs %v (%s), no guidance; seed %d", p.DMDSteps, warp, p.Seed)
	default:
		cfg := "no guidance"
		if p.CFG {
			cfg = fmt.Sprintf("CFG %g (2 forwards per step)", p.GuidanceScale)
		}
		row("sampler", "UniPC, %d steps at shift %g, %s; seed %d", p.Steps, p.FlowShift, cfg, p.Seed)
	}
	row("timesteps", "%s", floats(p.VideoTimesteps))
	row("sigmas", "%s", floats(p.VideoSigmas))
	row("dit compute", "%.1f TFLOP per step, %.1f TFLOP total", p.DiTTFLOPsPerStep, p.DiTTFLOPsTotal)
	row("dit weights", "%.2f B params, %.2f GiB in %s", float64(p.DiTParams)/1e9, float64(p.WeightsBytes)/(1<<30), p.WeightsDType)
	return tw.Flush()
}
