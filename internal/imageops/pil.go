package imageops

import (
	"fmt"
	"math"
)

// PIL's resampling (Pillow src/libImaging/Resample.c, ImagingResample for 8-bit images), which
// upstream's image preprocessing uses (PIL.Image.resize(size, Image.LANCZOS) in FastVideo's
// fastvideo/pipelines/stages/input_validation.py; BICUBIC in the Qwen2-VL image processor that
// fastvideo/pipelines/basic/minimax_h3/stages/minimax_h3_conditioning.py calls). It is not OpenCV's: the kernel is stretched by
// the scale when shrinking (antialiasing), coefficients are normalized per output pixel and
// rounded to 22-bit fixed point, and the passes run horizontal first, then vertical, each rounding
// to uint8.

// pilPrecisionBits is Resample.c's PRECISION_BITS (32 - 8 - 2).
const pilPrecisionBits = 32 - 8 - 2

// pilFilter is one of Resample.c's filters: the kernel and its support at scale 1.
type pilFilter struct {
	kernel  func(float64) float64
	support float64
}

var (
	pilLanczosFilter = pilFilter{pilLanczos, 3}
	pilBicubicFilter = pilFilter{pilBicubic, 2}
)

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x *= math.Pi
	return math.Sin(x) / x
}

// pilLanczos is Resample.c's lanczos_filter: sinc(x)·sinc(x/3) on [-3, 3).
func pilLanczos(x float64) float64 {
	if -3 <= x && x < 3 {
		return sinc(x) * sinc(x/3)
	}
	return 0
}

// pilBicubic is Resample.c's bicubic_filter: the cubic convolution kernel with a = -0.5.
func pilBicubic(x float64) float64 {
	const a = -0.5
	x = math.Abs(x)
	switch {
	case x < 1:
		return ((a+2)*x-(a+3))*x*x + 1
	case x < 2:
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// pilCoeffs are one axis's taps: output i reads inputs start[i] .. start[i]+count[i]-1 with the
// fixed-point weights k[i*ksize:].
type pilCoeffs struct {
	ksize        int
	start, count []int
	k            []int32
}

// pilPrecompute is precompute_coeffs followed by normalize_coeffs_8bpc, for the whole input range
// (box = (0, inSize)).
func pilPrecompute(inSize, outSize int, f pilFilter) pilCoeffs {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1)
	support := f.support * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := pilCoeffs{ksize: ksize, start: make([]int, outSize), count: make([]int, outSize), k: make([]int32, outSize*ksize)}
	w := make([]float64, ksize)
	for xx := 0; xx < outSize; xx++ {
		center := (float64(xx) + 0.5) * scale
		ss := 1 / filterscale
		xmin := max(int(center-support+0.5), 0) // C's (int) truncates toward zero
		xmax := min(int(center+support+0.5), inSize) - xmin
		ww := 0.0
		for x := 0; x < xmax; x++ {
			w[x] = f.kernel((float64(x+xmin) - center + 0.5) * ss)
			ww += w[x]
		}
		for x := 0; x < xmax; x++ {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				c.k[xx*ksize+x] = int32(-0.5 + v*(1<<pilPrecisionBits))
			} else {
				c.k[xx*ksize+x] = int32(0.5 + v*(1<<pilPrecisionBits))
			}
		}
		c.start[xx], c.count[xx] = xmin, xmax
	}
	return c
}

// pilClip8 is Resample.c's clip8 of an accumulator that started at half a unit.
func pilClip8(v int64) byte {
	v >>= pilPrecisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// ResizePIL returns src resized to width x height as Pillow's Image.resize((width, height),
// Image.LANCZOS) does for an RGB image (default box, no reducing_gap): an unchanged size is a copy.
func ResizePIL(src Image, width, height int) (Image, error) {
	return pilResize(src, width, height, pilLanczosFilter)
}

// ResizePILBicubic is ResizePIL with Image.BICUBIC.
func ResizePILBicubic(src Image, width, height int) (Image, error) {
	return pilResize(src, width, height, pilBicubicFilter)
}

func pilResize(src Image, width, height int, f pilFilter) (Image, error) {
	if err := src.check(); err != nil {
		return Image{}, err
	}
	if width <= 0 || height <= 0 {
		return Image{}, fmt.Errorf("imageops: cannot resize to %dx%d", width, height)
	}
	out := src
	if width != src.Width {
		out = pilHorizontal(out, width, pilPrecompute(src.Width, width, f))
	}
	if height != src.Height {
		out = pilVertical(out, height, pilPrecompute(src.Height, height, f))
	}
	if out.Width == src.Width && out.Height == src.Height {
		out = Image{Width: src.Width, Height: src.Height, Pix: append([]byte(nil), src.Pix...)}
	}
	return out, nil
}

// pilHorizontal is ImagingResampleHorizontal_8bpc over every row. (Pillow first trims the rows
// the vertical pass will not read; the rows it computes are the same.)
func pilHorizontal(src Image, width int, c pilCoeffs) Image {
	dst := NewImage(width, src.Height)
	for y := 0; y < src.Height; y++ {
		row := src.Pix[y*src.Width*3 : (y+1)*src.Width*3]
		for xx := 0; xx < width; xx++ {
			k := c.k[xx*c.ksize:]
			var s [3]int64
			s[0], s[1], s[2] = 1<<(pilPrecisionBits-1), 1<<(pilPrecisionBits-1), 1<<(pilPrecisionBits-1)
			for x := 0; x < c.count[xx]; x++ {
				p := row[(c.start[xx]+x)*3:]
				kv := int64(k[x])
				s[0] += int64(p[0]) * kv
				s[1] += int64(p[1]) * kv
				s[2] += int64(p[2]) * kv
			}
			o := (y*width + xx) * 3
			dst.Pix[o], dst.Pix[o+1], dst.Pix[o+2] = pilClip8(s[0]), pilClip8(s[1]), pilClip8(s[2])
		}
	}
	return dst
}

// pilVertical is ImagingResampleVertical_8bpc.
func pilVertical(src Image, height int, c pilCoeffs) Image {
	dst := NewImage(src.Width, height)
	stride := src.Width * 3
	for yy := 0; yy < height; yy++ {
		k := c.k[yy*c.ksize:]
		for i := 0; i < stride; i++ {
			s := int64(1 << (pilPrecisionBits - 1))
			for y := 0; y < c.count[yy]; y++ {
				s += int64(src.Pix[(c.start[yy]+y)*stride+i]) * int64(k[y])
			}
			dst.Pix[yy*stride+i] = pilClip8(s)
		}
	}
	return dst
}
