package framefilter

import (
	"context"
	"errors"
	"fmt"
	"math"

	"fastvideo/fastvideo/family"
)

// Interpolator makes frames between decoded frames (the temporal fast mode's RIFE).
type Interpolator interface {
	// Interpolate returns, for each i, the frame at fraction t[i] in (0, 1) between frame i of a
	// and frame i of b (same size and count).
	Interpolate(ctx context.Context, a, b family.Frames, t []float64) (family.Frames, error)
	Close() error
}

// FrameSource says how one output frame of the temporal fast mode is made: a copy of source frame
// Left when Frac is 0, else the interpolation of Left and Left+1 at Frac.
type FrameSource struct {
	Left int
	Frac float64
}

// CopyFraction is the fraction at or below which an output position copies its left frame (the
// MLX FastH3 runtime's 1e-12).
const CopyFraction = 1e-12

// PositionSources resolves fractional source positions (H3: linspace(0, source-1, target)) the
// way the MLX FastH3 runtime does: a position at or past the last frame copies it, one whose
// fraction is at most CopyFraction copies its left frame, any other interpolates.
func PositionSources(positions []float64, source int) []FrameSource {
	out := make([]FrameSource, len(positions))
	for j, x := range positions {
		l := int(math.Floor(x))
		if l >= source-1 {
			out[j] = FrameSource{Left: source - 1}
			continue
		}
		f := x - float64(l)
		if f <= CopyFraction {
			f = 0
		}
		out[j] = FrameSource{Left: l, Frac: f}
	}
	return out
}

// FactorSources is the Wan MLX runtime's schedule (fastvideo/mlx_runtime/rife_interp.py,
// interpolate, then the first target frames: examples/inference/basic/mlx_wan_prompt_to_video.py):
// every source frame, then factor-1 frames at step/factor before the next one; output j is source
// j/factor, or the interpolation at (j mod factor)/factor.
func FactorSources(source, target, factor int) ([]FrameSource, error) {
	if factor < 2 || source < 2 || target > (source-1)*factor+1 {
		return nil, fmt.Errorf("fastvideo: %d source frames at factor %d cannot make %d", source, factor, target)
	}
	out := make([]FrameSource, target)
	for j := range out {
		out[j] = FrameSource{Left: j / factor, Frac: float64(j%factor) / float64(factor)}
	}
	return out, nil
}

// AlignedKeyframeCount is the Wan MLX runtime's source clip (fastvideo/mlx_runtime/rife_interp.py,
// aligned_keyframe_count): the fewest frames, 1 + a multiple of the VAE's temporal ratio, whose
// FactorSources schedule reaches target frames.
func AlignedKeyframeCount(target, factor, temporalRatio int) int {
	intervals := (target - 1 + factor - 1) / factor
	return (intervals+temporalRatio-1)/temporalRatio*temporalRatio + 1
}

// TemporalFilter is the temporal fast mode's frame filter: it turns the stream of decoded source
// frames into the output frames of its schedule, interpolating where the schedule says, clip by
// clip (holding the source frames a later output still needs, at most a clip and one frame).
type TemporalFilter struct {
	sources []FrameSource
	source  int // source frames the schedule expects
	load    func() (Interpolator, error)

	held     family.Frames // source frames base, base+1, ...
	base     int
	received int
	next     int // next output frame
}

// NewTemporalFilter checks a schedule over source frames.
func NewTemporalFilter(sources []FrameSource, source int) (*TemporalFilter, error) {
	if source < 2 || len(sources) < 2 {
		return nil, fmt.Errorf("fastvideo: temporal filter: %d outputs from %d frames", len(sources), source)
	}
	for j, s := range sources {
		if s.Left < 0 || s.Left >= source || !(s.Frac >= 0 && s.Frac < 1) || (s.Frac > 0 && s.Left == source-1) ||
			(j > 0 && s.Left < sources[j-1].Left) {
			return nil, fmt.Errorf("fastvideo: temporal filter: output %d from %+v of %d source frames", j, s, source)
		}
	}
	return &TemporalFilter{sources: sources, source: source}, nil
}

// UseInterpolator gives the filter its interpolator, loaded at the first frame that needs one
// (the pipeline binds the generator's RIFE).
func (f *TemporalFilter) UseInterpolator(load func() (Interpolator, error)) { f.load = load }

