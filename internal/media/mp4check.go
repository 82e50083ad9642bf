package media

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxMoovBytes bounds the metadata box read into memory: a few KB per second of video, so
// hours of video stay far below it.
const maxMoovBytes = 64 << 20

// verifyMP4 checks a finished file before it is given its final name: ffmpeg may exit 0 after
// failing to write the trailer (a full disk: "Error writing trailer ... No space left on
// device"), leaving a file without its moov box that no player opens. The top-level boxes
// must tile the file exactly, and the video track of moov must hold frames samples. Box
// layout per ISO/IEC 14496-12 (moov/trak/mdia/{hdlr, minf/stbl/stsz}).
func verifyMP4(path string, frames int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	moov, err := readMoov(f, st.Size())
	if err != nil {
		return fmt.Errorf("the finished file is not a complete MP4: %w", err)
	}
	n, err := videoSampleCount(moov)
	if err != nil {
		return fmt.Errorf("the finished file is not a complete MP4: %w", err)
	}
	if n != frames {
		return fmt.Errorf("the finished file holds %d video frames, %d were written", n, frames)
	}
	return nil
}

// readMoov walks the top-level boxes of a size-byte file and returns the moov box's content.
func readMoov(r io.ReaderAt, size int64) ([]byte, error) {
	var moov []byte
	for off := int64(0); off < size; {
		typ, hdr, boxSize, err := boxHeaderAt(r, off, size)
		if err != nil {
			return nil, err
		}
		if typ == "moov" {
			if moov != nil {
				return nil, errors.New("two moov boxes")
			}
			if boxSize-hdr > maxMoovBytes {
				return nil, fmt.Errorf("moov box of %d bytes exceeds the %d-byte limit", boxSize-hdr, maxMoovBytes)
			}
			moov = make([]byte, boxSize-hdr)
			if _, err := r.ReadAt(moov, off+hdr); err != nil {
				return nil, err
			}
		}
		off += boxSize
	}
	if moov == nil {
		return nil, errors.New("no moov box (the trailer was not written)")
	}
	return moov, nil
}

// boxHeaderAt reads the header of the box at off: its type, header length and total size,
// which must lie within the file.
func boxHeaderAt(r io.ReaderAt, off, size int64) (typ string, hdr, boxSize int64, err error) {
	var b [16]byte
	if size-off < 8 {
		return "", 0, 0, fmt.Errorf("%d stray bytes at offset %d", size-off, off)
	}
	if _, err := r.ReadAt(b[:8], off); err != nil {
		return "", 0, 0, err
	}
	typ, hdr, boxSize = string(b[4:8]), 8, int64(binary.BigEndian.Uint32(b[:4]))
	switch boxSize {
	case 0: // the box runs to the end of the file
		boxSize = size - off
	case 1: // a 64-bit size follows the type
		if size-off < 16 {
			return "", 0, 0, fmt.Errorf("box %q at offset %d is truncated", typ, off)
		}
		if _, err := r.ReadAt(b[8:16], off+8); err != nil {
			return "", 0, 0, err
		}
		hdr = 16
		big := binary.BigEndian.Uint64(b[8:16])
		if big > uint64(size-off) {
			return "", 0, 0, fmt.Errorf("box %q at offset %d claims %d bytes, past the end of the %d-byte file", typ, off, big, size)
		}
		boxSize = int64(big)
	}
	if boxSize < hdr || boxSize > size-off {
		return "", 0, 0, fmt.Errorf("box %q at offset %d claims %d bytes, past the end of the %d-byte file", typ, off, boxSize, size)
	}
	return typ, hdr, boxSize, nil
}

// childBoxes splits a container box's content into its children by type (the first of each).
func childBoxes(b []byte) (map[string][]byte, [][]byte, error) {
	first := map[string][]byte{}
	var traks [][]byte
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, nil, errors.New("truncated box inside moov")
		}
		n, hdr := uint64(binary.BigEndian.Uint32(b[:4])), uint64(8)
		if n == 1 && len(b) >= 16 {
			n, hdr = binary.BigEndian.Uint64(b[8:16]), 16
		} else if n == 0 {
			n = uint64(len(b))
		}
		if n < hdr || n > uint64(len(b)) {
			return nil, nil, errors.New("a box inside moov overruns its parent")
		}
		typ, content := string(b[4:8]), b[hdr:n]
		if typ == "trak" {
			traks = append(traks, content)
		} else if _, seen := first[typ]; !seen {
			first[typ] = content
		}
		b = b[n:]
	}
	return first, traks, nil
}

// videoSampleCount finds the video track (handler "vide") in moov and returns the sample
// count of its sample size box (stsz): one sample per frame.
func videoSampleCount(moov []byte) (int, error) {
	_, traks, err := childBoxes(moov)
	if err != nil {
		return 0, err
	}
	for _, trak := range traks {
		mdia, err := child(trak, "mdia")
		if err != nil {
			return 0, err
		}
		hdlr, err := child(mdia, "hdlr")
		if err != nil {
			return 0, err
		}
		if len(hdlr) < 12 || string(hdlr[8:12]) != "vide" { // version+flags, pre_defined, handler_type
			continue
		}
		stsz, err := descend(mdia, "minf", "stbl", "stsz")
		if err != nil {
			return 0, err
		}
		if len(stsz) < 12 { // version+flags, sample_size, sample_count
			return 0, errors.New("truncated stsz box")
		}
		return int(binary.BigEndian.Uint32(stsz[8:12])), nil
	}
	return 0, errors.New("no video track")
}

func child(b []byte, typ string) ([]byte, error) {
	kids, _, err := childBoxes(b)
	if err != nil {
		return nil, err
	}
	c, ok := kids[typ]
	if !ok {
		return nil, fmt.Errorf("no %s box", typ)
	}
	return c, nil
}

func descend(b []byte, path ...string) ([]byte, error) {
	for _, typ := range path {
		var err error
		if b, err = child(b, typ); err != nil {
			return nil, err
		}
	}
	return b, nil
}
