package imagefile

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestYCCToRGB: jdcolor.c's ycc_rgb_convert worked by hand from build_ycc_rgb_table's entries. In
// the second and third cases image/jpeg's color.YCbCrToRGB rounds G (and B) one level away.
func TestYCCToRGB(t *testing.T) {
	for _, c := range []struct{ y, cb, cr, r, g, b uint8 }{
		{128, 128, 128, 128, 128, 128}, // every table entry for x = 0 is 0 (G: ONE_HALF >> 16)
		// x_cb = 127, x_cr = -128: R = 0 + ((91881·-128 + 32768) >> 16) = -179 -> 0;
		// G = 0 + ((-22554·127 + 32768 - 46802·-128) >> 16) = 3159066 >> 16 = 48;
		// B = 0 + ((116130·127 + 32768) >> 16) = 14781278 >> 16 = 225.
		{0, 255, 0, 0, 48, 225},
		// x_cb = -128, x_cr = 127: R = 255 + 178 -> 255; G = 255 + (-3024174 >> 16) = 255 - 47;
		// B = 255 + (-14831872 >> 16) = 255 - 227 (the shift floors).
		{255, 0, 255, 255, 208, 28},
		// x_cb = 72, x_cr = -88: R = 60 - 123 -> 0; G = 60 + (2527456 >> 16) = 98; B = 60 + 128.
		{60, 200, 40, 0, 98, 188},
	} {
		r, g, b := yccToRGB(c.y, c.cb, c.cr)
		if r != c.r || g != c.g || b != c.b {
			t.Errorf("YCbCr(%d, %d, %d) = RGB(%d, %d, %d), want (%d, %d, %d)", c.y, c.cb, c.cr, r, g, b, c.r, c.g, c.b)
		}
	}
}

// chromaImage is a w x h YCbCr image of the ratio with Y and Cr at 128 and the given Cb plane.
func chromaImage(w, h int, ratio image.YCbCrSubsampleRatio, cb ...uint8) *image.YCbCr {
	m := image.NewYCbCr(image.Rect(0, 0, w, h), ratio)
	for i := range m.Y {
		m.Y[i] = 128
	}
	for i := range m.Cr {
		m.Cr[i] = 128
	}
	copy(m.Cb, cb)
	return m
}

// upsampledPlane is the full-resolution Cb plane the conversion sees.
func upsampledPlane(t *testing.T, m *image.YCbCr) []uint8 {
	t.Helper()
	s, err := samplingOf(m)
	if err != nil {
		t.Fatal(err)
	}
	w := m.Rect.Dx()
	out := make([]uint8, w*m.Rect.Dy())
	for y := 0; y < m.Rect.Dy(); y++ {
		for x := 0; x < w; x++ {
			out[y*w+x] = m.Cb[m.COffset(x, y)]
		}
		if s.fancy {
			s.upsampleRow(out[y*w:][:w], make([]int32, s.cw), m.Cb, m.CStride, y)
		}
	}
	return out
}

// TestFancyUpsampling: jdsample.c's routines worked by hand, edges included (the first and last
// columns, jdmainct.c's duplicated top and bottom context rows, odd sizes, narrow planes).
func TestFancyUpsampling(t *testing.T) {
	for _, c := range []struct {
		name  string
		m     *image.YCbCr
		wantS string
	}{
		// h2v1: out0 = 100, out1 = (300+200+2)>>2, out2 = (600+100+1)>>2, out3 = (600+50+2)>>2,
		// out4 = (150+200+1)>>2, out5 = 50.
		{"h2v1", chromaImage(6, 1, image.YCbCrSubsampleRatio422, 100, 200, 50), "100 125 175 163 87 50"},
		{"h2v1 odd width", chromaImage(5, 1, image.YCbCrSubsampleRatio422, 100, 200, 50), "100 125 175 163 87"},
		// downsampled_width 2: jinit_upsampler falls back to h2v1_upsample (replication).
		{"h2v1 narrow", chromaImage(4, 1, image.YCbCrSubsampleRatio422, 100, 200), "100 100 200 200"},
		// h1v2, one column [100 200]: the row above row 0 is row 0 and the row below row 1 is
		// row 1: (400+1)>>2, (300+200+2)>>2, (600+100+1)>>2, (800+2)>>2.
		{"h1v2", chromaImage(1, 4, image.YCbCrSubsampleRatio440, 100, 200), "100 / 125 / 175 / 200"},
		{"h1v2 odd height", chromaImage(1, 3, image.YCbCrSubsampleRatio440, 100, 200), "100 / 125 / 175"},
		// h2v2, rows [100 200 50] and [0 255 30]. Output row 0 sums each column as 3·row0 + row0:
		// 400 800 200, then (4·400+8)>>4, (3·400+800+7)>>4, (3·800+400+8)>>4, (3·800+200+7)>>4,
		// (3·200+800+8)>>4, (4·200+7)>>4. Row 1: 3·row0 + row1 = 300 855 180. Row 2:
		// 3·row1 + row0 = 100 965 140. Row 3: 3·row1 + row1 = 0 1020 120.
		{"h2v2", chromaImage(6, 4, image.YCbCrSubsampleRatio420, 100, 200, 50, 0, 255, 30),
			"100 125 175 162 88 50 / 75 110 179 172 87 45 / 25 79 187 190 87 35 / 0 64 191 199 86 30"},
		{"h2v2 narrow", chromaImage(3, 2, image.YCbCrSubsampleRatio420, 100, 200), "100 100 200 / 100 100 200"},
		// 4:1:1 is int_upsample: replication.
		{"h4v1", chromaImage(6, 1, image.YCbCrSubsampleRatio411, 100, 200), "100 100 100 100 200 200"},
	} {
		got := upsampledPlane(t, c.m)
		var rows []string
		for y := 0; y < c.m.Rect.Dy(); y++ {
			rows = append(rows, strings.Trim(fmt.Sprint(got[y*c.m.Rect.Dx():(y+1)*c.m.Rect.Dx()]), "[]"))
		}
		if s := strings.Join(rows, " / "); s != c.wantS {
			t.Errorf("%s: %s, want %s", c.name, s, c.wantS)
		}
	}
}

