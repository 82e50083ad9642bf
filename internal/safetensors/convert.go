package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/x448/float16"

	"fastvideo/internal/minifloat"
)

// Float32s decodes a floating tensor (F32, F16, BF16, F64, and F8_E4M3 exactly: the raw values
// of a block-scaled checkpoint, before their scales) to float32.
func (i Info) Float32s() ([]float32, error) {
	if err := i.checkData(); err != nil {
		return nil, err
	}
	n := i.NumElements()
	out := make([]float32, n)
	d := i.Data
	switch i.DType {
	case F32:
		for k := range out {
			out[k] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*k:]))
		}
	case F16:
		for k := range out {
			out[k] = float16.Frombits(binary.LittleEndian.Uint16(d[2*k:])).Float32()
		}
	case BF16:
		for k := range out {
			out[k] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[2*k:])) << 16)
		}
	case F64:
		for k := range out {
			out[k] = float32(math.Float64frombits(binary.LittleEndian.Uint64(d[8*k:])))
		}
	case F8E4M3:
		for k := range out {
			out[k] = minifloat.DecodeE4M3FN(d[k])
		}
	default:
		return nil, fmt.Errorf("safetensors: tensor %q is %s, not a float type", i.Name, i.DType)
	}
	return out, nil
}

// Float64s decodes a floating tensor to float64 without rounding through float32.
func (i Info) Float64s() ([]float64, error) {
	if i.DType != F64 {
		f, err := i.Float32s()
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(f))
		for k, v := range f {
			out[k] = float64(v)
		}
		return out, nil
	}
	if err := i.checkData(); err != nil {
		return nil, err
	}
	out := make([]float64, i.NumElements())
	for k := range out {
		out[k] = math.Float64frombits(binary.LittleEndian.Uint64(i.Data[8*k:]))
	}
	return out, nil
}

// Int64s decodes any integer or BOOL tensor, widening to int64.
func (i Info) Int64s() ([]int64, error) {
	if err := i.checkData(); err != nil {
		return nil, err
	}
	n := i.NumElements()
	out := make([]int64, n)
	d := i.Data
	for k := range out {
		switch i.DType {
		case I64:
			out[k] = int64(binary.LittleEndian.Uint64(d[8*k:]))
		case U64:
			out[k] = int64(binary.LittleEndian.Uint64(d[8*k:]))
		case I32:
			out[k] = int64(int32(binary.LittleEndian.Uint32(d[4*k:])))
		case U32:
			out[k] = int64(binary.LittleEndian.Uint32(d[4*k:]))
		case I16:
			out[k] = int64(int16(binary.LittleEndian.Uint16(d[2*k:])))
		case U16:
			out[k] = int64(binary.LittleEndian.Uint16(d[2*k:]))
		case I8:
			out[k] = int64(int8(d[k]))
		case U8, Bool:
			out[k] = int64(d[k])
		default:
			return nil, fmt.Errorf("safetensors: tensor %q is %s, not an integer type", i.Name, i.DType)
		}
	}
	return out, nil
}

// F32Bytes encodes float32 values as little-endian bytes, for the writer.
func F32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for k, x := range v {
		binary.LittleEndian.PutUint32(out[4*k:], math.Float32bits(x))
	}
	return out
}

// FloatBytes encodes float32 values as dt (F32, BF16, F16 or F64), little-endian, rounding to nearest
// even: a value dt holds exactly comes back bit-identical through Float32s.
func FloatBytes(v []float32, dt DType) ([]byte, error) {
	switch dt {
	case F32:
		return F32Bytes(v), nil
	case BF16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], bfloat16.FromFloat32(x).Bits())
		}
		return out, nil
	case F16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(x).Bits())
		}
		return out, nil
	case F64:
		out := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(float64(x)))
		}
		return out, nil
	}
	return nil, fmt.Errorf("safetensors: cannot encode float32 values as %s", dt)
}
