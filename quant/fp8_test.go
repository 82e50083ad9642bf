package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/hostmath"
	"fastvideo/internal/testutil"
)

// TestE4M3HandValues checks the host rounding and encoding against values worked out by hand on the
// e4m3fn grid (exponent bias 7, 3 mantissa bits, subnormal spacing 2⁻⁹, largest finite 448 = 0x7E).
func TestE4M3HandValues(t *testing.T) {
	for _, c := range []struct {
		in, value float32
		code      uint8
	}{
		{0, 0, 0x00},
		{1, 1, 0x38},
		{-2, -2, 0xC0},
		{448, 448, 0x7E},
		{500, 448, 0x7E},                 // saturates
		{-1e9, -448, 0xFE},               // saturates
		{440, 448, 0x7E},                 // 440 = 13.75 · 32 rounds up to the top value
		{240, 240, 0x77},                 // 1.875 · 2⁷
		{0.015625, 0.015625, 0x08},       // 2⁻⁶, the smallest normal
		{0.001953125, 0.001953125, 1},    // 2⁻⁹, the smallest subnormal
		{0.0009765625, 0, 0x00},          // 2⁻¹⁰: a tie between 0 and 2⁻⁹, to even (0)
		{0.0029296875, 0.00390625, 0x02}, // 1.5 · 2⁻⁹: a tie, to even (2 · 2⁻⁹)
		{1.0625, 1, 0x38},                // a tie between 1 and 1.125, to even (1)
		{1.1875, 1.25, 0x3A},             // a tie between 1.125 and 1.25, to even (1.25)
		{0.3, 0.3125, 0x2A},              // 9.6 · 2⁻⁵ rounds to 10 · 2⁻⁵ = 1.25 · 2⁻²
		{-0.001, -0.001953125, 0x81},     // 0.512 · 2⁻⁹ rounds to one subnormal step
	} {
		if got := RoundE4M3(c.in); got != c.value {
			t.Errorf("RoundE4M3(%g) = %g, want %g", c.in, got, c.value)
		}
		if got := EncodeE4M3(c.in); got != c.code {
			t.Errorf("EncodeE4M3(%g) = %#02x, want %#02x", c.in, got, c.code)
		}
		if got := DecodeE4M3(c.code); got != c.value {
			t.Errorf("DecodeE4M3(%#02x) = %g, want %g", c.code, got, c.value)
		}
	}
	if v := DecodeE4M3(0x7F); v == v {
		t.Errorf("DecodeE4M3(0x7F) = %g, want NaN", v)
	}
}

// TestE4M3CodesRoundTrip decodes every finite code and encodes it back (−0 encodes as +0), and checks
// that the decoded values are increasing in the code, so the grid has no holes or duplicates.
func TestE4M3CodesRoundTrip(t *testing.T) {
	prev := float32(-1)
	for c := 0; c < 0x7F; c++ {
		v := DecodeE4M3(uint8(c))
		if v <= prev {
			t.Fatalf("code %#02x decodes to %g, not above code %#02x's %g", c, v, c-1, prev)
		}
		prev = v
		for _, code := range []uint8{uint8(c), uint8(c) | 0x80} {
			want := code
			if code == 0x80 {
				want = 0
			}
			if got := EncodeE4M3(DecodeE4M3(code)); got != want {
				t.Errorf("EncodeE4M3(DecodeE4M3(%#02x)) = %#02x", code, got)
			}
		}
	}
	if prev != FP8Max {
		t.Errorf("largest finite code decodes to %g, want %d", prev, FP8Max)
	}
}

// e4m3Probes are values that exercise every binade, the ties between grid points, saturation and the
// subnormals, plus random values over the whole range.
func e4m3Probes() []float32 {
	var out []float32
	for c := 0; c < 0x7F; c++ {
		v := DecodeE4M3(uint8(c))
		next := DecodeE4M3(uint8(c + 1))
		if c+1 == 0x7F {
			next = 480
		}
		out = append(out, v, -v, (v+next)/2, -(v+next)/2, v+(next-v)/3)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		out = append(out, float32(rng.NormFloat64()*math.Pow(2, rng.Float64()*24-12)))
	}
	return append(out, 1e6, -1e6, 448.1, 1e-30)
}

// TestE4M3GraphMatchesHost runs the graph rounding, encoding and decoding on the test backend and
// requires the host functions' results bit for bit.
func TestE4M3GraphMatchesHost(t *testing.T) {
	probes := e4m3Probes()
	codes := make([]uint8, 0, 254)
	for c := 0; c < 256; c++ {
		if c&0x7F != 0x7F {
			codes = append(codes, uint8(c))
		}
	}
	out := run(t, func(in []*Node) []*Node {
		return []*Node{RoundE4M3Node(in[0]), EncodeE4M3Node(in[0]), DecodeE4M3Node(in[1])}
	}, tensors.FromFlatDataAndDimensions(probes, len(probes)), tensors.FromFlatDataAndDimensions(codes, len(codes)))
	rounded := tensors.MustCopyFlatData[float32](out[0])
	encoded := tensors.MustCopyFlatData[uint8](out[1])
	decoded := tensors.MustCopyFlatData[float32](out[2])
	for i, v := range probes {
		if want := RoundE4M3(v); math.Float32bits(rounded[i]) != math.Float32bits(want) && !(want == 0 && rounded[i] == 0) {
			t.Errorf("RoundE4M3Node(%g) = %g, host %g", v, rounded[i], want)
		}
		if want := EncodeE4M3(v); encoded[i] != want {
			t.Errorf("EncodeE4M3Node(%g) = %#02x, host %#02x", v, encoded[i], want)
		}
	}
	for i, c := range codes {
		if want := DecodeE4M3(c); decoded[i] != want {
			t.Errorf("DecodeE4M3Node(%#02x) = %g, host %g", c, decoded[i], want)
		}
	}
}

