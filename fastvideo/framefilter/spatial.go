package framefilter

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/imageops"
)

// The fast modes' unsharp strengths when family.Request.Sharpen is unset: 0.4 after the spatial mode's
// resize (DEFAULT_FAST_SPATIAL_SHARPEN, fastvideo/mlx_runtime/fast_spatial.py), 0.6 after the
// temporal mode's interpolation (--fast-sharpen), and one pass at the larger of the two when both
// modes run (the MLX FastH3 runtime, examples/inference/basic/mlx_fasth3.py).
const (
	SpatialSharpen  = 0.4
	TemporalSharpen = 0.6
)

// DefaultUpsample is the spatial mode's resize kernel when family.Request.Upsample is empty
// (DEFAULT_PIXEL_UPSAMPLE_MODE, fastvideo/mlx_runtime/frame_upsample.py).
const DefaultUpsample = "lanczos"

// FastPixelKnobs are a request's validated pixel-space knobs of the fast modes.
type FastPixelKnobs struct {
	Upsample imageops.Interpolation
	Sharpen  float64 // the one unsharp pass's strength; 0: none
}

// ResolveFastPixelKnobs validates family.Request.Upsample and family.Request.Sharpen and applies upstream's
// defaults: each knob is invalid unless a mode that uses it is on (Upsample: the spatial mode;
// Sharpen: either), Sharpen must be finite and >= 0 (plan_fast_spatial rejects a negative one).
func ResolveFastPixelKnobs(req api.Request) (FastPixelKnobs, error) {
	var k FastPixelKnobs
	name := DefaultUpsample
	if req.Upsample != "" {
		if !req.FastSpatial {
			return k, &api.RequestError{Field: "upsample", Value: req.Upsample, Allowed: "empty unless the spatial fast mode is on"}
		}
		name = req.Upsample
	}
	mode, err := imageops.ParseInterpolation(name)
	if err != nil {
		return k, &api.RequestError{Field: "upsample", Value: req.Upsample,
			Allowed: strings.Join(imageops.InterpolationNames, ", ") + " (OpenCV's INTER_LANCZOS4, INTER_CUBIC, INTER_LINEAR, INTER_NEAREST)"}
	}
	k.Upsample = mode
	switch {
	case req.Sharpen != nil && !req.Fast && !req.FastSpatial:
		return k, &api.RequestError{Field: "sharpen", Value: *req.Sharpen, Allowed: "unset unless a fast mode is on"}
	case req.Sharpen != nil:
		if s := *req.Sharpen; !(s >= 0) || math.IsInf(s, 1) {
			return k, &api.RequestError{Field: "sharpen", Value: s, Allowed: "a finite strength >= 0 (0 turns the unsharp pass off)"}
		}
		k.Sharpen = *req.Sharpen
	case req.Fast && req.FastSpatial:
		k.Sharpen = max(SpatialSharpen, TemporalSharpen)
	case req.FastSpatial:
		k.Sharpen = SpatialSharpen
	case req.Fast:
		k.Sharpen = TemporalSharpen
	}
	return k, nil
}

// PixelSteps are the per-frame pixel operations of the fast modes, in upstream's order
// (fastvideo/mlx_runtime/fast_spatial.py, apply_fast_spatial_upsample, and frame_upsample.py,
// upsample_frame): center-crop, resize, unsharp. A zero size skips its step, a zero Sharpen the
// unsharp pass.
type PixelSteps struct {
	// CropWidth, CropHeight: the window kept at the center of the decoded frame (the spatial mode's
	// stage-1 size inside its 32-aligned canvas).
	CropWidth, CropHeight int
	// Width, Height: the size to resize to with Interpolation (skipped when the frame has it).
	Width, Height int
	Interpolation imageops.Interpolation
	Sharpen       float64
}

// PixelFilter is the frame filter running PixelSteps on every frame, frames spread over the CPU
// cores. It holds no frames back.
type PixelFilter struct {
	steps   PixelSteps
	workers int
}

