package modelkit

import (
	"context"

	"fastvideo/internal/media"
)

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
