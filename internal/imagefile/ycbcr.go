package imagefile

import (
	"errors"
	"fmt"
	"image"

	"fastvideo/internal/imageops"
)

// YCbCr to RGB as libjpeg-turbo's decoder produces it with its defaults (what PIL, and so
// FastVideo's load_image, returns for a JPEG): the chroma planes upsampled by the "fancy" triangle
// filter of src/jdsample.c, then src/jdcolor.c's fixed-point conversion. image/jpeg itself
// replicates chroma and rounds its own way, tens of levels away at sharp color edges.

// Fixed-point constants of jdcolor.c: FIX(x) = round(x·2^16), SCALEBITS = 16.
const (
	fixCrToR    = 91881  // FIX(1.40200)
	fixCbToB    = 116130 // FIX(1.77200)
	fixCrToG    = 46802  // FIX(0.71414)
	fixCbToG    = 22554  // FIX(0.34414)
	yccOneHalf  = 1 << 15
	yccScaleBit = 16
)

// yccToRGB is jdcolor.c's ycc_rgb_convert for one pixel: build_ycc_rgb_table rounds the Cr->R and
// Cb->B terms on their own and the two G terms together (ONE_HALF folded into Cb_g_tab), each
// with an arithmetic (flooring) right shift, and range_limit clamps the sums.
func yccToRGB(y, cb, cr uint8) (r, g, b uint8) {
	yv, cbv, crv := int32(y), int32(cb)-128, int32(cr)-128
	r = clampSample(yv + (fixCrToR*crv+yccOneHalf)>>yccScaleBit)
	g = clampSample(yv + (-fixCbToG*cbv+yccOneHalf-fixCrToG*crv)>>yccScaleBit)
	b = clampSample(yv + (fixCbToB*cbv+yccOneHalf)>>yccScaleBit)
	return r, g, b
}

func clampSample(v int32) uint8 {
	return uint8(min(max(v, 0), 255))
}

// chromaSampling is how a YCbCr image's chroma planes map onto its pixels.
type chromaSampling struct {
	h, v   int  // pixels per chroma sample, across and down
	fancy  bool // jdsample.c's triangle filter applies; otherwise samples are replicated
	cw, ch int  // chroma samples per row and per column (jdinput.c's downsampled_width/height)
}

// chromaFactors is the pixels per chroma sample, across and down, of each subsampling ratio.
var chromaFactors = map[image.YCbCrSubsampleRatio][2]int{
	image.YCbCrSubsampleRatio444: {1, 1}, image.YCbCrSubsampleRatio422: {2, 1},
	image.YCbCrSubsampleRatio420: {2, 2}, image.YCbCrSubsampleRatio440: {1, 2},
	image.YCbCrSubsampleRatio411: {4, 1}, image.YCbCrSubsampleRatio410: {4, 2},
}

// samplingOf picks the upsampler jdsample.c's jinit_upsampler picks: h2v1 and h2v2 fancy only for
// planes wider than 2 samples, h1v2 fancy always, and replication (int_upsample) for 4:1:1 and
// 4:1:0. The triangle filter needs the image to start on a chroma sample (the decoder's images
// start at (0, 0)); a caller's sub-image that does not is taken sample for sample.
func samplingOf(m *image.YCbCr) (chromaSampling, error) {
	f, ok := chromaFactors[m.SubsampleRatio]
	if !ok {
		return chromaSampling{}, fmt.Errorf("a YCbCr image with an unknown chroma subsampling (%v)", m.SubsampleRatio)
	}
	s := chromaSampling{h: f[0], v: f[1]}
	b := m.Rect
	s.cw, s.ch = (b.Dx()+s.h-1)/s.h, (b.Dy()+s.v-1)/s.v
	aligned := b.Min.X >= 0 && b.Min.Y >= 0 && b.Min.X%s.h == 0 && b.Min.Y%s.v == 0
	switch {
	case s.h == 2 && s.v == 1, s.h == 2 && s.v == 2:
		s.fancy = aligned && s.cw > 2
	case s.h == 1 && s.v == 2:
		s.fancy = aligned
	}
	return s, nil
}

