// Package minifloat decodes and encodes the sub-byte and byte float formats of block-scaled
// checkpoints: FP8 E4M3FN (torch.float8_e4m3fn, MLX mxfp8 values and nvfp4 scales), FP4 E2M1 (MLX
// mxfp4/nvfp4 values) and the E8M0 power-of-two scale of the OCP MX formats. Decoding is exact
// (every code is a float32); encoding rounds to nearest, ties to even, as the reference
// implementations cited on each function do.
package minifloat

import "math"

// E4M3FNMax is the largest finite E4M3FN value (1.75 * 2^8).
const E4M3FNMax = 448

// DecodeE4M3FN is the value of an E4M3FN byte: sign, 4 exponent bits with bias 7, 3 mantissa bits;
// exponent 0 is subnormal (m/8 * 2^-6); 0x7f and 0xff are NaN; there is no infinity.
func DecodeE4M3FN(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp, mant := int(b>>3&0xf), float32(b&7)
	switch {
	case exp == 15 && mant == 7:
		// The sign survives so that 0xff encodes back to 0xff.
		return math.Float32frombits(uint32(b&0x80)<<24 | 0x7fc00000)
	case exp == 0:
		return sign * mant / 8 * (1.0 / 64)
	}
	return sign * (1 + mant/8) * float32(math.Ldexp(1, exp-7))
}

// EncodeE4M3FN rounds x to E4M3FN as torch's float -> float8_e4m3fn conversion does
// (c10/util/Float8_e4m3fn.h, fp8e4m3fn_from_fp32_value): round to nearest even, NaN and magnitudes
// of 480 and above become NaN (0x7f with the sign), magnitudes in (464, 480) round to the NaN code
// too (the conversion does not saturate: callers clamp to ±E4M3FNMax first, as every quantizer does).
func EncodeE4M3FN(x float32) uint8 {
	const (
		fp8Max     = uint32(1087) << 20 // 480.0f
		denormMask = uint32(141) << 23
	)
	bits := math.Float32bits(x)
	sign := uint8(bits >> 24 & 0x80)
	bits &= 0x7fffffff
	var out uint8
	switch {
	case bits >= fp8Max:
		out = 0x7f
	case bits < uint32(121)<<23:
		// Below 2^-6 the value is subnormal: a float32 addition of 2^14 rounds the mantissa to the
		// subnormal grid (ties to even) and leaves the code in the low bits.
		f := math.Float32frombits(bits) + math.Float32frombits(denormMask)
		out = uint8(math.Float32bits(f) - denormMask)
	default:
		// Rebias the exponent from 127 to 7 (a wrapping subtraction) and round the 20 dropped
		// mantissa bits to nearest even.
		odd := bits >> 20 & 1
		bits = bits - uint32(127-7)<<23 + 0x7ffff + odd
		out = uint8(bits >> 20)
	}
	return out | sign
}

// e2m1Values are the eight non-negative FP4 E2M1 values, by code (sign is bit 3).
var e2m1Values = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// E2M1Max is the largest E2M1 value.
const E2M1Max = 6

// DecodeE2M1 is the value of the low nibble of n: sign bit 3, 2 exponent bits with bias 1, 1
// mantissa bit (exponent 0 is subnormal 0 or 0.5).
func DecodeE2M1(n uint8) float32 {
	v := e2m1Values[n&7]
	if n&8 != 0 {
		return -v
	}
	return v
}

// DecodeE8M0 is the OCP MX shared scale: 2^(b-127), NaN for 0xff.
func DecodeE8M0(b uint8) float32 {
	if b == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-127))
}

// EncodeE4M3FNSaturating is MLX's float -> fp8 conversion (mlx/backend/cpu/unary_ops.h, ToFP8):
// EncodeE4M3FN's rounding, but magnitudes of 448 and above (NaN and infinity included) become ±448.
func EncodeE4M3FNSaturating(x float32) uint8 {
	bits := math.Float32bits(x)
	if bits&0x7fffffff >= math.Float32bits(E4M3FNMax) {
		return uint8(bits>>24&0x80) | 0x7e
	}
	return EncodeE4M3FN(x)
}
