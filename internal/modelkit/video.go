package modelkit

import (
	"context"

	"fastvideo/internal/media"
	"fastvideo/internal/parallel"
)

// Frames is a run of consecutive decoded frames of a video VAE, handed to its Decode callback in video
// order. Each VAE names its own instance (h3video.Frames, wan.Frames), whose pixel space M maps to
// [0, 1].
type Frames[M PixelSpace] struct {
	Start  int // index of the first frame in the whole video
	Count  int
	Height int
	Width  int
	// Sample is the decoder output [3][Count][Height][Width] in the VAE's pixel space M. The callback
	// owns it.
	Sample []float32
}

// PixelSpace is a video VAE's output space: ToUnit maps a value of channel c to [0, 1] as the VAE's
// pipeline does, NaN staying NaN as with torch.clamp.
type PixelSpace interface {
	ToUnit(c int, v float32) float32
}

// Pixels maps the frames to [0, 1] as the VAE's pipeline does. The layout stays [3][Count][Height][Width].
func (f Frames[M]) Pixels() []float32 {
	var space M
	out := make([]float32, len(f.Sample))
	plane := f.Count * f.Height * f.Width
	parallel.Ranges(plane, parallelChunk, func(lo, hi int) {
		for c := 0; c < 3 && (c+1)*plane <= len(f.Sample); c++ {
			for i := c*plane + lo; i < c*plane+hi; i++ {
				out[i] = space.ToUnit(c, f.Sample[i])
			}
		}
	})
	return out
}

// Span is the run's first frame, frame count and [0, 1] pixels (FrameRun).
func (f Frames[M]) Span() (start, count int, pixels []float32) { return f.Start, f.Count, f.Pixels() }

// RGB24 appends the frames to dst as interleaved 8-bit RGB, frame after frame, each row-major
// [Height][Width][3] (ffmpeg's rgb24), and returns the extended slice: the pixel mapping and the
// quantization (media.Quantize) in one pass, spread over the host's cores, since this host pass over
// every decoded value sits between the decoder and the encoder.
func (f Frames[M]) RGB24(dst []byte) []byte {
	var space M
	plane := f.Count * f.Height * f.Width
	base := len(dst)
	dst = append(dst, make([]byte, 3*plane)...)
	out := dst[base:]
	parallel.Ranges(plane, parallelChunk, func(lo, hi int) {
		for c := 0; c < 3 && (c+1)*plane <= len(f.Sample); c++ {
			in := f.Sample[c*plane : (c+1)*plane]
			for i := lo; i < hi; i++ {
				out[3*i+c] = media.Quantize(space.ToUnit(c, in[i]))
			}
		}
	})
	return dst
}

// parallelChunk is the least work worth a goroutine (values a channel).
const parallelChunk = 1 << 16

// FrameRun is a run of consecutive decoded frames of a video VAE.
type FrameRun interface {
	// Span is the run's first frame, its frame count and its [0, 1] pixels [C][count][H][W].
	Span() (start, count int, pixels []float32)
}

// DecodeLatents de-normalizes DiT-space latents into VAE space with denormalize and decodes them with
// decode, which hands emit each run of frames in order: a video VAE's Decode.
func DecodeLatents[F any](ctx context.Context, latents []float32, shape []int, emit func(F) error,
	denormalize func([]float32, []int) ([]float32, error),
	decode func(context.Context, []float32, []int, func(F) error) error) error {
	z, err := denormalize(latents, shape)
	if err != nil {
		return err
	}
	return decode(ctx, z, shape, emit)
}

// DecodeToPixels runs decode (a video VAE's Decode) and assembles the whole video [1, C, frames, H, W]
// in [0, 1], whose shape outputShape gives for the latent shape; it returns the video and its shape.
func DecodeToPixels[F FrameRun](ctx context.Context, latents []float32, shape []int,
	outputShape func([]int) ([]int, error),
	decode func(context.Context, []float32, []int, func(F) error) error) ([]float32, []int, error) {
	out, err := outputShape(shape)
	if err != nil {
		return nil, nil, err
	}
	nf, plane := out[2], out[3]*out[4]
	video := make([]float32, out[1]*nf*plane)
	err = decode(ctx, latents, shape, func(f F) error {
		start, count, pix := f.Span()
		return media.PlaceFrames(video, nf, pix, start, count, plane)
	})
	if err != nil {
		return nil, nil, err
	}
	return video, out, nil
}

// MapChannels applies channel k's map to every value of channel k of channel-major latents (a
// [1, C, T, H, W] video: channels runs of plane values) into a new slice; perChannel is asked once
// per channel, so a VAE reads its statistics once a channel rather than once a value.
func MapChannels(latents []float32, channels, plane int, perChannel func(k int) func(float32) float32) []float32 {
	out := make([]float32, len(latents))
	for k := 0; k < channels; k++ {
		f := perChannel(k)
		for i := k * plane; i < (k+1)*plane; i++ {
			out[i] = f(latents[i])
		}
	}
	return out
}

// Elements is the number of values a tensor of shape dims holds (1 for a scalar): what a latent-shape
// check compares with the slice's length, and what a call that has the shape but no values
// (Prepare, OutputShape) hands it in the slice's place.
func Elements(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}
