package media

import "fmt"

// Quantize converts a [0, 1] pixel to uint8 the way FastVideo's pipelines do,
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

// AppendRGB24 appends n pixels of planar [3][n] values in [0, 1] (a decoder's [3][T][H][W] output
// after its pixel mapping) to dst as interleaved 8-bit RGB, the rgb24 layout MP4Writer.WriteFrame
// takes, and returns the extended slice. A plane missing from a short planes slice stays 0 rather
// than panicking: the caller's frame geometry, not this copy, is what is wrong then.
func AppendRGB24(dst []byte, planes []float32, n int) []byte {
	base := len(dst)
	dst = append(dst, make([]byte, 3*n)...)
	out := dst[base:]
	for c := 0; c < 3 && (c+1)*n <= len(planes); c++ {
		for i, v := range planes[c*n : (c+1)*n] {
			out[3*i+c] = Quantize(v)
		}
	}
	return dst
}

// PlaceFrames copies a run of frames, planar [C][count][plane], into a whole video planar
// [C][frames][plane] starting at frame start: how a streaming decoder's callbacks assemble the
// full clip. C is len(src)/(count·plane). A run that does not fit is an error (the caller's
// geometry is wrong) rather than a panic.
func PlaceFrames(dst []float32, frames int, src []float32, start, count, plane int) error {
	if count == 0 {
		return nil
	}
	run := count * plane
	if run <= 0 || len(src)%run != 0 || start < 0 || start+count > frames || len(src)/run*frames*plane > len(dst) {
		return fmt.Errorf("media: cannot place %d values as frames [%d, %d) of %d-pixel planes into a %d-frame video of %d values",
			len(src), start, start+count, plane, frames, len(dst))
	}
	for c := range len(src) / run {
		copy(dst[(c*frames+start)*plane:(c*frames+start+count)*plane], src[c*run:(c+1)*run])
	}
	return nil
}
