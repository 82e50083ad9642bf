// Package imagefile turns condition images (a file, or an image.Image a caller holds) into the 8-bit
// RGB frames the pipelines preprocess, the way FastVideo's loader does:
// fastvideo/models/vision_utils.py load_image = PIL.Image.open, PIL.ImageOps.exif_transpose, then
// .convert("RGB"). Only PNG and JPEG are accepted, decoded by the standard library after the
// header's dimensions were checked, so a hostile file costs a bounded read and no allocation of a
// size it merely claims.
package imagefile

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"

	"fastvideo/internal/imageops"
	"fastvideo/internal/safefile"
)

// Limits on what a condition image may be. The models see at most a few megapixels (Wan2.2 TI2V
// resizes to 480x832's area), so these only keep a hostile or mistaken file cheap.
const (
	// MaxFileBytes bounds the file read.
	MaxFileBytes = 64 << 20
	// MaxSide bounds each side of the image in pixels.
	MaxSide = 16384
	// MaxPixels bounds width·height (about 48 MB of RGB).
	MaxPixels = 16 << 20
)

// ErrUnsupported is wrapped when the data is neither PNG nor JPEG.
var ErrUnsupported = errors.New("not a PNG or JPEG image")

// Open reads a regular file of at most MaxFileBytes and decodes it with Decode.
func Open(path string) (imageops.Image, error) {
	data, err := safefile.ReadFile(path, MaxFileBytes)
	if err != nil {
		return imageops.Image{}, err
	}
	return Decode(data)
}

// Decode decodes PNG or JPEG data to RGB8: the header's dimensions are checked before the pixels
// are decoded, the EXIF orientation (a JPEG's APP1 segment, a PNG's eXIf chunk) is applied as
// PIL.ImageOps.exif_transpose does, and the pixels
// are converted as PIL's convert("RGB") does (see ToRGB).
func Decode(data []byte) (imageops.Image, error) {
	format, err := sniff(data)
	if err != nil {
		return imageops.Image{}, err
	}
	cfg, err := format.decodeConfig(bytes.NewReader(data))
	if err != nil {
		return imageops.Image{}, fmt.Errorf("a damaged %s header: %w", format.name, err)
	}
	if err := CheckSize(cfg.Width, cfg.Height); err != nil {
		return imageops.Image{}, err
	}
	img, err := format.decode(bytes.NewReader(data))
	if err != nil {
		return imageops.Image{}, fmt.Errorf("a damaged %s image: %w", format.name, err)
	}
	rgb, err := ToRGB(img)
	if err != nil {
		return imageops.Image{}, err
	}
	return Orient(rgb, exifOrientation(data)), nil
}

// sniff picks the format (and so its decoders) by the file signature.
func sniff(data []byte) (imageFormat, error) {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return imageFormat{"png", png.DecodeConfig, png.Decode}, nil
	case bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}):
		return imageFormat{"jpeg", jpeg.DecodeConfig, jpeg.Decode}, nil
	}
	return imageFormat{}, ErrUnsupported
}

// imageFormat is one of the accepted file formats: its name in messages and its standard-library
// decoders of the header and of the whole image.
type imageFormat struct {
	name         string
	decodeConfig func(io.Reader) (image.Config, error)
	decode       func(io.Reader) (image.Image, error)
}

// CheckSize bounds an image's dimensions (from a header, before decoding).
func CheckSize(width, height int) error {
	if width <= 0 || height <= 0 {
		return fmt.Errorf("an image of %dx%d pixels (empty)", width, height)
	}
	if width > MaxSide || height > MaxSide || width > MaxPixels/height {
		return fmt.Errorf("an image of %dx%d pixels, over the limit of %d pixels a side and %d pixels in all", width, height, MaxSide, MaxPixels)
	}
	return nil
}

// ToRGB converts a decoded image to RGB8 as PIL's convert("RGB") converts the mode Pillow opens the
// same file in: alpha is dropped (not composited onto a background), a palette is looked up,
// grayscale is replicated, 16-bit color keeps the high byte (Pillow unpacks RGB;16B and LA;16B
// that way), and 16-bit grayscale is clipped at 255 (Pillow opens it as mode I;16 and its
// I;16 -> RGB conversion saturates rather than scales), and YCbCr (a JPEG) is converted as the
// libjpeg-turbo inside Pillow decodes it (see ycbcrToRGB). CMYK is refused: Pillow's naive
// CMYK -> RGB is not what the standard library computes.
func ToRGB(img image.Image) (imageops.Image, error) {
	if img == nil {
		return imageops.Image{}, errors.New("no image")
	}
	b := img.Bounds()
	if err := CheckSize(b.Dx(), b.Dy()); err != nil {
		return imageops.Image{}, err
	}
	if m, ok := img.(*image.YCbCr); ok {
		return ycbcrToRGB(m)
	}
	px, err := pixelReader(img)
	if err != nil {
		return imageops.Image{}, err
	}
	out := imageops.NewImage(b.Dx(), b.Dy())
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = px(x, y)
			i += 3
		}
	}
	return out, nil
}

// pixelReader returns the RGB8 value of a pixel of img, per concrete type (the generic path
// un-premultiplies, which loses the color of transparent pixels that PIL keeps).
func pixelReader(img image.Image) (func(x, y int) (r, g, b uint8), error) {
	switch m := img.(type) {
	case *image.Gray:
		return func(x, y int) (uint8, uint8, uint8) { v := m.GrayAt(x, y).Y; return v, v, v }, nil
	case *image.Gray16:
		return func(x, y int) (uint8, uint8, uint8) { v := uint8(min(m.Gray16At(x, y).Y, 255)); return v, v, v }, nil
	case *image.NRGBA:
		return func(x, y int) (uint8, uint8, uint8) { c := m.NRGBAAt(x, y); return c.R, c.G, c.B }, nil
	case *image.NRGBA64:
		return func(x, y int) (uint8, uint8, uint8) {
			c := m.NRGBA64At(x, y)
			return uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8)
		}, nil
	case *image.Paletted:
		pal := make([]color.NRGBA, len(m.Palette))
		for i, c := range m.Palette {
			pal[i] = nrgba(c)
		}
		return func(x, y int) (uint8, uint8, uint8) {
			i := int(m.ColorIndexAt(x, y))
			if i >= len(pal) {
				return 0, 0, 0 // PNG allows indices past a short palette; Pillow reads black there
			}
			return pal[i].R, pal[i].G, pal[i].B
		}, nil
	case *image.CMYK:
		return nil, errors.New("a CMYK image (only RGB, grayscale and palette images are accepted)")
	}
	return func(x, y int) (uint8, uint8, uint8) {
		c := color.NRGBA64Model.Convert(img.At(x, y)).(color.NRGBA64)
		return uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8)
	}, nil
}

// nrgba is a palette entry without premultiplication (the PNG decoder stores color.NRGBA for
// transparent entries and color.RGBA for opaque ones).
func nrgba(c color.Color) color.NRGBA {
	if n, ok := c.(color.NRGBA); ok {
		return n
	}
	return color.NRGBAModel.Convert(c).(color.NRGBA)
}
