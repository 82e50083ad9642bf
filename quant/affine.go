package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/x448/float16"

	"fastvideo/internal/safetensors"
)

// Scheme is one MLX affine quantization setting: Bits per value and GroupSize
// consecutive input-dimension values sharing a scale and a bias.
type Scheme struct {
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
}

// DefaultGroupSize is MLX's default group size (mlx.core.quantize).
const DefaultGroupSize = 64

func validGroup(g int) bool { return g == 32 || g == 64 || g == 128 }

// Validate checks the bit width and the group size.
func (s Scheme) Validate() error {
	if s.Bits != 4 && s.Bits != 6 && s.Bits != 8 {
		return &BitsError{Bits: s.Bits}
	}
	if !validGroup(s.GroupSize) {
		return &GroupSizeError{Group: s.GroupSize}
	}
	return nil
}

// check validates the scheme for a [rows, cols] matrix.
func (s Scheme) check(rows, cols int) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("%w: matrix shape [%d, %d] must be positive", ErrShape, rows, cols)
	}
	if !s.Fits(cols) {
		return &GroupSizeError{Rows: rows, Cols: cols, Group: s.GroupSize}
	}
	return nil
}

// Fits reports whether a matrix of cols input values splits into whole groups.
func (s Scheme) Fits(cols int) bool { return s.GroupSize > 0 && cols%s.GroupSize == 0 }

// WordsPerRow is the number of packed uint32 words of a row of cols values
// (cols·bits/32; exact for any cols that is a multiple of a valid group size).
func (s Scheme) WordsPerRow(cols int) int { return cols * s.Bits / 32 }

// GroupsPerRow is the number of scale/bias pairs of a row of cols values.
func (s Scheme) GroupsPerRow(cols int) int { return cols / s.GroupSize }

// Affine is an affine-quantized matrix [Rows, Cols] (PyTorch/MLX layout [out,
// in]) as MLX stores it: per row, the codes of the Cols values packed into
// uint32 words as one little-endian bit stream (value k at stream bit k·Bits),
// and one scale and bias per group of GroupSize consecutive values. A value
// dequantizes to scale·q + bias.
type Affine struct {
	Scheme
	Rows, Cols int
	// Words is [Rows, Cols·Bits/32].
	Words []uint32
	// Scales and Biases are [Rows, Cols/GroupSize], already rounded to StoreDType
	// (the values a checkpoint holds); scales may be negative.
	Scales, Biases []float32
	// StoreDType is the dtype scales and biases are stored in: BF16 (MLX
	// conversions of the BF16 release), F16 or F32.
	StoreDType safetensors.DType
}

// roundTo rounds v to the nearest value of dt (round to nearest even).
func roundTo(v float32, dt safetensors.DType) float32 {
	switch dt {
	case safetensors.BF16:
		return bfloat16.FromFloat32(v).Float32()
	case safetensors.F16:
		return float16.Fromfloat32(v).Float32()
	}
	return v
}

func checkStore(dt safetensors.DType) error {
	switch dt {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
		return nil
	}
	return fmt.Errorf("quant: scales/biases dtype %q is not supported; use BF16 (MLX checkpoints), F16 or F32", dt)
}

// rint rounds half to even, like C's rint in the default rounding mode.
func rint(x float32) float32 { return float32(math.RoundToEven(float64(x))) }

