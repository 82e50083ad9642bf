package quant

import (
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// FP8 (e4m3fn) linears: weights stored as the e4m3fn bit patterns (Uint8 [out, in]) with one float32
// scale per output channel (amax/448, computed at load), activations quantized per row (token) with
// the scale amax/448 computed in the graph, and the product taken on the e4m3fn grid with float32
// accumulation, the scales applied after the GEMM.
//
// Two graphs compute it. The native one converts the scaled activations to F8E4M3FN, bitcasts the
// codes to F8E4M3FN and contracts the two F8 operands (both with the contracting axis minor, as
// cuBLASLt's FP8 GEMM wants them) into the compute dtype, then multiplies by the per-row and
// per-column scales: the operand form XLA's GPU gemm rewriter turns into a cuBLASLt FP8 custom call
// (its scale operands must be scalars, so the per-channel scales stay an elementwise epilogue). The
// emulated one rounds the scaled activations to the e4m3fn grid with bit operations and decodes the
// codes the same way, then runs an ordinary GEMM in the compute dtype (every e4m3fn value is exact
// in bf16, f16 and f32): the same numbers, on any backend.

// FP8Max is the largest finite float8 e4m3fn magnitude; values saturate there.
const FP8Max = 448

// fp8MinNormal is 2⁻⁶, the smallest normal e4m3fn magnitude; below it the spacing is 2⁻⁹.
const fp8MinNormal = 1.0 / 64

// fp8ScaleSuffix names the per-channel scale a converted weight adds to its parameter set.
const fp8ScaleSuffix = ".fp8_scale"

// RoundE4M3 rounds v to the nearest float8 e4m3fn value, ties to even, saturating at ±FP8Max. NaN
// stays NaN.
func RoundE4M3(v float32) float32 {
	if v != v {
		return v
	}
	a := min(float32(math.Abs(float64(v))), FP8Max)
	e := max(math.Float32bits(a)>>23, 127-6) // biased exponent, at least the smallest normal's
	ulp := math.Float32frombits((e - 3) << 23)
	r := float32(math.RoundToEven(float64(a/ulp))) * ulp
	if v < 0 {
		return -r
	}
	return r
}

// EncodeE4M3 returns the e4m3fn bit pattern of RoundE4M3(v); NaN is 0x7F and −0 encodes as +0.
func EncodeE4M3(v float32) uint8 {
	if v != v {
		return 0x7F
	}
	r := RoundE4M3(v)
	a := float32(math.Abs(float64(r)))
	var code uint8
	if a < fp8MinNormal {
		code = uint8(a * 512)
	} else {
		bits := math.Float32bits(a)
		code = uint8((bits>>23-120)<<3 | (bits>>20)&7)
	}
	if r < 0 {
		code |= 0x80
	}
	return code
}

// DecodeE4M3 returns the value of an e4m3fn bit pattern (0x7F and 0xFF are NaN).
func DecodeE4M3(c uint8) float32 {
	e, m := uint32(c>>3)&15, uint32(c&7)
	var a float32
	switch {
	case e == 15 && m == 7:
		a = float32(math.NaN())
	case e == 0:
		a = float32(m) / 512
	default:
		a = math.Float32frombits((e+120)<<23 | m<<20)
	}
	if c&0x80 != 0 {
		return -a
	}
	return a
}

// QuantizeFP8 quantizes w [rows, cols] (row-major) per row: scale = amax/448 (1 for an all-zero row)
// and codes = EncodeE4M3(w/scale). It is the host reference of FP8Converter.
func QuantizeFP8(w []float32, rows, cols int) (codes []uint8, scales []float32, err error) {
	if rows <= 0 || cols <= 0 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("%w: %d values are not a [%d, %d] matrix", ErrShape, len(w), rows, cols)
	}
	codes, scales = make([]uint8, len(w)), make([]float32, rows)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		var amax float32
		for _, v := range row {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		scales[r] = fp8Scale(amax)
		for c, v := range row {
			codes[r*cols+c] = EncodeE4M3(v / scales[r])
		}
	}
	return codes, scales, nil
}

func fp8Scale(amax float32) float32 {
	if amax > 0 {
		return amax / FP8Max
	}
	return 1
}

