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

// samplingOf picks the upsampler jdsample.c's jinit_upsampler picks: h2v1 and h2v2 fancy only for
// planes wider than 2 samples, h1v2 fancy always, and replication (int_upsample) for 4:1:1 and
// 4:1:0. The triangle filter needs the image to start on a chroma sample (the decoder's images
// start at (0, 0)); a caller's sub-image that does not is taken sample for sample.
func samplingOf(m *image.YCbCr) (chromaSampling, error) {
	var s chromaSampling
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		s.h, s.v = 1, 1
	case image.YCbCrSubsampleRatio422:
		s.h, s.v = 2, 1
	case image.YCbCrSubsampleRatio420:
		s.h, s.v = 2, 2
	case image.YCbCrSubsampleRatio440:
		s.h, s.v = 1, 2
	case image.YCbCrSubsampleRatio411:
		s.h, s.v = 4, 1
	case image.YCbCrSubsampleRatio410:
		s.h, s.v = 4, 2
	default:
		return s, fmt.Errorf("a YCbCr image with an unknown chroma subsampling (%v)", m.SubsampleRatio)
	}
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

// upsampled returns the chroma value a plane gives pixel (x, y), counted from the image's
// top-left corner. The triangle filter weighs the nearer sample 3/4 and the next nearer 1/4 in
// each subsampled direction; at the plane's edges the next nearer is the edge sample itself, which
// reproduces both jdsample.c's first/last-column special cases and jdmainct.c's duplicated
// context rows at the top and bottom of the image. Rounding alternates with the output parity as
// jdsample.c's bias does: +1/+2 for h2v1 and h1v2, +8/+7 for h2v2.
func (s chromaSampling) upsampled(plane []uint8, stride, x, y int) uint8 {
	cx, cy := x/s.h, y/s.v
	if !s.fancy || (s.h == 1 && s.v == 1) {
		return plane[cy*stride+cx]
	}
	at := func(cx, cy int) int32 { return int32(plane[cy*stride+cx]) }
	farX := clampIndex(cx+2*(x%2)-1, s.cw)
	farY := clampIndex(cy+2*(y%2)-1, s.ch)
	switch {
	case s.v == 1: // h2v1_fancy_upsample
		return uint8((3*at(cx, cy) + at(farX, cy) + 1 + int32(x%2)) >> 2)
	case s.h == 1: // h1v2_fancy_upsample
		return uint8((3*at(cx, cy) + at(cx, farY) + 1 + int32(y%2)) >> 2)
	}
	// h2v2_fancy_upsample: column sums of the nearer and next nearer rows, then across.
	near := 3*at(cx, cy) + at(cx, farY)
	far := 3*at(farX, cy) + at(farX, farY)
	return uint8((3*near + far + 8 - int32(x%2)) >> 4)
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
	out := imageops.NewImage(b.Dx(), b.Dy())
	c0 := m.COffset(b.Min.X, b.Min.Y)
	cb, cr := m.Cb[c0:], m.Cr[c0:]
	i := 0
	for y := 0; y < b.Dy(); y++ {
		yRow := m.Y[m.YOffset(b.Min.X, b.Min.Y+y):]
		for x := 0; x < b.Dx(); x++ {
			var cbv, crv uint8
			if s.fancy {
				cbv, crv = s.upsampled(cb, m.CStride, x, y), s.upsampled(cr, m.CStride, x, y)
			} else {
				o := m.COffset(b.Min.X+x, b.Min.Y+y) - c0
				cbv, crv = cb[o], cr[o]
			}
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = yccToRGB(yRow[x], cbv, crv)
			i += 3
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
