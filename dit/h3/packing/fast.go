package packing

import (
	"fmt"

	"fastvideo/internal/hostmath"
)

// FastTemporalPlan is the MLX temporal fast mode: denoise and decode a shorter
// H3-valid clip whose RoPE times are stretched over the full timeline, then
// interpolate frames (RIFE) up to the target. Audio keeps all latents of the
// target.
type FastTemporalPlan struct {
	TargetFrames       int     `json:"target_frames"`
	SourceFrames       int     `json:"source_frames"`
	Factor             int     `json:"factor"`
	TargetLatentFrames int     `json:"target_latent_frames"`
	SourceLatentFrames int     `json:"source_latent_frames"`
	VideoTemporalScale float64 `json:"video_temporal_scale"`
}

// PlanFastTemporal picks the smallest aligned source clip covering the target
// timeline at the given factor (>= 2): source = align(ceil((target-1)/factor)+1),
// which must be shorter than the aligned target. 124 frames -> 73 source
// frames (22 latents), scale 1.7391304347826073.
func PlanFastTemporal(targetFrames, factor int) (FastTemporalPlan, error) {
	target, err := AlignNumFrames(targetFrames)
	if err != nil {
		return FastTemporalPlan{}, err
	}
	if factor < 2 || factor > MaxNumFrames {
		return FastTemporalPlan{}, fmt.Errorf("fast factor must be 2 to %d, got %d", MaxNumFrames, factor)
	}
	ideal := ceilDiv(target-1, factor) + 1
	source, err := AlignNumFrames(ideal)
	if err != nil {
		return FastTemporalPlan{}, err
	}
	if source >= target {
		return FastTemporalPlan{}, fmt.Errorf("fast factor %d does not reduce the H3-aligned target of %d frames", factor, target)
	}
	st, err := VideoLatentFrames(source)
	if err != nil {
		return FastTemporalPlan{}, err
	}
	tt, err := VideoLatentFrames(target)
	if err != nil {
		return FastTemporalPlan{}, err
	}
	sg, tg := TemporalGrid(st, 0, 1), TemporalGrid(tt, 0, 1)
	return FastTemporalPlan{
		TargetFrames: target, SourceFrames: source, Factor: factor,
		TargetLatentFrames: tt, SourceLatentFrames: st,
		VideoTemporalScale: tg[len(tg)-1] / sg[len(sg)-1],
	}, nil
}

// InterpolationPositions are the fractional source-frame positions of each
// output frame, linspace(0, source-1, target) in float64 (NumPy, inclusive).
func (p FastTemporalPlan) InterpolationPositions() []float64 {
	return hostmath.Linspace(0, float64(p.SourceFrames-1), p.TargetFrames)
}

// FastSpatialPlan is the MLX spatial fast mode: denoise and decode on a
// smaller canvas covering target/scale, center-crop to the stage-1 size, then
// resample to the target in pixel space.
type FastSpatialPlan struct {
	TargetHeight int `json:"target_height"`
	TargetWidth  int `json:"target_width"`
	Stage1Height int `json:"stage1_height"`
	Stage1Width  int `json:"stage1_width"`
	CanvasHeight int `json:"canvas_height"`
	CanvasWidth  int `json:"canvas_width"`
	Scale        int `json:"scale"`
}

// PlanFastSpatial: stage1 = ceil(target/scale), canvas = stage1 rounded up to
// 32, rejected unless it is smaller in area than the target's canvas.
// 480x832 -> stage1 240x416 -> canvas 256x416.
func PlanFastSpatial(height, width, scale int) (FastSpatialPlan, error) {
	if scale < 2 || scale > MaxCanvasSide {
		return FastSpatialPlan{}, fmt.Errorf("fast-spatial scale must be 2 to %d, got %d", MaxCanvasSide, scale)
	}
	th, tw, err := CeilCanvas(height, width)
	if err != nil {
		return FastSpatialPlan{}, err
	}
	s1h, s1w := ceilDiv(height, scale), ceilDiv(width, scale)
	ch, cw, err := CeilCanvas(s1h, s1w)
	if err != nil {
		return FastSpatialPlan{}, err
	}
	if ch*cw >= th*tw {
		return FastSpatialPlan{}, fmt.Errorf("fast-spatial scale %d does not reduce the H3 canvas for %dx%d (stage-1 canvas %dx%d vs %dx%d)",
			scale, height, width, ch, cw, th, tw)
	}
	return FastSpatialPlan{
		TargetHeight: height, TargetWidth: width, Stage1Height: s1h, Stage1Width: s1w,
		CanvasHeight: ch, CanvasWidth: cw, Scale: scale,
	}, nil
}