// Quantize quantizes w ([rows, cols], row-major float32) with MLX's affine
// definition, group by group along the input dimension, all arithmetic in
// float32 exactly as MLX's CPU kernel does it:
//
//	n = 2^bits − 1; mn, mx = min, max of the group
//	s = max((mx − mn)/n, 1e-7); if |mn| > |mx| { edge = mn } else { edge = mx; s = −s }
//	q0 = rint(edge/s); if q0 ≠ 0 { s = edge/q0; b = edge } else { b = 0 }
//	q = clamp(rint((w − b)/s), 0, n)
//
// The codes use the unrounded s and b; the stored s and b are then rounded to
// store (BF16 in real checkpoints). Bits must be 4, 6 or 8 (ErrBits) and cols a
// multiple of group (ErrGroupSize).
func Quantize(w []float32, rows, cols, bits, group int, store safetensors.DType) (*Affine, error) {
	s := Scheme{Bits: bits, GroupSize: group}
	if err := s.check(rows, cols); err != nil {
		return nil, err
	}
	if err := checkStore(store); err != nil {
		return nil, err
	}
	if len(w) != rows*cols {
		return nil, fmt.Errorf("%w: %d values for a [%d, %d] matrix", ErrShape, len(w), rows, cols)
	}
	nBins := float32(int(1)<<bits - 1)
	const eps = float32(1e-7)
	gpr := s.GroupsPerRow(cols)
	a := &Affine{Scheme: s, Rows: rows, Cols: cols, StoreDType: store,
		Scales: make([]float32, rows*gpr), Biases: make([]float32, rows*gpr)}
	codes := make([]uint8, rows*cols)
	for g := 0; g < rows*gpr; g++ {
		vals := w[g*group : (g+1)*group]
		mn, mx := float32(math.Inf(1)), float32(math.Inf(-1))
		for j, v := range vals {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("quant: weight [%d, %d] = %v is not finite; cannot quantize", g/gpr, (g%gpr)*group+j, v)
			}
			mx = max(mx, v)
			mn = min(mn, v)
		}
		mask := abs32(mn) > abs32(mx)
		scale := max((mx-mn)/nBins, eps)
		edge := mx
		if mask {
			edge = mn
		} else {
			scale = -scale
		}
		q0 := rint(edge / scale)
		bias := float32(0)
		if q0 != 0 {
			scale = edge / q0
			bias = edge
		}
		out := codes[g*group : (g+1)*group]
		for j, v := range vals {
			q := rint((v - bias) / scale)
			q = min(max(q, 0), nBins)
			out[j] = uint8(q)
		}
		a.Scales[g] = roundTo(scale, store)
		a.Biases[g] = roundTo(bias, store)
	}
	words, err := Pack(codes, rows, cols, bits)
	if err != nil {
		return nil, err
	}
	a.Words = words
	return a, nil
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

// Pack packs codes ([rows, cols], each < 2^bits) into MLX's layout: per row one
// little-endian bit stream stored as uint32 words, value k at stream bit k·bits.
// For 8 and 4 bits that is 32/bits values per word, value k%per at bit
// (k%per)·bits; for 6 bits it is MLX's 4 values per 3 bytes (a little-endian
// 24-bit word with values at bits 0, 6, 12, 18) read back as uint32 words.
func Pack(codes []uint8, rows, cols, bits int) ([]uint32, error) {
	if bits != 4 && bits != 6 && bits != 8 {
		return nil, &BitsError{Bits: bits}
	}
	if len(codes) != rows*cols {
		return nil, fmt.Errorf("%w: %d codes for a [%d, %d] matrix", ErrShape, len(codes), rows, cols)
	}
	if cols*bits%32 != 0 {
		return nil, fmt.Errorf("%w: a row of %d %d-bit values does not fill whole uint32 words", ErrShape, cols, bits)
	}
	wpr := cols * bits / 32
	out := make([]uint32, rows*wpr)
	limit := uint8(1<<bits - 1)
	for r := 0; r < rows; r++ {
		row := out[r*wpr : (r+1)*wpr]
		for c, v := range codes[r*cols : (r+1)*cols] {
			if v > limit {
				return nil, fmt.Errorf("quant: code [%d, %d] = %d does not fit in %d bits", r, c, v, bits)
			}
			bit := c * bits
			w, off := bit/32, uint(bit%32)
			row[w] |= uint32(v) << off
			if int(off)+bits > 32 {
				row[w+1] |= uint32(v) >> (32 - off)
			}
		}
	}
	return out, nil
}

