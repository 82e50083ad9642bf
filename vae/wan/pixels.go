package wan

// Pixels maps the frames to [0, 1] like FastVideo's decoding stage, (x/2 + 0.5).clamp(0, 1), in
// float32. The layout stays [3][Count][Height][Width]. NaN stays NaN, as with torch.clamp.
func (f Frames) Pixels() []float32 {
	out := make([]float32, len(f.Sample))
	for i, v := range f.Sample {
		out[i] = min(max(v/2+0.5, 0), 1)
	}
	return out
}

// RGB24 appends the frames to dst as interleaved 8-bit RGB, frame after frame, each row-major
// [Height][Width][3] (ffmpeg's rgb24), and returns the extended slice.
func (f Frames) RGB24(dst []byte) []byte {
	p := f.Pixels()
	n := f.Count * f.Height * f.Width
	base := len(dst)
	dst = append(dst, make([]byte, 3*n)...)
	out := dst[base:]
	for c := 0; c < 3 && (c+1)*n <= len(p); c++ {
		for i, v := range p[c*n : (c+1)*n] {
			out[3*i+c] = Quantize(v)
		}
	}
	return dst
}

// Quantize converts a [0, 1] pixel to uint8 the way FastVideo's VideoGenerator does,
// (x·255).clamp(0, 255).to(torch.uint8): the product is rounded to float32, clamped, then truncated
// toward zero (0.5 → 127, not 128). Out-of-range values saturate; NaN, whose uint8 conversion is
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