// TestToRGBYCbCr: a 4:2:0 image end to end, pixel (3, 1) of the h2v2 case above: Cb 172 (x = 44),
// so G = 128 + ((-22554·44 + 32768) >> 16) = 128 - 15 and B = 128 + ((116130·44 + 32768) >> 16)
// = 128 + 78.
func TestToRGBYCbCr(t *testing.T) {
	m := chromaImage(6, 4, image.YCbCrSubsampleRatio420, 100, 200, 50, 0, 255, 30)
	got, err := ToRGB(m)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Pix[(1*6+3)*3:][:3]; !bytes.Equal(p, []byte{128, 113, 206}) {
		t.Errorf("pixel (3, 1) = %v, want [128 113 206]", p)
	}
}

// jdsampleReference transliterates jdsample.c's fancy routines row by row (special first and last
// columns, context rows duplicated as jdmainct.c does) for a zero-origin image: an independent
// check of upsampleRow's neighbor clamping.
func jdsampleReference(m *image.YCbCr, h, v int) []uint8 {
	w, ht := m.Rect.Dx(), m.Rect.Dy()
	cw, ch := (w+h-1)/h, (ht+v-1)/v
	row := func(r int) []int {
		r = min(max(r, 0), ch-1)
		out := make([]int, cw)
		for i := range out {
			out[i] = int(m.Cb[r*m.CStride+i])
		}
		return out
	}
	var full [][]int
	for r := 0; r < ch; r++ {
		for dy := 0; dy < v; dy++ {
			near, bias := row(r), 1+dy
			if v == 2 { // column sums of the nearer and the next nearer row
				far := row(r - 1 + 2*dy)
				for i := range near {
					near[i] = 3*near[i] + far[i]
				}
			}
			full = append(full, expandRow(near, h, v, bias))
		}
	}
	out := make([]uint8, 0, w*ht)
	for y := 0; y < ht; y++ {
		for x := 0; x < w; x++ {
			out = append(out, uint8(full[y][x]))
		}
	}
	return out
}

// expandRow is one output row of h2v1_fancy_upsample (sums of one row), h2v2_fancy_upsample (column
// sums) or h1v2_fancy_upsample (column sums, no horizontal step).
func expandRow(in []int, h, v, vBias int) []int {
	n := len(in)
	if h == 1 {
		out := make([]int, n)
		for i, s := range in {
			out[i] = (s + vBias) >> 2
		}
		return out
	}
	shift, even, odd := 2, 1, 2
	if v == 2 {
		shift, even, odd = 4, 8, 7
	}
	out := []int{(in[0]*4 + even) >> shift, (in[0]*3 + in[1] + odd) >> shift}
	for i := 1; i < n-1; i++ {
		out = append(out, (in[i]*3+in[i-1]+even)>>shift, (in[i]*3+in[i+1]+odd)>>shift)
	}
	return append(out, (in[n-1]*3+in[n-2]+even)>>shift, (in[n-1]*4+odd)>>shift)
}

