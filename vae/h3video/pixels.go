package h3video

import "fastvideo/internal/media"

// imagenetPixels is the decoder's output space: pixels normalized with the ImageNet statistics.
type imagenetPixels struct{}

// ToUnit de-normalizes to [0, 1]: clamp(sample·std[c] + mean[c], 0, 1) with the ImageNet statistics,
// in float32 like the reference's denormalize_pixels followed by clamp_.
func (imagenetPixels) ToUnit(c int, v float32) float32 {
	return min(max(float32(v*PixelStd[c])+PixelMean[c], 0), 1)
}

// Quantize converts a [0, 1] pixel to uint8 as FastVideo's pipeline does; see media.Quantize.
func Quantize(x float32) uint8 { return media.Quantize(x) }
