package quant

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"

	"fastvideo/internal/safetensors"
)

// mlxQuantize is a line-by-line transcription of MLX's CPU affine quantize
// (mlx/backend/cpu/quantized.cpp, `quantize<T, U>`): per group, float32
// min/max, the edge rule, and the codes packed either into uint32 words (power
// of 2 bits, value k at bit k·bits) or, for 6 bits, into 3 bytes per 4 values
// written byte by byte. The byte output is reinterpreted as little-endian
// uint32 words, which is how the uint32 array MLX returns holds it. It is an
// independent packing implementation (bytes, not a bit stream) for Pack.
func mlxQuantize(w []float32, bits, group int) (words []uint32, codes []uint8, scales, biases []float32) {
	nBins := float32(int(1)<<bits - 1)
	eps := float32(1e-7)
	pow2 := bits&(bits-1) == 0
	elPerInt := 32 / bits
	bytesPerPack := 1 // get_bytes_per_pack(bits) with its default wsize 8
	if !pow2 {
		elPerInt, bytesPerPack = 4, 3 // get_pack_factor(6, 32) = 4, get_bytes_per_pack(6) = 3
	}
	intPerGroup := group * bytesPerPack / elPerInt
	nGroups := len(w) / group
	var out32 []uint32
	var out8 []uint8
	if pow2 {
		out32 = make([]uint32, nGroups*intPerGroup)
	} else {
		out8 = make([]uint8, nGroups*intPerGroup)
	}
	codes = make([]uint8, len(w))
	for i := 0; i < nGroups; i++ {
		wIdx := i * group
		wMin := float32(math.Inf(1))
		wMax := -wMin
		for j := 0; j < group; j++ {
			wMax = float32(math.Max(float64(wMax), float64(w[wIdx+j])))
			wMin = float32(math.Min(float64(wMin), float64(w[wIdx+j])))
		}
		mask := math.Abs(float64(wMin)) > math.Abs(float64(wMax))
		scale := float32(math.Max(float64((wMax-wMin)/nBins), float64(eps)))
		if !mask {
			scale = -scale
		}
		edge := wMax
		if mask {
			edge = wMin
		}
		q0 := float32(math.RoundToEven(float64(edge / scale)))
		bias := float32(0)
		if q0 != 0 {
			scale = edge / q0
			bias = edge
		}
		outIdx := i * intPerGroup
		for j := 0; j < intPerGroup/bytesPerPack; j++ {
			var outEl uint64
			for k := 0; k < elPerInt; k++ {
				wEl := w[wIdx+j*elPerInt+k]
				wEl = float32(math.RoundToEven(float64((wEl - bias) / scale)))
				wEl = float32(math.Min(math.Max(float64(wEl), 0), float64(nBins)))
				codes[wIdx+j*elPerInt+k] = uint8(wEl)
				outEl |= uint64(wEl) << (k * bits)
			}
			if pow2 {
				out32[outIdx+j] = uint32(outEl)
			} else {
				out8[outIdx+bytesPerPack*j] = uint8(outEl & 0xff)
				out8[outIdx+bytesPerPack*j+1] = uint8((outEl & 0xff00) >> 8)
				out8[outIdx+bytesPerPack*j+2] = uint8((outEl & 0xff0000) >> 16)
			}
		}
		scales = append(scales, scale)
		biases = append(biases, bias)
	}
	if pow2 {
		return out32, codes, scales, biases
	}
	words = make([]uint32, len(out8)/4)
	for i := range words {
		words[i] = uint32(out8[4*i]) | uint32(out8[4*i+1])<<8 | uint32(out8[4*i+2])<<16 | uint32(out8[4*i+3])<<24
	}
	return words, codes, scales, biases
}