// upsampleRow writes the chroma of output row y (counted from the image's top) into dst, one value
// per pixel, for a fancy sampling. The triangle filter weighs the nearer sample 3/4 and the next
// nearer 1/4 in each subsampled direction (h2v2 first sums columns, 3·nearer row + next nearer
// row); at the plane's edges the next nearer is the edge sample itself, which reproduces both
// jdsample.c's first/last-column special cases and jdmainct.c's duplicated context rows at the top
// and bottom of the image. Rounding alternates with the output parity as jdsample.c's bias does:
// +1/+2 for h2v1 and h1v2, +8/+7 for h2v2. sums is scratch of s.cw values.
func (s chromaSampling) upsampleRow(dst []uint8, sums []int32, plane []uint8, stride, y int) {
	cy := y / s.v
	near := plane[cy*stride:][:s.cw]
	far := near
	if s.v == 2 {
		far = plane[clampIndex(cy+2*(y%2)-1, s.ch)*stride:][:s.cw]
	}
	for i := range sums {
		sums[i] = 3*int32(near[i]) + int32(far[i])
	}
	switch {
	case s.h == 1: // h1v2_fancy_upsample
		bias := 1 + int32(y%2)
		for x := range dst {
			dst[x] = uint8((sums[x] + bias) >> 2)
		}
	case s.v == 1: // h2v1_fancy_upsample: sums are 4·sample here, so weigh the samples themselves
		for x := range dst {
			cx, odd := x/2, x%2
			dst[x] = uint8((3*int32(near[cx]) + int32(near[clampIndex(cx+2*odd-1, s.cw)]) + 1 + int32(odd)) >> 2)
		}
	default: // h2v2_fancy_upsample
		for x := range dst {
			cx, odd := x/2, x%2
			dst[x] = uint8((3*sums[cx] + sums[clampIndex(cx+2*odd-1, s.cw)] + 8 - int32(odd)) >> 4)
		}
	}
}

// clampIndex keeps a neighbor index inside [0, n).
func clampIndex(i, n int) int {
	return min(max(i, 0), n-1)
}

// ycbcrToRGB converts m to RGB8 as libjpeg-turbo decodes a JPEG with its default settings
// (do_fancy_upsampling on, no merged upsampling): jdsample.c's upsampler on each chroma plane,
// then jdcolor.c's ycc_rgb_convert.
func ycbcrToRGB(m *image.YCbCr) (imageops.Image, error) {
	s, err := samplingOf(m)
	if err != nil {
		return imageops.Image{}, err
	}
	if err := checkPlanes(m); err != nil {
		return imageops.Image{}, err
	}
	b := m.Rect
	w := b.Dx()
	out := imageops.NewImage(w, b.Dy())
	c0 := m.COffset(b.Min.X, b.Min.Y)
	cbRow, crRow, sums := make([]uint8, w), make([]uint8, w), make([]int32, s.cw)
	for y := 0; y < b.Dy(); y++ {
		if s.fancy {
			s.upsampleRow(cbRow, sums, m.Cb[c0:], m.CStride, y)
			s.upsampleRow(crRow, sums, m.Cr[c0:], m.CStride, y)
		} else {
			for x := range w {
				o := m.COffset(b.Min.X+x, b.Min.Y+y)
				cbRow[x], crRow[x] = m.Cb[o], m.Cr[o]
			}
		}
		yRow := m.Y[m.YOffset(b.Min.X, b.Min.Y+y):][:w]
		px := out.Pix[3*w*y:][:3*w]
		for x, yv := range yRow {
			px[3*x], px[3*x+1], px[3*x+2] = yccToRGB(yv, cbRow[x], crRow[x])
		}
	}
	return out, nil
}

// checkPlanes refuses a caller's YCbCr image whose planes are shorter than its bounds need (the
// decoder's never are), so converting it cannot index out of range.
func checkPlanes(m *image.YCbCr) error {
	b := m.Rect
	last := image.Pt(b.Max.X-1, b.Max.Y-1)
	yFirst, yLast := m.YOffset(b.Min.X, b.Min.Y), m.YOffset(last.X, last.Y)
	cFirst, cLast := m.COffset(b.Min.X, b.Min.Y), m.COffset(last.X, last.Y)
	if m.YStride < 0 || m.CStride < 0 || yFirst < 0 || cFirst < 0 || yLast >= len(m.Y) ||
		cLast >= len(m.Cb) || cLast >= len(m.Cr) {
		return errors.New("a YCbCr image whose planes do not cover its bounds")
	}
	return nil
}