// RoundE4M3Node is RoundE4M3 in the graph: x float32, result float32 on the e4m3fn grid. The spacing
// 2^(exponent−3) is built from x's exponent bits, so the division, the rounding (ties to even) and the
// product are exact.
func RoundE4M3Node(x *Node) *Node {
	g := x.Graph()
	u32 := func(v uint32) *Node { return Scalar(g, dtypes.Uint32, v) }
	a := MinScalar(Abs(x), FP8Max)
	e := Max(BitwiseShiftRightLogicalScalar(Bitcast(a, dtypes.Uint32), uint32(23)), u32(127-6))
	ulp := Bitcast(BitwiseShiftLeftScalar(Sub(e, u32(3)), uint32(23)), dtypes.Float32)
	r := Mul(Round(Div(a, ulp)), ulp)
	return Where(LessThan(x, ZerosLike(x)), Neg(r), r)
}

// EncodeE4M3Node is EncodeE4M3 in the graph: x float32 to Uint8 bit patterns (finite inputs).
func EncodeE4M3Node(x *Node) *Node {
	g := x.Graph()
	u32 := func(v uint32) *Node { return Scalar(g, dtypes.Uint32, v) }
	r := RoundE4M3Node(x)
	a := Abs(r)
	bits := Bitcast(a, dtypes.Uint32)
	exp := BitwiseShiftLeftScalar(Sub(BitwiseShiftRightLogicalScalar(bits, uint32(23)), u32(120)), uint32(3))
	normal := BitwiseOr(exp, BitwiseAnd(BitwiseShiftRightLogicalScalar(bits, uint32(20)), u32(7)))
	sub := ConvertDType(MulScalar(a, 512), dtypes.Uint32)
	code := Where(LessThan(a, Scalar(g, dtypes.Float32, fp8MinNormal)), sub, normal)
	code = Where(LessThan(r, ZerosLike(r)), BitwiseOr(code, u32(0x80)), code)
	return ConvertDType(code, dtypes.Uint8)
}

// DecodeE4M3Node is DecodeE4M3 in the graph: Uint8 bit patterns to float32 (codes from EncodeE4M3Node:
// no NaN).
func DecodeE4M3Node(codes *Node) *Node {
	g := codes.Graph()
	u32 := func(v uint32) *Node { return Scalar(g, dtypes.Uint32, v) }
	c := ConvertDType(codes, dtypes.Uint32)
	e := BitwiseAnd(BitwiseShiftRightLogicalScalar(c, uint32(3)), u32(15))
	m := BitwiseAnd(c, u32(7))
	normal := Bitcast(BitwiseOr(BitwiseShiftLeftScalar(Add(e, u32(120)), uint32(23)), BitwiseShiftLeftScalar(m, uint32(20))), dtypes.Float32)
	sub := MulScalar(ConvertDType(m, dtypes.Float32), 1.0/512)
	a := Where(Equal(e, u32(0)), sub, normal)
	return Where(NotEqual(BitwiseAnd(c, u32(0x80)), u32(0)), Neg(a), a)
}

// rowScales returns amax/448 of each row of x [M, K] (float32) as [M, 1], 1 for an all-zero row. It
// divides (DivScalar multiplies by the reciprocal, one rounding more than the host's amax/448).
func rowScales(x *Node) *Node {
	amax := ReduceAndKeep(Abs(x), ReduceMax, -1)
	return Where(GreaterThan(amax, ZerosLike(amax)), Div(amax, Scalar(x.Graph(), dtypes.Float32, FP8Max)), OnesLike(amax))
}

// QuantizeFP8Node quantizes w [N, K] per row in the graph: codes Uint8 [N, K] and scales float32 [N],
// as QuantizeFP8 does on the host.
func QuantizeFP8Node(w *Node) (codes, scales *Node) {
	wf := ConvertDType(w, dtypes.Float32)
	s := rowScales(wf)
	return EncodeE4M3Node(Div(wf, s)), Squeeze(s, 1)
}

// FP8Path selects the graph of FP8 linears.
type FP8Path int

const (
	// FP8Auto (the zero value) takes the native graph where the backend declares F8E4M3FN, else the
	// emulation.
	FP8Auto FP8Path = iota
	// FP8Emulated always emulates the e4m3fn rounding (any backend).
	FP8Emulated
	// FP8Native always builds the F8E4M3FN graph; a backend without the dtype fails to compile it.
	FP8Native
)

func (p FP8Path) String() string {
	switch p {
	case FP8Auto:
		return "auto"
	case FP8Emulated:
		return "emulated"
	case FP8Native:
		return "native"
	}
	return fmt.Sprintf("FP8Path(%d)", int(p))
}