// testMatrix fills [rows, cols] with groups of varied character: Gaussian,
// all positive, all negative, constant, all zero, tiny, and wide-range values,
// and exact ties for round-half-to-even.
func testMatrix(r *rand.Rand, rows, cols int) []float32 {
	w := make([]float32, rows*cols)
	for g := 0; g < len(w)/64; g++ {
		v := w[g*64 : (g+1)*64]
		kind := g % 8
		for j := range v {
			n := float32(r.NormFloat64())
			switch kind {
			case 0, 1:
				v[j] = 0.05 * n
			case 2:
				v[j] = float32(math.Abs(float64(n))) + 0.3
			case 3:
				v[j] = -float32(math.Abs(float64(n))) - 0.1
			case 4:
				v[j] = 0.75
			case 5:
				v[j] = 0
			case 6:
				v[j] = 1e-9 * n
			case 7:
				v[j] = float32(j) / 63 // [0, 1]: every code an exact multiple of the step
			}
		}
		if kind == 1 {
			v[r.IntN(64)] = 3 // an outlier dominating the range
		}
	}
	return w
}

func TestQuantizeMatchesMLX(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{8, 6, 4} {
		for _, store := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			for _, sh := range [][2]int{{1, 64}, {3, 192}, {8, 512}, {5, 128}} {
				rows, cols := sh[0], sh[1]
				t.Run(fmt.Sprintf("int%d_%s_%dx%d", bits, store, rows, cols), func(t *testing.T) {
					w := testMatrix(r, rows, cols)
					a, err := Quantize(w, rows, cols, bits, 64, store)
					if err != nil {
						t.Fatal(err)
					}
					words, codes, scales, biases := mlxQuantize(w, bits, 64)
					if len(a.Words) != rows*cols*bits/32 || len(a.Words) != len(words) {
						t.Fatalf("%d words, MLX has %d, want %d", len(a.Words), len(words), rows*cols*bits/32)
					}
					for i := range words {
						if a.Words[i] != words[i] {
							t.Fatalf("word %d = %#08x, MLX %#08x", i, a.Words[i], words[i])
						}
					}
					got, err := a.Unpack()
					if err != nil {
						t.Fatal(err)
					}
					for i := range codes {
						if got[i] != codes[i] {
							t.Fatalf("code %d = %d, MLX %d", i, got[i], codes[i])
						}
					}
					for g := range scales {
						s, b := roundTo(scales[g], store), roundTo(biases[g], store)
						if math.Float32bits(a.Scales[g]) != math.Float32bits(s) || math.Float32bits(a.Biases[g]) != math.Float32bits(b) {
							t.Fatalf("group %d: scale, bias = %v, %v; MLX %v, %v", g, a.Scales[g], a.Biases[g], s, b)
						}
					}
					// Values: the stored s·q + b, against the same computed in float64 and rounded once.
					deq, err := a.Dequantize()
					if err != nil {
						t.Fatal(err)
					}
					// The error is measured in ulps of the largest of |s·q|, |b| and the
					// result: s·q + b may cancel, and then the float32 product's rounding
					// is the unit that matters.
					worst := 0.0
					for i, q := range codes {
						g := i / 64
						sq, b := float64(a.Scales[g])*float64(q), float64(a.Biases[g])
						want := sq + b
						mag := math.Max(math.Max(math.Abs(sq), math.Abs(b)), math.Abs(want))
						if mag == 0 {
							if deq[i] != 0 {
								t.Fatalf("value %d = %v, want 0", i, deq[i])
							}
							continue
						}
						u := math.Abs(float64(deq[i])-want) / ulp32(mag)
						worst = math.Max(worst, u)
					}
					if worst > 1 {
						t.Fatalf("dequantized values are up to %.3g ulp from s·q + b", worst)
					}
					t.Logf("words, codes, scales, biases equal MLX's; values within %.3g ulp of s·q + b", worst)
					checkBound(t, w, a)
				})
			}
		}
	}
}

