package packing

import (
	"fmt"
	"math"
)

// KeyframeEncodeSeed seeds the generator of the keyframe posterior samples (upstream's
// MINIMAX_H3_KEYFRAME_ENCODE_SEED, fastvideo/pipelines/basic/minimax_h3/packing.py): it is fixed,
// independent of the request seed.
const KeyframeEncodeSeed = 42

// KeyframeResize is how one keyframe image becomes a canvas-sized frame, as
// prepare_keyframe_image (fastvideo/pipelines/basic/minimax_h3/packing.py) does it: resize the
// whole image to ResizeWidth x ResizeHeight with PIL's LANCZOS filter, then crop the canvas
// rectangle at (CropLeft, CropTop). Identity means the image already has the canvas size and is
// used untouched (no resampling at all).
type KeyframeResize struct {
	Identity                  bool
	ResizeWidth, ResizeHeight int
	CropLeft, CropTop         int
}

// PlanKeyframeResize computes the resize of a srcWidth x srcHeight image onto a width x height
// canvas. stretch resizes straight to the canvas (aspect not kept); otherwise the image is scaled
// to cover the canvas (each side Python-rounded, at least the canvas side) and center-cropped.
// Upstream stretches the first keyframe given (the first frame, or the last frame when it is the
// only one) and covers-and-crops the second.
func PlanKeyframeResize(srcWidth, srcHeight, width, height int, stretch bool) (KeyframeResize, error) {
	if srcWidth <= 0 || srcHeight <= 0 || width <= 0 || height <= 0 {
		return KeyframeResize{}, fmt.Errorf("packing: keyframe %dx%d onto a %dx%d canvas: sizes must be positive",
			srcWidth, srcHeight, width, height)
	}
	if srcWidth == width && srcHeight == height {
		return KeyframeResize{Identity: true, ResizeWidth: width, ResizeHeight: height}, nil
	}
	if stretch {
		return KeyframeResize{ResizeWidth: width, ResizeHeight: height}, nil
	}
	scale := math.Max(float64(width)/float64(srcWidth), float64(height)/float64(srcHeight))
	rw := max(width, int(math.RoundToEven(float64(srcWidth)*scale)))
	rh := max(height, int(math.RoundToEven(float64(srcHeight)*scale)))
	return KeyframeResize{ResizeWidth: rw, ResizeHeight: rh, CropLeft: (rw - width) / 2, CropTop: (rh - height) / 2}, nil
}

// KeyframeAnchors lists the anchors of the keyframes given, in upstream's order: the first frame,
// then the last frame.
func KeyframeAnchors(first, last bool) []Anchor {
	var out []Anchor
	if first {
		out = append(out, AnchorFirst)
	}
	if last {
		out = append(out, AnchorLast)
	}
	return out
}

// KeyframePixels turns an interleaved RGB8 frame (height x width x 3, the prepared keyframe) into
// the [1, 3, 1, height, width] planes of [0, 1] values the VAE encoder takes: uint8/255 in float32,
// as the latent preparation stage does before normalize_pixels.
func KeyframePixels(rgb []uint8, width, height int) ([]float32, error) {
	if width <= 0 || height <= 0 || len(rgb) != width*height*3 {
		return nil, fmt.Errorf("packing: keyframe of %d bytes is not a %dx%d RGB8 image", len(rgb), width, height)
	}
	plane := width * height
	out := make([]float32, 3*plane)
	for i := 0; i < plane; i++ {
		for c := 0; c < 3; c++ {
			out[c*plane+i] = float32(rgb[3*i+c]) / 255
		}
	}
	return out, nil
}

// ScaleNoise mixes clean condition rows with noise at the clean fraction t, as the H3 scheduler's
// scale_noise (fastvideo/models/schedulers/scheduling_minimax_h3.py): t·clean + (1 − t)·noise, in
// float32. FL2VA conditions at t = KeyframeNoiseAug (0.999).
func ScaleNoise(clean, noise []float32, t float32) ([]float32, error) {
	if len(clean) != len(noise) {
		return nil, fmt.Errorf("packing: %d clean condition values but %d noise values", len(clean), len(noise))
	}
	keep := 1 - t
	out := make([]float32, len(clean))
	for i := range clean {
		// Explicit conversions round each product as torch does (no fused multiply-add).
		out[i] = float32(t*clean[i]) + float32(keep*noise[i])
	}
	return out, nil
}

// KeyframeConditionRows builds the FL2VA condition video rows, in anchor order: each keyframe's
// normalized latent [C, 1, h, w] and its noise (same layout, drawn as upstream's
// keyframe_condition_noise does, one keyframe after the other) are patchified, and the rows are
// mixed at KeyframeNoiseAug with ScaleNoise. The rows stay fixed through sampling.
func KeyframeConditionRows(latents, noise [][]float32, c, h, w int, patch [3]int) ([]float32, error) {
	if len(latents) != len(noise) {
		return nil, fmt.Errorf("packing: %d keyframe latents but %d keyframe noises", len(latents), len(noise))
	}
	var clean, mixed []float32
	for k := range latents {
		lr, err := PatchifyVideo(latents[k], c, 1, h, w, patch)
		if err != nil {
			return nil, fmt.Errorf("packing: keyframe %d latent: %w", k, err)
		}
		nr, err := PatchifyVideo(noise[k], c, 1, h, w, patch)
		if err != nil {
			return nil, fmt.Errorf("packing: keyframe %d noise: %w", k, err)
		}
		clean, mixed = append(clean, lr...), append(mixed, nr...)
	}
	return ScaleNoise(clean, mixed, float32(KeyframeNoiseAug))
}