// TestUpsamplingMatchesRowForm compares the upsampler with the row-by-row transliteration on random planes of every size up to 13x13 where jdsample.c goes fancy.
func TestUpsamplingMatchesRowForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 16))
	for _, r := range []struct {
		ratio image.YCbCrSubsampleRatio
		h, v  int
	}{{image.YCbCrSubsampleRatio422, 2, 1}, {image.YCbCrSubsampleRatio420, 2, 2}, {image.YCbCrSubsampleRatio440, 1, 2}} {
		for w := 1; w <= 13; w++ {
			for h := 1; h <= 13; h++ {
				m := image.NewYCbCr(image.Rect(0, 0, w, h), r.ratio)
				for i := range m.Cb {
					m.Cb[i] = uint8(rng.IntN(256))
				}
				if r.h == 2 && (w+1)/2 <= 2 {
					continue // replication, covered by TestFancyUpsampling
				}
				if got, want := upsampledPlane(t, m), jdsampleReference(m, r.h, r.v); !bytes.Equal(got, want) {
					t.Fatalf("%v %dx%d: %v, want %v", r.ratio, w, h, got, want)
				}
			}
		}
	}
}

// TestYCbCrBounds: every ratio, small sizes and sub-images on and off the chroma grid (and at
// negative origins) convert without indexing out of range; a sub-image off the grid takes each
// pixel's own chroma sample; planes shorter than the bounds are an error.
func TestYCbCrBounds(t *testing.T) {
	ratios := []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422,
		image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411,
		image.YCbCrSubsampleRatio410}
	for _, ratio := range ratios {
		for _, origin := range []image.Point{{0, 0}, {1, 1}, {2, 2}, {4, 2}, {-3, -1}} {
			for w := 1; w <= 9; w++ {
				for h := 1; h <= 9; h++ {
					full := image.NewYCbCr(image.Rect(origin.X-1, origin.Y-1, origin.X+w+1, origin.Y+h+1), ratio)
					for i := range full.Cb {
						full.Cb[i], full.Cr[i] = uint8(i*37), uint8(i*101)
					}
					m := full.SubImage(image.Rect(origin.X, origin.Y, origin.X+w, origin.Y+h)).(*image.YCbCr)
					checkConverts(t, m)
				}
			}
		}
	}
	short := image.NewYCbCr(image.Rect(0, 0, 8, 8), image.YCbCrSubsampleRatio420)
	short.Cr = short.Cr[:len(short.Cr)-1]
	if _, err := ToRGB(short); err == nil || !strings.Contains(err.Error(), "planes") {
		t.Errorf("a short Cr plane: %v", err)
	}
	if _, err := ToRGB(&image.YCbCr{Rect: image.Rect(0, 0, 2, 2), SubsampleRatio: 99}); err == nil {
		t.Error("an unknown subsampling ratio converted")
	}
}

func checkConverts(t *testing.T, m *image.YCbCr) {
	t.Helper()
	got, err := ToRGB(m)
	if err != nil && m.Rect.Min.X < 0 && strings.Contains(err.Error(), "planes") {
		return // image.YCbCr's SubImage can leave a negative-origin image short of its own bounds
	}
	if err != nil {
		t.Fatalf("%v %v: %v", m.SubsampleRatio, m.Rect, err)
	}
	s, _ := samplingOf(m)
	if s.fancy {
		return
	}
	i := 0
	for y := m.Rect.Min.Y; y < m.Rect.Max.Y; y++ {
		for x := m.Rect.Min.X; x < m.Rect.Max.X; x++ {
			c := m.YCbCrAt(x, y)
			r, g, b := yccToRGB(c.Y, c.Cb, c.Cr)
			if !bytes.Equal(got.Pix[i:i+3], []byte{r, g, b}) {
				t.Fatalf("%v %v pixel (%d, %d): %v, want %v", m.SubsampleRatio, m.Rect, x, y, got.Pix[i:i+3], []byte{r, g, b})
			}
			i += 3
		}
	}
}

// FuzzDecode: whatever the bytes, Decode returns an error or a frame whose buffer holds exactly
// its pixels; never a panic.
func FuzzDecode(f *testing.F) {
	for _, size := range []image.Point{{1, 1}, {3, 2}, {17, 9}} {
		img := image.NewRGBA(image.Rect(0, 0, size.X, size.Y))
		for i := range img.Pix {
			img.Pix[i] = uint8(i * 29)
		}
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	gray := image.NewGray(image.Rect(0, 0, 5, 3))
	gray.SetGray(1, 1, color.Gray{200})
	f.Add(encodePNG(f, gray))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err == nil && (m.Width <= 0 || m.Height <= 0 || len(m.Pix) != 3*m.Width*m.Height) {
			t.Fatalf("%dx%d frame with %d bytes", m.Width, m.Height, len(m.Pix))
		}
	})
}
