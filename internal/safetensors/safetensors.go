// Package safetensors reads and writes the safetensors checkpoint format.
//
// Files are mapped read-only so that a 35 GB checkpoint costs no Go heap: a tensor's
// bytes are a slice of the mapping and can be uploaded to a device without a copy.
// The header is validated strictly before any tensor is handed out, because a
// corrupt or hostile header otherwise turns into out-of-range slices deep inside
// model loading, far from the file that caused it.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"fastvideo/internal/safefile"
	"fastvideo/internal/strictjson"
)

// MaxHeaderBytes bounds the JSON header: real checkpoints stay far below it, and
// reading an attacker-chosen length would otherwise allocate without limit.
const MaxHeaderBytes = 100 << 20

// DType is a safetensors dtype name such as "F32" or "BF16".
type DType string

const (
	F64     DType = "F64"
	F32     DType = "F32"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I64     DType = "I64"
	I32     DType = "I32"
	I16     DType = "I16"
	I8      DType = "I8"
	U8      DType = "U8"
	U16     DType = "U16"
	U32     DType = "U32"
	U64     DType = "U64"
	Bool    DType = "BOOL"
	F8E4M3  DType = "F8_E4M3"
	F8E5M2  DType = "F8_E5M2"
	unknown DType = ""
)

var dtypeSizes = map[DType]int{
	F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, U16: 2, U32: 4, U64: 8,
	Bool: 1, F8E4M3: 1, F8E5M2: 1,
}

// Size is the number of bytes of one element, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// IsFloat reports whether values convert to float32 as model weights. F8 types are excluded:
// their values mean nothing without the block scales stored beside them, so only a
// quantization-aware consumer decodes them (Float32s does, for F8_E4M3).
func (d DType) IsFloat() bool { return d == F64 || d == F32 || d == F16 || d == BF16 }

// Info describes one tensor. Data aliases the file mapping: it is valid until the
// File is closed and must not be written.
type Info struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements is the product of the shape (1 for a scalar).
func (i Info) NumElements() int {
	n := 1
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

// checkData verifies that Data holds exactly the bytes the shape and dtype need, with
// overflow-checked arithmetic, so that decoding can index it without bounds surprises
// (an Info may be built by hand, not only by the parser).
func (i Info) checkData() error {
	want, ok := ByteSize(i.DType, i.Shape)
	if !ok {
		return fmt.Errorf("safetensors: tensor %q: shape %v of %s is too large or invalid", i.Name, i.Shape, i.DType)
	}
	if want != int64(len(i.Data)) {
		return fmt.Errorf("safetensors: tensor %q: shape %v of %s needs %d bytes, has %d", i.Name, i.Shape, i.DType, want, len(i.Data))
	}
	return nil
}

// ByteSize is the number of bytes of a tensor of dtype and shape; ok is false for an unknown
// dtype, a negative dimension, or a size beyond MaxInt64 (a product that would wrap).
func ByteSize[D ~int | ~int64](dtype DType, shape []D) (n int64, ok bool) {
	n = int64(dtype.Size())
	if n == 0 {
		return 0, false
	}
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

// File is an open safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	tensors  map[string]Info
	names    []string
	mapping  []byte
	unmap    func() error
}

// Open maps path and validates its header.
func Open(path string) (*File, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	data, unmap, err := mapFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors: mapping %s: %w", path, err)
	}
	file, err := parse(data)
	if err != nil {
		_ = unmap()
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	file.Path, file.unmap = path, unmap
	return file, nil
}

// FromBytes parses an in-memory safetensors image (the bytes are aliased, not copied).
func FromBytes(data []byte) (*File, error) {
	file, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return file, nil
}

// ParseHeader validates a safetensors image and returns its tensor descriptions
// in file order, without needing a mapping. It is the unit the fuzzer drives.
func ParseHeader(data []byte) ([]Info, map[string]string, error) {
	f, err := parse(data)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Info, 0, len(f.names))
	for _, n := range f.names {
		out = append(out, f.tensors[n])
	}
	return out, f.Metadata, nil
}

type rawEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

func parse(data []byte) (*File, error) {
	header, body, err := splitImage(data)
	if err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(string(header)))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %v", err)
	}
	if err := strictjson.CheckUniqueKeys(header); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}

	f := &File{tensors: make(map[string]Info, len(raw))}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		info, sp, err := parseEntry(name, msg, body)
		if err != nil {
			return nil, err
		}
		f.tensors[name] = info
		spans = append(spans, sp)
	}
	if err := checkNoOverlap(spans); err != nil {
		return nil, err
	}
	f.names = make([]string, len(spans))
	for i, s := range spans {
		f.names[i] = s.name
	}
	f.mapping = data
	return f, nil
}

