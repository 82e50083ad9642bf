package family

import (
	"context"

	"fastvideo/fastvideo/api"
)

// Frames is a run of decoded video frames: Count frames of Width x Height pixels, packed RGB
// (rgb24, row-major, top row first), back to back in RGB.
type Frames struct {
	Width, Height, Count int
	RGB                  []byte
}

// Frame returns frame i (a slice of RGB, capacity-limited so appends never touch the next frame).
func (f Frames) Frame(i int) []byte {
	n := f.Width * f.Height * 3
	return f.RGB[i*n : (i+1)*n : (i+1)*n]
}

// WantsFrames reports whether a run of r decodes frames: for the file, or for Result.Frames. The
// pipeline hands Stages.Decode a nil sink otherwise, and a family's decoder prewarm skips the video
// decoder.
func WantsFrames(r api.Request) bool { return !r.SkipSave || r.ReturnFrames }

// FrameSink takes decoded frames in stream order.
type FrameSink func(Frames) error

// FrameFilter transforms the decoded frame stream between the decode and mux stages: frames in,
// frames out, clip by clip (temporal interpolation, spatial upsampling and sharpening are frame
// filters). A filter may hold frames back (an interpolator needs the next clip's first frame) and
// must release everything by Flush. Its output must have the plan's output size.
type FrameFilter interface {
	// Name identifies the filter in messages.
	Name() string
	// Filter takes the next clip and returns the frames it releases now (possibly none).
	Filter(ctx context.Context, in Frames) (Frames, error)
	// Flush returns the frames still held at the end of the stream.
	Flush(ctx context.Context) (Frames, error)
}

// Identity is the frame filter that passes every frame through unchanged.
type Identity struct{}

func (Identity) Name() string { return "identity" }

func (Identity) Filter(_ context.Context, in Frames) (Frames, error) { return in, nil }

func (Identity) Flush(context.Context) (Frames, error) { return Frames{}, nil }
