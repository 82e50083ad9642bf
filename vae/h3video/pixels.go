package h3video

import "fastvideo/internal/media"

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

// Span is the run's first frame, frame count and [0, 1] pixels (modelkit.FrameRun).
func (f Frames) Span() (start, count int, pixels []float32) { return f.Start, f.Count, f.Pixels() }

// RGB24 appends the frames to dst as interleaved 8-bit RGB, frame after frame, each row-major
// [Height][Width][3] (ffmpeg's rgb24), and returns the extended slice.
func (f Frames) RGB24(dst []byte) []byte {
	return media.AppendRGB24(dst, f.Pixels(), f.Count*f.Height*f.Width)
}

// Quantize converts a [0, 1] pixel to uint8 as FastVideo's pipeline does; see media.Quantize.
func Quantize(x float32) uint8 { return media.Quantize(x) }
