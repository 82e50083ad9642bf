// Package imageops is the pixel-space frame arithmetic of the spatial fast mode, in plain Go on the
// host: resize, center-crop and unsharp masking of uint8 RGB frames with OpenCV's semantics, so a
// frame comes out as upstream's cv2 calls make it (FastVideo fastvideo/mlx_runtime/frame_upsample.py:
// cv2.resize, cv2.GaussianBlur, cv2.addWeighted). The arithmetic follows OpenCV's
// modules/imgproc/src/resize.cpp and smooth.dispatch.cpp / smooth.simd.hpp, fixed point included.
package imageops

import (
	"fmt"
	"strings"
)

// Channels is the number of interleaved channels of every Image (RGB).
const Channels = 3

// Image is one frame: Height rows of Width pixels, RGB interleaved (HxWx3 uint8, row-major).
type Image struct {
	Width, Height int
	Pix           []byte
}

// NewImage allocates a black frame.
func NewImage(width, height int) Image {
	return Image{Width: width, Height: height, Pix: make([]byte, width*height*Channels)}
}

// check reports a frame whose buffer does not hold exactly its pixels.
func (m Image) check() error {
	if m.Width <= 0 || m.Height <= 0 {
		return fmt.Errorf("imageops: frame of %dx%d", m.Width, m.Height)
	}
	if len(m.Pix) != m.Width*m.Height*Channels {
		return fmt.Errorf("imageops: %d bytes for a %dx%d RGB frame", len(m.Pix), m.Width, m.Height)
	}
	return nil
}

// Interpolation is a resize kernel, named as upstream's --upsample choices.
type Interpolation int

const (
	Lanczos  Interpolation = iota // cv2.INTER_LANCZOS4: 8x8 taps
	Cubic                         // cv2.INTER_CUBIC: 4x4 taps, A = -0.75
	Bilinear                      // cv2.INTER_LINEAR: 2x2 taps
	Nearest                       // cv2.INTER_NEAREST: floor(dst*src/dst), not pixel centers
)

// InterpolationNames are the accepted names, best quality first (PIXEL_UPSAMPLE_MODES in
// fastvideo/mlx_runtime/frame_upsample.py).
var InterpolationNames = []string{"lanczos", "cubic", "bilinear", "nearest"}

func (i Interpolation) String() string {
	if i < 0 || int(i) >= len(InterpolationNames) {
		return fmt.Sprintf("Interpolation(%d)", int(i))
	}
	return InterpolationNames[i]
}

// ParseInterpolation maps a name of InterpolationNames to its kernel.
func ParseInterpolation(name string) (Interpolation, error) {
	for i, n := range InterpolationNames {
		if name == n {
			return Interpolation(i), nil
		}
	}
	return 0, fmt.Errorf("imageops: unknown interpolation %q (one of %s)", name, strings.Join(InterpolationNames, ", "))
}

// CenterCrop returns the width x height window at the center of src (top = (H-h)/2,
// left = (W-w)/2, as upstream crops a 32-aligned canvas back to the size asked for). The result
// shares no memory with src.
func CenterCrop(src Image, width, height int) (Image, error) {
	if err := src.check(); err != nil {
		return Image{}, err
	}
	if width <= 0 || height <= 0 || width > src.Width || height > src.Height {
		return Image{}, fmt.Errorf("imageops: cannot crop %dx%d out of %dx%d", width, height, src.Width, src.Height)
	}
	dst := NewImage(width, height)
	top, left := (src.Height-height)/2, (src.Width-width)/2
	row := width * Channels
	for y := 0; y < height; y++ {
		o := ((top+y)*src.Width + left) * Channels
		copy(dst.Pix[y*row:(y+1)*row], src.Pix[o:o+row])
	}
	return dst, nil
}

// clampIndex is OpenCV's border replication of an index into [0, n).
func clampIndex(i, n int) int {
	if i < 0 {
		return 0
	}
	if i >= n {
		return n - 1
	}
	return i
}

// saturateU8 clamps to [0, 255].
func saturateU8(v int32) byte {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}