// checkBound: codes are in range, and every value whose code was not clamped
// dequantizes within half a step (plus the rounding of the stored scale and
// bias) of the weight. Clamped values may be further off: MLX moves the scale
// so that the edge value is exact, which can push the other end of the range
// past the last code.
func checkBound(t *testing.T, w []float32, a *Affine) {
	t.Helper()
	deq, _ := a.Dequantize()
	codes, _ := a.Unpack()
	n := 1<<a.Bits - 1
	for i := range w {
		g := i / a.GroupSize
		if int(codes[i]) > n {
			t.Fatalf("code %d = %d > %d", i, codes[i], n)
		}
		if codes[i] == 0 || int(codes[i]) == n {
			continue
		}
		s := math.Abs(float64(a.Scales[g]))
		// A bf16 scale is off by up to 2^-9 relative, times up to n codes.
		slack := 0.5*s + 1e-6
		if a.StoreDType == safetensors.BF16 {
			slack += s*float64(n)/256 + math.Abs(float64(a.Biases[g]))/256
		}
		if d := math.Abs(float64(deq[i] - w[i])); d > slack {
			t.Fatalf("value %d: w = %v, dequantized %v (|err| %.3g > %.3g, scale %v)", i, w[i], deq[i], d, slack, a.Scales[g])
		}
	}
}

// ulp32 is the spacing of float32 values at magnitude x.
func ulp32(x float64) float64 {
	f := float32(x)
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}

// TestQuantizeWorkedExample checks one group by hand: w_k = k/63 on [0, 1]
// at 8 bits. |min| > |max| is false, so edge = max = 1 and s = −1/255;
// q0 = rint(1/s) = −255, so s = 1/−255, b = 1, q_k = rint((w_k − 1)/s).
func TestQuantizeWorkedExample(t *testing.T) {
	w := make([]float32, 64)
	for k := range w {
		w[k] = float32(k) / 63
	}
	a, err := Quantize(w, 1, 64, 8, 64, safetensors.F32)
	if err != nil {
		t.Fatal(err)
	}
	if a.Scales[0] != float32(1)/float32(-255) || a.Biases[0] != 1 {
		t.Fatalf("scale, bias = %v, %v; want %v, 1", a.Scales[0], a.Biases[0], float32(1)/float32(-255))
	}
	codes, _ := a.Unpack()
	for k, q := range codes {
		want := math.RoundToEven(float64((w[k] - 1) / a.Scales[0]))
		if float64(q) != want {
			t.Fatalf("q[%d] = %d, want %v", k, q, want)
		}
	}
	if codes[0] != 255 || codes[63] != 0 {
		t.Fatalf("q[0], q[63] = %d, %d; want 255, 0", codes[0], codes[63])
	}
	// 8 bits: value k at bit 8·(k%4) of word k/4.
	if a.Words[0] != uint32(codes[0])|uint32(codes[1])<<8|uint32(codes[2])<<16|uint32(codes[3])<<24 {
		t.Fatalf("word 0 = %#08x does not hold q[0..3] = %v low byte first", a.Words[0], codes[:4])
	}
	// All-zero group: s = −1e-7, b = 0, q = 0.
	z, err := Quantize(make([]float32, 64), 1, 64, 4, 64, safetensors.F32)
	if err != nil {
		t.Fatal(err)
	}
	if z.Scales[0] != -float32(1e-7) || z.Biases[0] != 0 || z.Words[0] != 0 {
		t.Fatalf("zero group: scale %v bias %v word %#x; want -1e-7, 0, 0", z.Scales[0], z.Biases[0], z.Words[0])
	}
}

func TestPackLayouts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{8, 6, 4} {
		rows, cols := 3, 128
		codes := make([]uint8, rows*cols)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		words, err := Pack(codes, rows, cols, bits)
		if err != nil {
			t.Fatal(err)
		}
		// Independent: value k of a row at stream bit k·bits, read bit by bit.
		wpr := cols * bits / 32
		for i, c := range codes {
			row, k := i/cols, i%cols
			var v uint8
			for b := 0; b < bits; b++ {
				pos := k*bits + b
				v |= uint8(words[row*wpr+pos/32]>>(pos%32)&1) << b
			}
			if v != c {
				t.Fatalf("int%d: value %d reads back %d, packed %d", bits, i, v, c)
			}
		}
		back, err := Unpack(words, rows, cols, bits)
		if err != nil {
			t.Fatal(err)
		}
		for i := range codes {
			if back[i] != codes[i] {
				t.Fatalf("int%d: Unpack[%d] = %d, want %d", bits, i, back[i], codes[i])
			}
		}
	}
	// 6 bits, MLX's byte formulas (mlx/backend/cpu/quantized.cpp): v0 = b0&63, v1 = (b0>>6)|((b1&15)<<2), ...
	codes := []uint8{1, 62, 33, 44}
	codes = append(codes, make([]uint8, 60)...)
	words, _ := Pack(codes, 1, 64, 6)
	b0, b1, b2 := uint8(words[0]), uint8(words[0]>>8), uint8(words[0]>>16)
	got := []uint8{b0 & 63, b0>>6 | (b1&15)<<2, b1>>4 | (b2&3)<<4, b2 >> 2}
	for i := range got {
		if got[i] != codes[i] {
			t.Fatalf("6-bit byte formulas give %v, packed %v", got, codes[:4])
		}
	}
	if len(words) != 12 {
		t.Fatalf("64 6-bit values take %d words, want 12", len(words))
	}
}