func (f *TemporalFilter) Name() string {
	return fmt.Sprintf("RIFE 4.25 %d -> %d frames", f.source, len(f.sources))
}

// Filter takes the next source frames and returns every output frame they complete.
func (f *TemporalFilter) Filter(ctx context.Context, in family.Frames) (family.Frames, error) {
	if in.Count == 0 {
		return family.Frames{}, nil
	}
	if f.received+in.Count > f.source {
		return family.Frames{}, fmt.Errorf("%d source frames, the schedule has %d", f.received+in.Count, f.source)
	}
	if f.held.Count > 0 && (in.Width != f.held.Width || in.Height != f.held.Height) {
		return family.Frames{}, fmt.Errorf("frames of %dx%d after %dx%d", in.Width, in.Height, f.held.Width, f.held.Height)
	}
	f.held = family.Frames{Width: in.Width, Height: in.Height, Count: f.held.Count + in.Count, RGB: append(f.held.RGB, in.RGB...)}
	f.received += in.Count
	return f.emit(ctx)
}

// Flush returns nothing: the last source frame completes the schedule; a short stream is an error.
func (f *TemporalFilter) Flush(context.Context) (family.Frames, error) {
	if f.next != len(f.sources) {
		return family.Frames{}, fmt.Errorf("the stream ended after %d of %d source frames (%d of %d outputs made)",
			f.received, f.source, f.next, len(f.sources))
	}
	return family.Frames{}, nil
}

// emit makes the outputs whose source frames have arrived (interpolations in one batch) and drops
// the source frames no later output needs.
func (f *TemporalFilter) emit(ctx context.Context) (family.Frames, error) {
	start := f.next
	for f.next < len(f.sources) {
		s := f.sources[f.next]
		need := s.Left
		if s.Frac > 0 {
			need++
		}
		if need >= f.received {
			break
		}
		f.next++
	}
	out, err := f.make(ctx, f.sources[start:f.next])
	if err != nil {
		return family.Frames{}, err
	}
	keep := f.received - 1 // the last frame is always kept: a later output may start there
	if f.next < len(f.sources) {
		keep = min(keep, f.sources[f.next].Left)
	}
	if drop := keep - f.base; drop > 0 {
		n := f.held.Width * f.held.Height * 3
		f.held.RGB = append([]byte(nil), f.held.RGB[drop*n:]...)
		f.held.Count -= drop
		f.base = keep
	}
	return out, nil
}

// make builds the given outputs from the held source frames.
func (f *TemporalFilter) make(ctx context.Context, srcs []FrameSource) (family.Frames, error) {
	w, h := f.held.Width, f.held.Height
	out := family.Frames{Width: w, Height: h, Count: len(srcs), RGB: make([]byte, len(srcs)*w*h*3)}
	var a, b family.Frames
	var ts []float64
	var slots []int
	for i, s := range srcs {
		if s.Frac == 0 {
			copy(out.Frame(i), f.held.Frame(s.Left-f.base))
			continue
		}
		a.RGB = append(a.RGB, f.held.Frame(s.Left-f.base)...)
		b.RGB = append(b.RGB, f.held.Frame(s.Left+1-f.base)...)
		ts, slots = append(ts, s.Frac), append(slots, i)
	}
	if len(ts) == 0 {
		return out, nil
	}
	if f.load == nil {
		return family.Frames{}, errors.New("no frame interpolator was given to the temporal fast mode")
	}
	interp, err := f.load()
	if err != nil {
		return family.Frames{}, err
	}
	a.Width, a.Height, a.Count = w, h, len(ts)
	b.Width, b.Height, b.Count = w, h, len(ts)
	mid, err := interp.Interpolate(ctx, a, b, ts)
	if err != nil {
		return family.Frames{}, err
	}
	if mid.Count != len(ts) || mid.Width != w || mid.Height != h {
		return family.Frames{}, fmt.Errorf("the interpolator gave %d frames of %dx%d for %d of %dx%d", mid.Count, mid.Width, mid.Height, len(ts), w, h)
	}
	for k, i := range slots {
		copy(out.Frame(i), mid.Frame(k))
	}
	return out, nil
}
