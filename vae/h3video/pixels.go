package h3video

import "fastvideo/internal/media"

// imagenetPixels is the decoder's output space: pixels normalized with the ImageNet statistics.
type imagenetPixels struct{}

// ToUnit de-normalizes to [0, 1]: clamp(sample·std[c] + mean[c], 0, 1) with the ImageNet statistics,
// in float32 like the reference's denormalize_pixels followed by clamp_.
func (imagenetPixels) ToUnit(sample []float32, plane int) []float32 {
	out := make([]float32, len(sample))
	for c := 0; c < 3 && (c+1)*plane <= len(sample); c++ {
		std, mean := PixelStd[c], PixelMean[c]
		for i := c * plane; i < (c+1)*plane; i++ {
			out[i] = min(max(float32(sample[i]*std)+mean, 0), 1)
		}
	}
	return out
}

// Quantize converts a [0, 1] pixel to uint8 as FastVideo's pipeline does; see media.Quantize.
func Quantize(x float32) uint8 { return media.Quantize(x) }
