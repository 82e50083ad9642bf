package h3video

// Pixels de-normalizes the frames to [0, 1]: clamp(sample·std[c] + mean[c], 0, 1) with the ImageNet
// statistics, in float32 like the reference's denormalize_pixels followed by clamp_. The layout
// stays [3][Count][Height][Width]. NaN stays NaN, as with torch.clamp.
func (f Frames) Pixels() []float32 {
	out := make([]float32, len(f.Sample))
	plane := f.Count * f.Height * f.Width
	for c := 0; c < 3 && (c+1)*plane <= len(f.Sample); c++ {
		std, mean := PixelStd[c], PixelMean[c]
		for i := c * plane; i < (c+1)*plane; i++ {
			out[i] = min(max(float32(f.Sample[i]*std)+mean, 0), 1)
		}
	}
	return out
}

// RGB24 appends the frames to dst as interleaved 8-bit RGB, frame after frame, each row-major
// [Height][Width][3] (ffmpeg's rgb24), and returns the extended slice.
func (f Frames) RGB24(dst []byte) []byte {
	p := f.Pixels()
	plane := f.Height * f.Width
	n := f.Count * plane
	base := len(dst)
	dst = append(dst, make([]byte, 3*n)...)
	out := dst[base:]
	for c := 0; c < 3; c++ {
		src := p[c*n : (c+1)*n]
		for i, v := range src {
			out[3*i+c] = Quantize(v)
		}
	}
	return dst
}

// Quantize converts a [0, 1] pixel to uint8 the way FastVideo's pipeline does,
// (x·255).clamp(0, 255).to(uint8): the product is rounded to float32, clamped, then truncated toward
// zero (0.5 → 127, not 128). Out-of-range values saturate; NaN, whose uint8 conversion is
// undefined in PyTorch, becomes 0.
func Quantize(x float32) uint8 {
	v := x * 255
	if !(v > 0) { // also NaN
		return 0
	}
	if v >= 255 {
		return 255
	}
	return uint8(v) // Go truncates toward zero, like the C cast PyTorch uses
}
