package imagefile

import (
	"bytes"
	"encoding/binary"

	"fastvideo/internal/imageops"
)

// exifOrientation returns the EXIF Orientation (1..8) of JPEG or PNG data, 1 when there is none or
// it cannot be read. Pillow reads the first APP1 "Exif" segment of a JPEG and a PNG's eXIf chunk
// (wherever it is); so does this.
func exifOrientation(data []byte) int {
	var tiff []byte
	if bytes.HasPrefix(data, []byte("\x89PNG")) {
		tiff = pngExif(data)
	} else {
		tiff = jpegExif(data)
	}
	return tiffOrientation(tiff)
}

// jpegExif returns the TIFF block of the first APP1 Exif segment before the scan data.
func jpegExif(data []byte) []byte {
	i := 2 // after SOI
	for i+4 <= len(data) {
		if data[i] != 0xFF {
			return nil
		}
		marker := data[i+1]
		switch {
		case marker == 0xFF: // fill byte
			i++
			continue
		case marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8): // no length
			i += 2
			continue
		case marker == 0xDA || marker == 0xD9: // start of scan, end of image
			return nil
		}
		n := int(binary.BigEndian.Uint16(data[i+2:]))
		if n < 2 || i+2+n > len(data) {
			return nil
		}
		seg := data[i+4 : i+2+n]
		if marker == 0xE1 && bytes.HasPrefix(seg, []byte("Exif\x00\x00")) {
			return seg[6:]
		}
		i += 2 + n
	}
	return nil
}

// pngExif returns the data of the first eXIf chunk.
func pngExif(data []byte) []byte {
	i := 8 // after the signature
	for i+8 <= len(data) {
		n := binary.BigEndian.Uint32(data[i:])
		kind := string(data[i+4 : i+8])
		if uint64(n) > uint64(len(data)-i-8) {
			return nil
		}
		body := data[i+8 : i+8+int(n)]
		if kind == "eXIf" {
			// Pillow also accepts the block with a JPEG-style "Exif\0\0" prefix.
			return bytes.TrimPrefix(body, []byte("Exif\x00\x00"))
		}
		if kind == "IEND" {
			return nil
		}
		i += 12 + int(n)
	}
	return nil
}

// orientationTag is EXIF's Orientation in IFD0.
const orientationTag = 0x0112

// tiffOrientation reads IFD0's Orientation from a TIFF block: byte order, magic 42, the IFD0
// offset, then 12-byte entries (tag, type, count, value). Every offset is checked against the
// block; a SHORT or LONG of count 1 with a value 1..8 is accepted, anything else reads as 1.
func tiffOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(t[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 1
	}
	if bo.Uint16(t[2:]) != 42 {
		return 1
	}
	off := uint64(bo.Uint32(t[4:]))
	if off+2 > uint64(len(t)) {
		return 1
	}
	count := uint64(bo.Uint16(t[off:]))
	for k := uint64(0); k < count; k++ {
		e := off + 2 + 12*k
		if e+12 > uint64(len(t)) {
			return 1
		}
		if bo.Uint16(t[e:]) != orientationTag {
			continue
		}
		typ, n := bo.Uint16(t[e+2:]), bo.Uint32(t[e+4:])
		var v uint32
		switch {
		case typ == 3 && n == 1: // SHORT, stored in the first two bytes of the value field
			v = uint32(bo.Uint16(t[e+8:]))
		case typ == 4 && n == 1: // LONG
			v = bo.Uint32(t[e+8:])
		default:
			return 1
		}
		if v < 1 || v > 8 {
			return 1
		}
		return int(v)
	}
	return 1
}

// Orient applies an EXIF orientation as PIL.ImageOps.exif_transpose does: 2 mirror, 3 rotate
// 180°, 4 flip, 5 transpose, 6 rotate 90° clockwise, 7 transverse, 8 rotate 90° counter-clockwise;
// 1 (and anything else) returns src unchanged.
func Orient(src imageops.Image, orientation int) imageops.Image {
	if orientation < 2 || orientation > 8 {
		return src
	}
	w, h := src.Width, src.Height
	ow, oh := w, h
	if orientation >= 5 {
		ow, oh = h, w
	}
	dst := imageops.NewImage(ow, oh)
	for y := 0; y < oh; y++ {
		for x := 0; x < ow; x++ {
			sx, sy := orientedSource(orientation, x, y, w, h)
			copy(dst.Pix[(y*ow+x)*3:(y*ow+x)*3+3], src.Pix[(sy*w+sx)*3:(sy*w+sx)*3+3])
		}
	}
	return dst
}

// orientedSource is the source pixel of output pixel (x, y) for a w x h source.
func orientedSource(orientation, x, y, w, h int) (sx, sy int) {
	switch orientation {
	case 2: // FLIP_LEFT_RIGHT
		return w - 1 - x, y
	case 3: // ROTATE_180
		return w - 1 - x, h - 1 - y
	case 4: // FLIP_TOP_BOTTOM
		return x, h - 1 - y
	case 5: // TRANSPOSE
		return y, x
	case 6: // ROTATE_270 (clockwise)
		return y, h - 1 - x
	case 7: // TRANSVERSE
		return w - 1 - y, h - 1 - x
	default: // 8: ROTATE_90 (counter-clockwise)
		return w - 1 - y, x
	}
}
