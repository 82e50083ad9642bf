package wan

import "fastvideo/internal/media"

// signedPixels is the decoder's output space: pixels in [-1, 1].
type signedPixels struct{}

// ToUnit maps to [0, 1] like FastVideo's decoding stage, (x/2 + 0.5).clamp(0, 1), in float32.
func (signedPixels) ToUnit(_ int, v float32) float32 { return min(max(v/2+0.5, 0), 1) }

// Quantize converts a [0, 1] pixel to uint8 as FastVideo's pipeline does; see media.Quantize.
func Quantize(x float32) uint8 { return media.Quantize(x) }