func TestQuantizeRejects(t *testing.T) {
	w := make([]float32, 4*100)
	_, err := Quantize(w, 4, 100, 8, 64, safetensors.BF16)
	var gse *GroupSizeError
	if !errors.Is(err, ErrGroupSize) || !errors.As(err, &gse) || gse.Rows != 4 || gse.Cols != 100 || gse.Group != 64 {
		t.Fatalf("cols 100, group 64: got %v", err)
	}
	t.Logf("%v", err)
	for _, cols := range []int{32, 65, 96, 200} {
		if _, err := Quantize(make([]float32, cols), 1, cols, 4, 64, safetensors.F32); !errors.Is(err, ErrGroupSize) {
			t.Errorf("cols %d: got %v, want ErrGroupSize", cols, err)
		}
	}
	if _, err := Quantize(make([]float32, 64), 1, 64, 4, 48, safetensors.F32); !errors.Is(err, ErrGroupSize) {
		t.Errorf("group 48: got %v, want ErrGroupSize", err)
	}
	for _, bits := range []int{0, 2, 3, 5, 7, 16} {
		_, err := Quantize(make([]float32, 64), 1, 64, bits, 64, safetensors.F32)
		var be *BitsError
		if !errors.Is(err, ErrBits) || !errors.As(err, &be) || be.Bits != bits {
			t.Errorf("bits %d: got %v, want ErrBits", bits, err)
		}
	}
	if _, err := Quantize(make([]float32, 64), 1, 64, 8, 64, safetensors.I8); err == nil {
		t.Error("store dtype I8 accepted")
	}
	bad := make([]float32, 64)
	bad[5] = float32(math.NaN())
	if _, err := Quantize(bad, 1, 64, 8, 64, safetensors.F32); err == nil {
		t.Error("NaN weight accepted")
	}
}

// TestTensorsRoundTrip: the three checkpoint tensors read back to the same matrix.
func TestTensorsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, bits := range []int{8, 6, 4} {
		a, err := Quantize(testMatrix(r, 4, 256), 4, 256, bits, 64, safetensors.BF16)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := a.Tensors("k")
		if err != nil {
			t.Fatal(err)
		}
		info := func(i int) safetensors.Info {
			return safetensors.Info{Name: ts[i].Name, DType: ts[i].DType, Shape: ts[i].Shape, Data: ts[i].Data}
		}
		b, err := AffineFromTensors("k", info(0), info(1), info(2), a.Scheme)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(a.Words) != fmt.Sprint(b.Words) || fmt.Sprint(a.Scales) != fmt.Sprint(b.Scales) || fmt.Sprint(a.Biases) != fmt.Sprint(b.Biases) {
			t.Fatalf("int%d: tensors do not read back to the same matrix", bits)
		}
		if ts[1].Shape[1] != 4 || ts[0].Shape[1] != 256*bits/32 || ts[1].DType != safetensors.BF16 {
			t.Fatalf("int%d: shapes %v %v dtype %s", bits, ts[0].Shape, ts[1].Shape, ts[1].DType)
		}
		for _, s := range a.Scales {
			if bfloat16.FromFloat32(s).Float32() != s {
				t.Fatalf("scale %v is not a bf16 value", s)
			}
		}
	}
}