// Unpack is the inverse of Pack: the codes [rows, cols] of packed words.
func Unpack(words []uint32, rows, cols, bits int) ([]uint8, error) {
	if bits != 4 && bits != 6 && bits != 8 {
		return nil, &BitsError{Bits: bits}
	}
	if cols*bits%32 != 0 {
		return nil, fmt.Errorf("%w: a row of %d %d-bit values does not fill whole uint32 words", ErrShape, cols, bits)
	}
	wpr := cols * bits / 32
	if len(words) != rows*wpr {
		return nil, fmt.Errorf("%w: %d words for %d rows of %d %d-bit values (want %d)", ErrShape, len(words), rows, cols, bits, rows*wpr)
	}
	mask := uint32(1)<<bits - 1
	out := make([]uint8, rows*cols)
	for r := 0; r < rows; r++ {
		row := words[r*wpr : (r+1)*wpr]
		for c := 0; c < cols; c++ {
			bit := c * bits
			w, off := bit/32, uint(bit%32)
			v := row[w] >> off
			if int(off)+bits > 32 {
				v |= row[w+1] << (32 - off)
			}
			out[r*cols+c] = uint8(v & mask)
		}
	}
	return out, nil
}

// Unpack returns the codes [Rows, Cols].
func (a *Affine) Unpack() ([]uint8, error) { return Unpack(a.Words, a.Rows, a.Cols, a.Bits) }

// Dequantize returns scale·q + bias [Rows, Cols] in float32, the product rounded
// to float32 before the addition (no fused multiply-add), which is what the
// in-graph dequantization computes on the Go backend.
func (a *Affine) Dequantize() ([]float32, error) {
	codes, err := a.Unpack()
	if err != nil {
		return nil, err
	}
	if len(a.Scales) != a.Rows*a.GroupsPerRow(a.Cols) || len(a.Biases) != len(a.Scales) {
		return nil, fmt.Errorf("%w: %d scales and %d biases for [%d, %d] with group %d", ErrShape, len(a.Scales), len(a.Biases), a.Rows, a.Cols, a.GroupSize)
	}
	out := make([]float32, len(codes))
	for i, q := range codes {
		g := i / a.GroupSize
		out[i] = float32(a.Scales[g]*float32(q)) + a.Biases[g]
	}
	return out, nil
}

// Tensors returns the three checkpoint tensors of the matrix under key: key
// (U32 words), key+".scales" and key+".biases" (StoreDType).
func (a *Affine) Tensors(key string) ([]safetensors.Tensor, error) {
	if err := checkStore(a.StoreDType); err != nil {
		return nil, err
	}
	gs := []int{a.Rows, a.GroupsPerRow(a.Cols)}
	scales, err := safetensors.FloatBytes(a.Scales, a.StoreDType)
	if err != nil {
		return nil, err
	}
	biases, err := safetensors.FloatBytes(a.Biases, a.StoreDType)
	if err != nil {
		return nil, err
	}
	return []safetensors.Tensor{
		{Name: key, DType: safetensors.U32, Shape: []int{a.Rows, a.WordsPerRow(a.Cols)}, Data: u32Bytes(a.Words)},
		{Name: key + ScalesSuffix, DType: a.StoreDType, Shape: gs, Data: scales},
		{Name: key + BiasesSuffix, DType: a.StoreDType, Shape: gs, Data: biases},
	}, nil
}

// Suffixes of the scale and bias tensors of a quantized key.
const (
	ScalesSuffix = ".scales"
	BiasesSuffix = ".biases"
)

// AffineFromTensors reads a quantized matrix back from its three checkpoint
// tensors, checking their dtypes and shapes against the scheme.
func AffineFromTensors(key string, w, scales, biases safetensors.Info, s Scheme) (*Affine, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := checkQuantShapes(key, w, scales, biases, s); err != nil {
		return nil, err
	}
	rows, cols := w.Shape[0], w.Shape[1]*32/s.Bits
	a := &Affine{Scheme: s, Rows: rows, Cols: cols, StoreDType: scales.DType, Words: make([]uint32, len(w.Data)/4)}
	for i := range a.Words {
		a.Words[i] = binary.LittleEndian.Uint32(w.Data[4*i:])
	}
	var err error
	if a.Scales, err = scales.Float32s(); err != nil {
		return nil, err
	}
	if a.Biases, err = biases.Float32s(); err != nil {
		return nil, err
	}
	return a, nil
}

func u32Bytes(v []uint32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], x)
	}
	return out
}
