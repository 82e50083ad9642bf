package imagefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/imageops"
)

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func decode(t *testing.T, data []byte) imageops.Image {
	t.Helper()
	m, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPILConversions pins each PNG color type to what PIL's convert("RGB") gives for the mode
// Pillow opens it in.
func TestPILConversions(t *testing.T) {
	nrgba := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	nrgba.SetNRGBA(0, 0, color.NRGBA{10, 20, 30, 0}) // transparent: PIL keeps the color, drops alpha
	nrgba.SetNRGBA(1, 0, color.NRGBA{200, 100, 50, 128})
	gray := image.NewGray(image.Rect(0, 0, 2, 1))
	gray.SetGray(0, 0, color.Gray{7})
	gray.SetGray(1, 0, color.Gray{250})
	gray16 := image.NewGray16(image.Rect(0, 0, 2, 1))
	gray16.SetGray16(0, 0, color.Gray16{200})   // I;16 -> RGB keeps values below 256
	gray16.SetGray16(1, 0, color.Gray16{40000}) // and saturates the rest
	rgb16 := image.NewRGBA64(image.Rect(0, 0, 2, 1))
	rgb16.SetRGBA64(0, 0, color.RGBA64{0x12ff, 0x3400, 0xfe01, 0xffff}) // RGB;16B: the high byte
	rgb16.SetRGBA64(1, 0, color.RGBA64{0, 0xffff, 0x0100, 0xffff})
	pal := image.NewPaletted(image.Rect(0, 0, 2, 1), color.Palette{color.NRGBA{1, 2, 3, 0}, color.RGBA{9, 8, 7, 255}})
	pal.SetColorIndex(1, 0, 1)
	for _, c := range []struct {
		name string
		img  image.Image
		want []byte
	}{
		{"rgba", nrgba, []byte{10, 20, 30, 200, 100, 50}},
		{"gray", gray, []byte{7, 7, 7, 250, 250, 250}},
		{"gray16", gray16, []byte{200, 200, 200, 255, 255, 255}},
		{"rgb16", rgb16, []byte{0x12, 0x34, 0xfe, 0, 0xff, 1}},
		{"palette", pal, []byte{1, 2, 3, 9, 8, 7}},
	} {
		got := decode(t, encodePNG(t, c.img))
		if got.Width != 2 || got.Height != 1 || !bytes.Equal(got.Pix, c.want) {
			t.Errorf("%s: got %dx%d %v, want 2x1 %v", c.name, got.Width, got.Height, got.Pix, c.want)
		}
	}
}

// pngWithHeader is a PNG signature and an IHDR chunk claiming w x h (8-bit RGB), then IEND: enough
// for DecodeConfig, no pixels.
func pngWithHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(kind string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		body := append([]byte(kind), data...)
		b.Write(body)
		binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(body))
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2
	chunk("IHDR", ihdr)
	chunk("IEND", nil)
	return b.Bytes()
}