// ParseFP8Path reads "auto" (or ""), "emulated" or "native".
func ParseFP8Path(v string) (FP8Path, error) {
	for _, p := range []FP8Path{FP8Auto, FP8Emulated, FP8Native} {
		if v == p.String() {
			return p, nil
		}
	}
	if v == "" {
		return FP8Auto, nil
	}
	return FP8Auto, fmt.Errorf("quant: FP8 path %q is not valid: use auto, emulated or native", v)
}

// SupportsNativeFP8 reports whether the backend declares the F8E4M3FN dtype. Neither the pure-Go
// backend nor go-xla v0.4.1's XLA backend does (go-xla writes no f8 type into StableHLO); a binary
// built by bench/build_gpu.sh (go-xla and compute patched) does.
func SupportsNativeFP8(b compute.Backend) bool { return b.Capabilities().DTypes[dtypes.F8E4M3FN] }

// native resolves the path for the graph's backend.
func (p FP8Path) native(g *Graph) bool {
	switch p {
	case FP8Native:
		return true
	case FP8Emulated:
		return false
	}
	return SupportsNativeFP8(g.Backend())
}

// fp8Linear computes x·wᵀ for an FP8 weight: per-row activation scales, the GEMM on the e4m3fn grid
// (native or emulated, output in x's dtype), then the activation and weight scales.
func fp8Linear(x *Node, w GraphWeight, path FP8Path) *Node {
	dt := x.DType()
	lead := x.Shape().Dimensions[:x.Rank()-1]
	n, k := w.Out(), w.In()
	xf := Reshape(ConvertDType(x, dtypes.Float32), -1, k)
	sx := rowScales(xf)
	xs := Div(xf, sx)
	var xq, wq *Node
	if path.native(x.Graph()) {
		xq = ConvertDType(MaxScalar(MinScalar(xs, FP8Max), -FP8Max), dtypes.F8E4M3FN)
		wq = Bitcast(w.W, dtypes.F8E4M3FN)
	} else {
		xq = ConvertDType(RoundE4M3Node(xs), dt)
		wq = ConvertDType(DecodeE4M3Node(w.W), dt)
	}
	y := Dot(xq, wq).WithOutputDType(dt).General([]int{1}, nil, []int{1}, nil) // [M, N]
	y = Mul(Mul(ConvertDType(y, dtypes.Float32), sx), Reshape(ConvertDType(w.Scales, dtypes.Float32), 1, n))
	return Reshape(ConvertDType(y, dt), append(append([]int(nil), lead...), n)...)
}

// FP8Converter turns dense weights into FP8 weights on their backend (QuantizeFP8Node), so that
// weights drawn or uploaded on a device never come back to the host.
type FP8Converter struct{ exec *Exec }

// NewFP8Converter builds the converter's executable (compiled per weight shape at first use).
func NewFP8Converter(backend compute.Backend) (c *FP8Converter, err error) {
	defer graphexec.Recover(&err, "quant: FP8 converter")
	return &FP8Converter{exec: graphexec.MustExec(backend, "quant.fp8_weights", func(w *Node) (*Node, *Node) {
		return QuantizeFP8Node(w)
	})}, nil
}

// Close frees the executable.
func (c *FP8Converter) Close() { graphexec.FinalizeExecs(c.exec) }

// ToFP8 converts a bound dense weight in place: its tensor becomes the Uint8 codes and a float32
// scale parameter [Out] (named Name+".fp8_scale") joins set, the model's root parameter set, so that
// releasing the set frees it. The dense tensor is freed.
func (w *Weight) ToFP8(set *weights.Set, c *FP8Converter) error {
	if w.Quantized() || w.FP8 {
		return fmt.Errorf("quant: %s is already quantized; FP8 converts dense weights only", w.Name)
	}
	if !w.W.Bound() {
		return fmt.Errorf("quant: %s is not bound; convert after loading", w.Name)
	}
	out, err := graphexec.Call(c.exec, w.W.T)
	if err != nil {
		return fmt.Errorf("quant: converting %s to FP8: %w", w.Name, err)
	}
	w.W.T.FinalizeAll()
	w.W.T, w.W.Storage = out[0], dtypes.Uint8
	w.Scales = set.AddTyped(w.Name+fp8ScaleSuffix, dtypes.Float32, w.Out)
	w.Scales.T = out[1]
	w.FP8 = true
	return nil
}
