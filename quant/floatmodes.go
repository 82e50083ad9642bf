package quant

import (
	"fmt"
	"math"

	"fastvideo/internal/minifloat"
	"fastvideo/internal/safetensors"
)

// MLX's block-scaled float modes (mx.quantize mode "mxfp8", "mxfp4", "nvfp4"; mlx/ops.cpp
// fp_quantize and fp_dequantize), the formats FastVideo's MLX runtime stores DiTs in
// (fastvideo/mlx_runtime/quant_backends.py, fastvideo/mlx_runtime/fastwan.py MLXQuantizationSpec):
//
//   - mxfp8: E4M3FN values, 4 per little-endian uint32 word; one E8M0 scale (uint8, 2^(s-127)) per
//     32 values.
//   - mxfp4: E2M1 values, 8 per uint32 word, value k of a word in bits 4k..4k+3 (so byte b holds
//     values 2b in its low and 2b+1 in its high nibble); one E8M0 scale per 32 values.
//   - nvfp4: E2M1 values packed as mxfp4; one E4M3FN scale per 16 values, times global/(448·6) when
//     a global scale is given.
//
// The packed words are U32 [out, in·bits/32], the scales U8 [out, in/group]; there are no biases.
const (
	ModeMXFP8 = "mxfp8"
	ModeMXFP4 = "mxfp4"
	ModeNVFP4 = "nvfp4"
)

// FloatMode is one block-scaled float format: bits per value and values per scale.
type FloatMode struct {
	Name        string
	Bits, Group int
}

// FloatModes are the block-scaled float formats by mode name.
var FloatModes = map[string]FloatMode{
	ModeMXFP8: {ModeMXFP8, 8, 32},
	ModeMXFP4: {ModeMXFP4, 4, 32},
	ModeNVFP4: {ModeNVFP4, 4, 16},
}

// nvfp4ScaleEncoding is 448·6, the range of an E4M3 scale times an E2M1 value, which a global
// scale is divided by (fp_dequantize's inv_scale_enc).
const nvfp4ScaleEncoding = 448 * 6

// DequantizeFloat is MLX's fp_dequantize to float32 of a packed weight and its scales: value ·
// scale per group, with scale 2^(s-127) (mxfp*) or decode(s) · global/(448·6) (nvfp4; global 0
// means none). Errors wrap ErrShape (dtypes and shapes) or ErrManifest (a NaN scale code).
func DequantizeFloat(mode FloatMode, words, scales safetensors.Info, global float32) ([]float32, error) {
	rows, cols, err := mode.check(words, scales)
	if err != nil {
		return nil, err
	}
	scale, err := mode.groupScales(scales, global)
	if err != nil {
		return nil, err
	}
	out := make([]float32, rows*cols)
	data := words.Data // little-endian uint32 words: byte order is value order
	for i := range out {
		var v float32
		if mode.Bits == 8 {
			v = minifloat.DecodeE4M3FN(data[i])
		} else {
			v = minifloat.DecodeE2M1(data[i/2] >> (4 * (i % 2)))
		}
		out[i] = v * scale[i/mode.Group]
	}
	return out, nil
}

// check validates the dtypes and shapes and returns the dequantized [rows, cols].
func (m FloatMode) check(words, scales safetensors.Info) (rows, cols int, err error) {
	if words.DType != safetensors.U32 || len(words.Shape) != 2 {
		return 0, 0, fmt.Errorf("%w: %s is %s %v; a %s weight is a U32 matrix [out, in·%d/32]", ErrShape, words.Name, words.DType, words.Shape, m.Name, m.Bits)
	}
	rows, cols = words.Shape[0], words.Shape[1]*32/m.Bits
	if cols%m.Group != 0 {
		return 0, 0, fmt.Errorf("%w: %s holds %d values per row, not a whole number of %d-value %s groups", ErrShape, words.Name, cols, m.Group, m.Name)
	}
	if scales.DType != safetensors.U8 || len(scales.Shape) != 2 || scales.Shape[0] != rows || scales.Shape[1] != cols/m.Group {
		return 0, 0, fmt.Errorf("%w: %s is %s %v; %s %v needs U8 scales [%d, %d] (one per %d values)",
			ErrShape, scales.Name, scales.DType, scales.Shape, m.Name, words.Shape, rows, cols/m.Group, m.Group)
	}
	for _, t := range []safetensors.Info{words, scales} {
		if n, ok := safetensors.ByteSize(t.DType, t.Shape); !ok || n != int64(len(t.Data)) {
			return 0, 0, fmt.Errorf("%w: %s holds %d bytes, its shape %v of %s needs %d", ErrShape, t.Name, len(t.Data), t.Shape, t.DType, n)
		}
	}
	return rows, cols, nil
}