// NewPixelFilter checks the steps; workers <= 0 uses GOMAXPROCS goroutines.
func NewPixelFilter(s PixelSteps, workers int) (*PixelFilter, error) {
	if s.CropWidth < 0 || s.CropHeight < 0 || (s.CropWidth == 0) != (s.CropHeight == 0) ||
		s.Width < 0 || s.Height < 0 || (s.Width == 0) != (s.Height == 0) {
		return nil, fmt.Errorf("fastvideo: pixel filter: crop %dx%d, resize %dx%d (both sides or neither)",
			s.CropWidth, s.CropHeight, s.Width, s.Height)
	}
	if !(s.Sharpen >= 0) || math.IsInf(s.Sharpen, 1) {
		return nil, fmt.Errorf("fastvideo: pixel filter: sharpen %v", s.Sharpen)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &PixelFilter{steps: s, workers: workers}, nil
}

// Name lists the steps, sizes as HxW like the plan: "center-crop 240x416, lanczos to 480x832, sharpen 0.4".
func (f *PixelFilter) Name() string {
	s := f.steps
	var parts []string
	if s.CropWidth > 0 {
		parts = append(parts, fmt.Sprintf("center-crop %dx%d", s.CropHeight, s.CropWidth))
	}
	if s.Width > 0 {
		parts = append(parts, fmt.Sprintf("%s to %dx%d", s.Interpolation, s.Height, s.Width))
	}
	if s.Sharpen > 0 {
		parts = append(parts, fmt.Sprintf("sharpen %g", s.Sharpen))
	}
	if len(parts) == 0 {
		return "pixel identity"
	}
	return strings.Join(parts, ", ")
}

// outSize is the size of a frame of w x h after the steps.
func (f *PixelFilter) outSize(w, h int) (int, int) {
	if f.steps.CropWidth > 0 {
		w, h = f.steps.CropWidth, f.steps.CropHeight
	}
	if f.steps.Width > 0 {
		w, h = f.steps.Width, f.steps.Height
	}
	return w, h
}

// Filter runs the steps on every frame of the clip.
func (f *PixelFilter) Filter(ctx context.Context, in family.Frames) (family.Frames, error) {
	if in.Count == 0 {
		return in, nil
	}
	if in.Width <= 0 || in.Height <= 0 || len(in.RGB) != in.Count*in.Width*in.Height*3 {
		return family.Frames{}, fmt.Errorf("%d bytes for %d frames of %dx%d RGB", len(in.RGB), in.Count, in.Width, in.Height)
	}
	w, h := f.outSize(in.Width, in.Height)
	out := family.Frames{Width: w, Height: h, Count: in.Count, RGB: make([]byte, in.Count*w*h*3)}
	errs := make([]error, in.Count)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(f.workers, in.Count) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = f.frame(in.Frame(i), in.Width, in.Height, out.Frame(i))
			}
		}()
	}
	for i := 0; i < in.Count && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return family.Frames{}, err
	}
	for _, err := range errs {
		if err != nil {
			return family.Frames{}, err
		}
	}
	return out, nil
}

// frame runs the steps on one frame into dst (its output size).
func (f *PixelFilter) frame(rgb []byte, w, h int, dst []byte) error {
	s, m := f.steps, imageops.Image{Width: w, Height: h, Pix: rgb}
	var err error
	if s.CropWidth > 0 {
		if m, err = imageops.CenterCrop(m, s.CropWidth, s.CropHeight); err != nil {
			return err
		}
	}
	if s.Width > 0 {
		if m, err = imageops.Resize(m, s.Width, s.Height, s.Interpolation); err != nil {
			return err
		}
	}
	if s.Sharpen > 0 {
		if m, err = imageops.Unsharp(m, s.Sharpen); err != nil {
			return err
		}
	}
	copy(dst, m.Pix)
	return nil
}

// Flush has nothing to release: every frame leaves Filter.
func (f *PixelFilter) Flush(context.Context) (family.Frames, error) { return family.Frames{}, nil }

// FastFilters are the fast modes' frame filters in the MLX runtime's order
// (examples/inference/basic/mlx_wan_prompt_to_video.py, _postprocess_video; the FastH3 runtime
// crops first): pixel's center-crop, then the temporal filter (nil: none) at the reduced size, then
// pixel's resize and one unsharp pass of strength sharpen. No step, no filter.
func FastFilters(pixel PixelSteps, temporal family.FrameFilter, sharpen float64) ([]family.FrameFilter, error) {
	var out []family.FrameFilter
	add := func(s PixelSteps) error {
		if s.CropWidth == 0 && s.Width == 0 && s.Sharpen == 0 {
			return nil
		}
		f, err := NewPixelFilter(s, 0)
		if err == nil {
			out = append(out, f)
		}
		return err
	}
	if temporal != nil {
		if err := add(PixelSteps{CropWidth: pixel.CropWidth, CropHeight: pixel.CropHeight}); err != nil {
			return nil, err
		}
		pixel.CropWidth, pixel.CropHeight = 0, 0
		out = append(out, temporal)
	}
	pixel.Sharpen = sharpen
	if err := add(pixel); err != nil {
		return nil, err
	}
	return out, nil
}