// TestQuantizeFP8 checks the per-row weight quantization in the graph against the host reference,
// including an all-zero row (scale 1), and that every dequantized value is within half a grid step.
func TestQuantizeFP8(t *testing.T) {
	const rows, cols = 5, 48
	rng := rand.New(rand.NewPCG(3, 4))
	w := make([]float32, rows*cols)
	for i := range w {
		if i/cols != 2 {
			w[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i/cols-2)))
		}
	}
	codes, scales, err := QuantizeFP8(w, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if scales[2] != 1 {
		t.Errorf("all-zero row: scale %g, want 1", scales[2])
	}
	out := run(t, func(in []*Node) []*Node {
		c, s := QuantizeFP8Node(in[0])
		return []*Node{c, s}
	}, tensors.FromFlatDataAndDimensions(w, rows, cols))
	if got := tensors.MustCopyFlatData[uint8](out[0]); string(got) != string(codes) {
		t.Errorf("graph codes differ from the host's:\n got %v\nwant %v", got, codes)
	}
	testutil.AssertBitExact(t, "graph scales vs host", tensors.MustCopyFlatData[float32](out[1]), scales)
	for i, v := range w {
		deq := DecodeE4M3(codes[i]) * scales[i/cols]
		// Half the spacing at the value's binade: |v|·2⁻⁴ for normals, 2⁻¹⁰·scale below.
		if tol := max(math.Abs(float64(v))/16, float64(scales[i/cols])/1024) * 1.0001; math.Abs(float64(deq-v)) > tol {
			t.Errorf("w[%d] = %g dequantizes to %g (error above %g)", i, v, deq, tol)
		}
	}
	if _, _, err := QuantizeFP8(w, rows, cols+1); err == nil {
		t.Error("QuantizeFP8 accepted a wrong shape")
	}
}

// fp8Reference is x·wᵀ of the FP8 scheme computed on the host in float64: per-row activation scales
// and codes, the weight's codes and scales.
func fp8Reference(x []float32, m int, codes []uint8, scales []float32, n, k int) []float32 {
	out := make([]float32, m*n)
	for r := range m {
		row := x[r*k : (r+1)*k]
		var amax float32
		for _, v := range row {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		sx := fp8Scale(amax)
		for c := range n {
			var acc float64
			for j := range k {
				acc += float64(RoundE4M3(row[j]/sx)) * float64(DecodeE4M3(codes[c*k+j]))
			}
			out[r*n+c] = float32(acc * float64(sx) * float64(scales[c]))
		}
	}
	return out
}

// TestFP8Linear runs Linear with an FP8 weight on the test backend: the emulated graph must equal the
// host reference (float32 accumulation against float64: parity tolerance), stay close to the dense
// product (SNR ≥ 25 dB for random normal data, the e4m3 grid's ~28 dB per operand), and the native
// graph must either equal the emulation (a backend with F8E4M3FN) or be refused (one without).
func TestFP8Linear(t *testing.T) {
	const m, n, k = 7, 24, 64
	rng := rand.New(rand.NewPCG(5, 6))
	x, w := make([]float32, m*k), make([]float32, n*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	x[3*k+5] = 0 // one large outlier row and one zero row exercise the per-row scales
	for j := range k {
		x[k+j] *= 50
		x[4*k+j] = 0
	}
	for i := range w {
		w[i] = float32(rng.NormFloat64() / 8)
	}
	codes, scales, err := QuantizeFP8(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	linear := func(path FP8Path) func(in []*Node) []*Node {
		return func(in []*Node) []*Node {
			return []*Node{Linear(in[0], FP8Weight(in[1], in[2]), nil, Dispatch{FP8: path}), Linear(in[0], DenseWeight(in[3]), nil, Dispatch{})}
		}
	}
	args := []any{tensors.FromFlatDataAndDimensions(x, 1, m, k), tensors.FromFlatDataAndDimensions(codes, n, k),
		tensors.FromFlatDataAndDimensions(scales, n), tensors.FromFlatDataAndDimensions(w, n, k)}
	out := run(t, linear(FP8Emulated), args...)
	if got := out[0].Shape(); got.DType != dtypes.Float32 || got.Rank() != 3 || got.Dim(2) != n {
		t.Fatalf("FP8 linear shape %s, want (Float32)[1 %d %d]", got, m, n)
	}
	emulated, dense := tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
	want := fp8Reference(x, m, codes, scales, n, k)
	testutil.AssertClose(t, "emulated FP8 vs host reference", emulated, want, []int{m, n}, testutil.ParityTol(want))
	snr := hostmath.SNRdB(emulated, dense)
	t.Logf("FP8 linear vs dense: SNR %.1f dB", snr)
	if snr < 25 {
		t.Errorf("FP8 linear SNR vs dense %.1f dB, below 25 dB", snr)
	}
	b := testutil.Backend(t)
	if !SupportsNativeFP8(b) {
		e, err := NewExec(b, linear(FP8Native))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Finalize()
		if _, err := e.Call(args...); err == nil {
			t.Fatal("the native FP8 graph ran on a backend that does not declare F8E4M3FN")
		}
		return
	}
	native := tensors.MustCopyFlatData[float32](run(t, linear(FP8Native), args...)[0])
	testutil.AssertClose(t, "native FP8 vs emulated", native, emulated, []int{m, n}, testutil.ParityTol(emulated))
}
