package wan

import "fastvideo/internal/media"

// Pixels maps the frames to [0, 1] like FastVideo's decoding stage, (x/2 + 0.5).clamp(0, 1), in
// float32. The layout stays [3][Count][Height][Width]. NaN stays NaN, as with torch.clamp.
func (f Frames) Pixels() []float32 {
	out := make([]float32, len(f.Sample))
	for i, v := range f.Sample {
		out[i] = min(max(v/2+0.5, 0), 1)
	}
	return out
}

// Span is the run's first frame, frame count and [0, 1] pixels (modelkit.FrameRun).
func (f Frames) Span() (start, count int, pixels []float32) { return f.Start, f.Count, f.Pixels() }

// RGB24 appends the frames to dst as interleaved 8-bit RGB, frame after frame, each row-major
// [Height][Width][3] (ffmpeg's rgb24), and returns the extended slice.
func (f Frames) RGB24(dst []byte) []byte {
	return media.AppendRGB24(dst, f.Pixels(), f.Count*f.Height*f.Width)
}

// Quantize converts a [0, 1] pixel to uint8 as FastVideo's pipeline does; see media.Quantize.
func Quantize(x float32) uint8 { return media.Quantize(x) }
