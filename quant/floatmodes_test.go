package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"fastvideo/internal/minifloat"
	"fastvideo/internal/safetensors"
)

// mlxFP4LUT is fp_dequantize's E2M1 table (mlx/ops.cpp), indexed by code.
var mlxFP4LUT = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// mlxFPQuantize is QuantizeFloat for a matrix whose width the mode divides.
func mlxFPQuantize(m FloatMode, w []float32, rows, cols int, global float32) (words, scales []byte) {
	words, scales, err := QuantizeFloat(m, w, rows, cols, global)
	if err != nil {
		panic(err)
	}
	return words, scales
}

// mlxFPDequantize is fp_dequantize's formula (mlx/ops.cpp) written out independently of
// DequantizeFloat: it unpacks through uint32 words and the LUT, and builds the scales as MLX does.
func mlxFPDequantize(m FloatMode, words, scales []byte, cols int, global float32) []float32 {
	out := make([]float32, len(scales)*m.Group)
	for i := range out {
		word := binary.LittleEndian.Uint32(words[4*(i*m.Bits/32):])
		shift := (i * m.Bits) % 32
		code := byte(word >> shift & (1<<m.Bits - 1))
		v := mlxFP4LUT[code&15]
		if m.Bits == 8 {
			v = minifloat.DecodeE4M3FN(code)
		}
		var scale float32
		if m.Group == 16 {
			inv := float32(1)
			if global != 0 {
				inv = global / (448.0 * 6)
			}
			scale = minifloat.DecodeE4M3FN(scales[i/m.Group]) * inv
		} else {
			scale = float32(math.Pow(2, float64(float32(scales[i/m.Group])-127)))
		}
		out[i] = v * scale
	}
	return out
}

// TestFloatModesRoundTrip: MLX's quantize (transcribed) → DequantizeFloat equals MLX's dequantize
// formula bit for bit, for every mode, with and without an nvfp4 global scale; and the result is
// within each format's rounding of the input: half the value spacing at the group's largest code
// (E4M3: 2^-4 relative to 448 at most; E2M1: 1 of 6, the gap between 4 and 6, halved) times the
// group scale, which for E8M0's power-of-two scale may sit up to √2 above max|w|/maxval.
func TestFloatModesRoundTrip(t *testing.T) {
	const rows, cols = 6, 96
	r := rand.New(rand.NewPCG(5, 9))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64() * math.Exp(r.NormFloat64()))
	}
	for _, c := range []struct {
		mode   string
		global float32
	}{{ModeMXFP8, 0}, {ModeMXFP4, 0}, {ModeNVFP4, 0}, {ModeNVFP4, 37.5}} {
		m := FloatModes[c.mode]
		words, scales := mlxFPQuantize(m, w, rows, cols, c.global)
		wInfo := safetensors.Info{Name: "w", DType: safetensors.U32, Shape: []int{rows, cols * m.Bits / 32}, Data: words}
		sInfo := safetensors.Info{Name: "w.scales", DType: safetensors.U8, Shape: []int{rows, cols / m.Group}, Data: scales}
		got, err := DequantizeFloat(m, wInfo, sInfo, c.global)
		if err != nil {
			t.Fatal(err)
		}
		want := mlxFPDequantize(m, words, scales, cols, c.global)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: value %d = %g, MLX's formula gives %g", c.mode, i, got[i], want[i])
			}
		}
		checkFloatModeError(t, m, w, got)
	}
}

func checkFloatModeError(t *testing.T, m FloatMode, w, got []float32) {
	t.Helper()
	for g := 0; g < len(w)/m.Group; g++ {
		var absmax float64
		for _, v := range w[g*m.Group : (g+1)*m.Group] {
			absmax = max(absmax, math.Abs(float64(v)))
		}
		bound := floatModeBound(m, absmax)
		for j := g * m.Group; j < (g+1)*m.Group; j++ {
			if d := math.Abs(float64(got[j] - w[j])); d > bound*1.0001 {
				t.Fatalf("%s: value %d off by %g, more than the format's %g", m.Name, j, d, bound)
			}
		}
	}
}

// floatModeBound is the largest error of one value of a group whose largest magnitude is absmax.
// The E8M0 scale 2^round(log2(absmax/maxval)) may sit a factor √2 below absmax/maxval, and the
// values above maxval then saturate: an error of up to absmax·(1 − 1/√2); otherwise rounding costs
// half the widest code gap at the scale, which may be √2 above absmax/maxval: E4M3's 2^-4 of 448,
// E2M1's 1 (between 4 and 6, i.e. 1/6 of maxval). nvfp4's E4M3 scale is within 2^-4 of
// absmax/6, so its values never saturate by more than that and round by at most half of 2 at the scale.
func floatModeBound(m FloatMode, absmax float64) float64 {
	clip := absmax * (1 - 1/math.Sqrt2)
	switch {
	case m.Group == 16:
		return absmax / 6 * (1 + 1.0/16) * (1 + 1.0/16)
	case m.Bits == 8:
		return max(clip, absmax*math.Sqrt2/16)
	}
	return max(clip, absmax*math.Sqrt2/6)
}

func TestDequantizeFloatErrors(t *testing.T) {
	m := FloatModes[ModeMXFP4]
	words := safetensors.Info{Name: "w", DType: safetensors.U32, Shape: []int{1, 8}, Data: make([]byte, 32)}
	scales := safetensors.Info{Name: "w.scales", DType: safetensors.U8, Shape: []int{1, 1}, Data: []byte{127}}
	if _, err := DequantizeFloat(m, words, scales, 0); !errors.Is(err, ErrShape) {
		t.Fatalf("1 scale for 64 values (2 groups): %v", err)
	}
	scales = safetensors.Info{Name: "w.scales", DType: safetensors.U8, Shape: []int{1, 1}, Data: []byte{0xff}}
	words.Shape, words.Data = []int{1, 8}, make([]byte, 32)
	if _, err := DequantizeFloat(FloatModes[ModeMXFP8], words, scales, 0); !errors.Is(err, ErrManifest) {
		t.Fatalf("E8M0 NaN scale: %v", err)
	}
	words.DType = safetensors.U8
	if _, err := DequantizeFloat(m, words, scales, 0); !errors.Is(err, ErrShape) {
		t.Fatalf("U8 words: %v", err)
	}
}

// TestQuantizeFloatRefusesNonFinite: every float mode refuses a NaN or infinite weight, naming its
// place, rather than writing a group with a NaN scale.
func TestQuantizeFloatRefusesNonFinite(t *testing.T) {
	for name, m := range FloatModes {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			w := make([]float32, 2*m.Group)
			w[m.Group+3] = bad
			if _, _, err := QuantizeFloat(m, w, 2, m.Group, 0); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("[1, 3] = %v", bad)) {
				t.Errorf("%s with %v: %v", name, bad, err)
			}
		}
	}
}