// TestBadImages: every bad input is an error, and a header claiming a huge image is refused
// before its pixels are allocated.
func TestBadImages(t *testing.T) {
	good := encodePNG(t, image.NewGray(image.Rect(0, 0, 8, 8)))
	for _, c := range []struct {
		name, want string
		data       []byte
	}{
		{"text", "not a PNG or JPEG", []byte("a red fox runs through the snow\n")},
		{"empty", "not a PNG or JPEG", nil},
		{"truncated png", "damaged png", good[:len(good)/2]},
		{"0x0", "png", pngWithHeader(0, 0)},
		{"huge header", "over the limit", pngWithHeader(100000, 100000)},
		{"tall", "over the limit", pngWithHeader(1, MaxSide+1)},
		{"truncated jpeg", "damaged jpeg", []byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 16}},
	} {
		_, err := Decode(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if _, err := ToRGB(image.NewCMYK(image.Rect(0, 0, 4, 4))); err == nil || !strings.Contains(err.Error(), "CMYK") {
		t.Errorf("a CMYK image: %v", err)
	}
	if _, err := ToRGB(image.NewGray(image.Rect(0, 0, 0, 3))); err == nil {
		t.Error("an empty image.Image converted")
	}
	if _, err := Decode([]byte("hello")); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a text file: %v does not wrap ErrUnsupported", err)
	}
	huge := pngWithHeader(100000, 100000)
	if n := testing.AllocsPerRun(5, func() { _, _ = Decode(huge) }); n > 50 {
		t.Errorf("refusing a huge header took %v allocations", n)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	img := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	img.SetNRGBA(2, 1, color.NRGBA{1, 2, 3, 255})
	path := filepath.Join(dir, "a.png")
	if err := os.WriteFile(path, encodePNG(t, img), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil || m.Width != 3 || m.Height != 2 || !bytes.Equal(m.Pix[15:], []byte{1, 2, 3}) {
		t.Fatalf("Open: %v %+v", err, m)
	}
	if _, err := Open(dir); err == nil {
		t.Error("a folder opened")
	}
	if _, err := Open(filepath.Join(dir, "missing.png")); err == nil {
		t.Error("a missing file opened")
	}
}

// TestOrient checks each EXIF orientation on a 3x2 image against PIL's transposes.
func TestOrient(t *testing.T) {
	// Pixels a b c / d e f, one byte value per pixel (replicated to RGB).
	src := imageops.NewImage(3, 2)
	for i := 0; i < 6; i++ {
		src.Pix[3*i], src.Pix[3*i+1], src.Pix[3*i+2] = byte('a'+i), byte('a'+i), byte('a'+i)
	}
	for o, want := range map[int]string{
		1: "abc/def", 2: "cba/fed", 3: "fed/cba", 4: "def/abc",
		5: "ad/be/cf", 6: "da/eb/fc", 7: "fc/eb/da", 8: "cf/be/ad",
	} {
		got := Orient(src, o)
		var rows []string
		for y := 0; y < got.Height; y++ {
			var r []byte
			for x := 0; x < got.Width; x++ {
				r = append(r, got.Pix[(y*got.Width+x)*3])
			}
			rows = append(rows, string(r))
		}
		if s := strings.Join(rows, "/"); s != want {
			t.Errorf("orientation %d: %s, want %s", o, s, want)
		}
	}
}

// exifSegment is an APP1 Exif segment whose IFD0 holds Orientation = o.
func exifSegment(o uint16, order binary.ByteOrder) []byte {
	tiff := make([]byte, 8+2+12+4)
	if order == binary.LittleEndian {
		copy(tiff, "II")
	} else {
		copy(tiff, "MM")
	}
	order.PutUint16(tiff[2:], 42)
	order.PutUint32(tiff[4:], 8)
	order.PutUint16(tiff[8:], 1)
	order.PutUint16(tiff[10:], orientationTag)
	order.PutUint16(tiff[12:], 3)
	order.PutUint32(tiff[14:], 1)
	order.PutUint16(tiff[18:], o)
	payload := append([]byte("Exif\x00\x00"), tiff...)
	seg := []byte{0xFF, 0xE1, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(len(payload)+2))
	return append(seg, payload...)
}

// TestJPEGOrientation decodes a 4x2 JPEG tagged "rotate 90° clockwise": it comes out 2x4, with the
// left column's dark half on top as PIL's exif_transpose puts it.
func TestJPEGOrientation(t *testing.T) {
	img := image.NewGray(image.Rect(0, 0, 16, 8))
	for y := 0; y < 8; y++ {
		for x := 0; x < 16; x++ {
			if x >= 8 {
				img.SetGray(x, y, color.Gray{255})
			}
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		data := append(append([]byte{0xFF, 0xD8}, exifSegment(6, order)...), b.Bytes()[2:]...)
		if o := exifOrientation(data); o != 6 {
			t.Fatalf("%v: orientation %d, want 6", order, o)
		}
		m := decode(t, data)
		if m.Width != 8 || m.Height != 16 {
			t.Fatalf("%v: %dx%d, want 8x16", order, m.Width, m.Height)
		}
		if top, bottom := m.Pix[(2*8+4)*3], m.Pix[(13*8+4)*3]; top > 20 || bottom < 235 {
			t.Errorf("%v: top %d, bottom %d: the rotation is the wrong way", order, top, bottom)
		}
	}
}

// FuzzExifOrientation: the parser never panics and returns an orientation in 1..8, whatever the
// bytes.
func FuzzExifOrientation(f *testing.F) {
	f.Add(append([]byte{0xFF, 0xD8}, exifSegment(6, binary.BigEndian)...))
	f.Add(append([]byte{0xFF, 0xD8}, exifSegment(3, binary.LittleEndian)...))
	f.Add(pngWithHeader(4, 4))
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xE1, 0, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{data, append([]byte{0xFF, 0xD8}, data...), append([]byte("\x89PNG\r\n\x1a\n"), data...)} {
			if o := exifOrientation(d); o < 1 || o > 8 {
				t.Fatalf("orientation %d", o)
			}
			if o := tiffOrientation(d); o < 1 || o > 8 {
				t.Fatalf("tiff orientation %d", o)
			}
		}
	})
}
