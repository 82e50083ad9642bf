package media

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// box builds an MP4 box of type typ holding the concatenated parts.
func box(typ string, parts ...[]byte) []byte {
	content := bytes.Join(parts, nil)
	out := binary.BigEndian.AppendUint32(nil, uint32(8+len(content)))
	return append(append(out, typ...), content...)
}

// miniMP4 is the smallest layout verifyMP4 accepts: ftyp, a moov whose one video track
// declares frames samples, and mdat.
func miniMP4(frames uint32) []byte {
	hdlr := box("hdlr", make([]byte, 8), []byte("vide"), make([]byte, 12))
	stsz := box("stsz", make([]byte, 8), binary.BigEndian.AppendUint32(nil, frames))
	trak := box("trak", box("tkhd", make([]byte, 4)), box("mdia", hdlr, box("minf", box("stbl", stsz))))
	return bytes.Join([][]byte{box("ftyp", []byte("isom")), box("moov", box("mvhd", make([]byte, 4)), trak), box("mdat", []byte{1, 2, 3})}, nil)
}

func TestMiniMP4(t *testing.T) {
	data := miniMP4(7)
	moov, err := readMoov(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := videoSampleCount(moov); err != nil || n != 7 {
		t.Fatalf("%d frames, %v; want 7", n, err)
	}
	if _, err := readMoov(bytes.NewReader(data), int64(len(data)-1)); err == nil {
		t.Fatal("a file one byte short passed")
	}
}

// FuzzMP4Check: the box walker never panics, never reads past the file, and bounds what it
// allocates by the file's size.
func FuzzMP4Check(f *testing.F) {
	f.Add(miniMP4(24))
	f.Add(miniMP4(0)[:40])
	f.Add(append(box("ftyp"), 0, 0, 0, 1, 'm', 'o', 'o', 'v', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, data []byte) {
		moov, err := readMoov(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if len(moov) > len(data) {
			t.Fatalf("moov of %d bytes from a %d-byte file", len(moov), len(data))
		}
		_, _ = videoSampleCount(moov)
	})
}