// splitImage checks the 8-byte header length and splits the image into the
// JSON header and the data section.
func splitImage(data []byte) (header, body []byte, err error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length: truncated or not a safetensors file", len(data))
	}
	hlen := binary.LittleEndian.Uint64(data[:8])
	if hlen > MaxHeaderBytes {
		return nil, nil, fmt.Errorf("header length %d exceeds the %d-byte limit: corrupt file", hlen, MaxHeaderBytes)
	}
	if hlen > uint64(len(data)-8) {
		return nil, nil, fmt.Errorf("header length %d runs past the end of the %d-byte file: truncated", hlen, len(data))
	}
	return data[8 : 8+hlen], data[8+hlen:], nil
}

// span is a tensor's byte range in the data section.
type span struct {
	name       string
	start, end int64
}

// parseEntry validates one tensor entry against the data section: a known
// dtype, offsets inside it, and a shape whose byte size matches the range.
func parseEntry(name string, msg json.RawMessage, body []byte) (Info, span, error) {
	var e rawEntry
	if err := json.Unmarshal(msg, &e); err != nil {
		return Info{}, span{}, fmt.Errorf("tensor %q: malformed entry: %v", name, err)
	}
	dt := DType(e.DType)
	size := dt.Size()
	if size == 0 {
		return Info{}, span{}, fmt.Errorf("tensor %q: unknown dtype %q", name, e.DType)
	}
	if len(e.DataOffsets) != 2 {
		return Info{}, span{}, fmt.Errorf("tensor %q: data_offsets must hold 2 values, got %d", name, len(e.DataOffsets))
	}
	start, end := e.DataOffsets[0], e.DataOffsets[1]
	if start < 0 || end < start {
		return Info{}, span{}, fmt.Errorf("tensor %q: invalid data_offsets [%d, %d]", name, start, end)
	}
	if end > int64(len(body)) {
		return Info{}, span{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the %d-byte data section: truncated file", name, start, end, len(body))
	}
	shape := make([]int, len(e.Shape))
	for i, d := range e.Shape {
		if d < 0 {
			return Info{}, span{}, fmt.Errorf("tensor %q: negative dimension in shape %v", name, e.Shape)
		}
		if int64(int(d)) != d {
			return Info{}, span{}, fmt.Errorf("tensor %q: dimension %d of shape %v does not fit an int", name, d, e.Shape)
		}
		shape[i] = int(d)
	}
	// The byte size is computed with overflow checks: a wrapped product (F32 [2^31, 2^31]
	// is 2^64 bytes, 0 modulo 2^64) would otherwise match empty data_offsets.
	want, ok := ByteSize(dt, e.Shape)
	if !ok {
		return Info{}, span{}, fmt.Errorf("tensor %q: shape %v of %s is too large: its byte size overflows int64", name, e.Shape, dt)
	}
	if want != end-start {
		return Info{}, span{}, fmt.Errorf("tensor %q: shape %v of %s needs %d bytes but data_offsets [%d, %d] hold %d", name, e.Shape, dt, want, start, end, end-start)
	}
	return Info{Name: name, DType: dt, Shape: shape, Data: body[start:end:end]}, span{name, start, end}, nil
}

// checkNoOverlap sorts the spans into file order and rejects overlapping
// ranges. A running maximum end catches every overlap, including one hidden
// behind an empty tensor between the two ranges.
func checkNoOverlap(spans []span) error {
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].start != spans[j].start {
			return spans[i].start < spans[j].start
		}
		return spans[i].name < spans[j].name
	})
	var last span
	for _, cur := range spans {
		if cur.end == cur.start {
			continue
		}
		if cur.start < last.end {
			return fmt.Errorf("tensors %q [%d, %d] and %q [%d, %d] overlap", last.name, last.start, last.end, cur.name, cur.start, cur.end)
		}
		if cur.end > last.end {
			last = cur
		}
	}
	return nil
}

// Names lists the tensors in data-offset order.
func (f *File) Names() []string { return append([]string(nil), f.names...) }

// Tensor returns one tensor's description and bytes.
func (f *File) Tensor(name string) (Info, bool) {
	i, ok := f.tensors[name]
	return i, ok
}

// Close unmaps the file; Data slices handed out before become invalid.
func (f *File) Close() error {
	if f == nil || f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap, f.mapping, f.tensors = nil, nil, nil
	return err
}