// groupScales decodes one float32 scale per group, in fp_dequantize's float32 arithmetic.
func (m FloatMode) groupScales(scales safetensors.Info, global float32) ([]float32, error) {
	out := make([]float32, len(scales.Data))
	enc := float32(1)
	if m.Group == 16 && global != 0 {
		enc = global / nvfp4ScaleEncoding
	}
	for i, s := range scales.Data {
		switch {
		case m.Group == 16:
			out[i] = minifloat.DecodeE4M3FN(s) * enc
		case s == 0xff:
			return nil, fmt.Errorf("%w: %s[%d, %d] is the E8M0 NaN code 0xff", ErrManifest, scales.Name, i/scales.Shape[1], i%scales.Shape[1])
		default:
			out[i] = float32(math.Ldexp(1, int(s)-127))
		}
		if math.IsNaN(float64(out[i])) {
			return nil, fmt.Errorf("%w: %s[%d, %d] is a NaN scale", ErrManifest, scales.Name, i/scales.Shape[1], i%scales.Shape[1])
		}
	}
	return out, nil
}

// LookupFloatMode returns the block-scaled float format called name.
func LookupFloatMode(name string) (FloatMode, bool) {
	m, ok := FloatModes[name]
	return m, ok
}

// Fits reports whether a matrix of input width cols splits into the mode's groups.
func (m FloatMode) Fits(cols int) bool { return cols > 0 && cols%m.Group == 0 }

// fp4Codes is fp_quantize's E2M1 table (mlx/ops.cpp), indexed by code; the nearest entry, first on
// ties, is a value's code.
var fp4Codes = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// QuantizeFloat is MLX's fp_quantize (mlx/ops.cpp, the host fallback every backend's kernel
// matches) of a float32 [rows, cols] matrix: per group, scale = max|w| / (6 or 448); nvfp4 stores the
// scale as E4M3 (times 448·6/global when global is not 0) and divides w by the decoded scale (times
// the same factor); mxfp* store E8M0 round(log2(scale)) (half to even; 0 for a zero scale) and divide
// w by 2^that. FP8 codes are the saturating E4M3 bytes, four to a little-endian uint32 word; FP4
// codes eight to a word, value k at bit 4k. Errors wrap ErrGroupSize or ErrShape; a weight that is
// not finite is refused (MLX would write a NaN scale and silently spoil its whole group).
func QuantizeFloat(m FloatMode, w []float32, rows, cols int, global float32) (words, scales []byte, err error) {
	if rows <= 0 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("%w: %d values for a [%d, %d] matrix", ErrShape, len(w), rows, cols)
	}
	if !m.Fits(cols) {
		return nil, nil, fmt.Errorf("%w: %s needs an input width that is a multiple of %d, got %d", ErrGroupSize, m.Name, m.Group, cols)
	}
	if math.IsNaN(float64(global)) || math.IsInf(float64(global), 0) || global < 0 || (global != 0 && m.Group != 16) {
		return nil, nil, fmt.Errorf("%w: global scale %g: only nvfp4 takes one, and it must be finite and positive", ErrManifest, global)
	}
	for i, v := range w {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, nil, fmt.Errorf("quant: weight [%d, %d] = %v is not finite; cannot quantize", i/cols, i%cols, v)
		}
	}
	codes := make([]byte, len(w))
	scales = make([]byte, len(w)/m.Group)
	for g := range scales {
		scales[g] = m.quantizeGroup(w[g*m.Group:(g+1)*m.Group], codes[g*m.Group:(g+1)*m.Group], global)
	}
	if m.Bits == 8 {
		return codes, scales, nil
	}
	words = make([]byte, len(codes)/2)
	for i := range words {
		words[i] = codes[2*i] | codes[2*i+1]<<4
	}
	return words, scales, nil
}

// quantizeGroup writes one group's codes and returns its scale code.
func (m FloatMode) quantizeGroup(group []float32, codes []byte, global float32) uint8 {
	maxval := float32(448)
	if m.Bits == 4 {
		maxval = 6
	}
	var absmax float32
	for _, v := range group {
		absmax = max(absmax, float32(math.Abs(float64(v))))
	}
	s := absmax / maxval
	var code uint8
	divisor, enc := float32(1), float32(1)
	if m.Group == 16 {
		if global != 0 {
			enc = nvfp4ScaleEncoding / global
		}
		code = minifloat.EncodeE4M3FNSaturating(s * enc)
		divisor = minifloat.DecodeE4M3FN(code)
	} else {
		e := 0
		if s != 0 {
			e = int(math.RoundToEven(float64(float32(math.Log2(float64(s))))))
		}
		divisor = float32(math.Ldexp(1, e))
		code = uint8(e + 127)
	}
	for j, v := range group {
		x := v / divisor * enc
		if m.Bits == 8 {
			codes[j] = minifloat.EncodeE4M3FNSaturating(x)
			continue
		}
		best := 0
		for k := 1; k < len(fp4Codes); k++ {
			if math.Abs(float64(x-fp4Codes[k])) < math.Abs(float64(x-fp4Codes[best])) {
				best = k
			}
		}
		codes[j] = byte(best)
	}
	return code
}
