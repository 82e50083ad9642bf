package quant

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/nn"
)

// Graph side. GoMLX's nn.QuantizedDense groups only along the output axis and
// cannot express MLX's groups along the contracting (input) axis, so the codes
// are unpacked with shifts and masks and combined with the scales and biases in
// the graph. Graph functions panic on error, like every GoMLX graph function;
// callers recover at their public boundary.

// GraphWeight is a linear layer's weight [out, in] inside a graph: dense, or
// affine-quantized (packed words plus per-group scales and biases).
type GraphWeight struct {
	// W is the dense weight [out, in], or the packed uint32 words [out, in·Bits/32].
	W *Node
	// Scales and Biases are [out, in/GroupSize] for a quantized weight, nil for a
	// dense one. Their dtype is the weight's compute dtype.
	Scales, Biases *Node
	// Scheme is zero for a dense weight.
	Scheme
	// FP8 marks e4m3fn codes W Uint8 [out, in] with float32 Scales [out]
	// (FP8Weight).
	FP8 bool
}

// DenseWeight wraps a dense [out, in] weight.
func DenseWeight(w *Node) GraphWeight { return GraphWeight{W: w} }

// QuantizedWeight wraps packed words [out, in·bits/32] and scales, biases [out, in/group].
func QuantizedWeight(words, scales, biases *Node, s Scheme) GraphWeight {
	return GraphWeight{W: words, Scales: scales, Biases: biases, Scheme: s}
}

// FP8Weight wraps e4m3fn codes Uint8 [out, in] and their per-output-channel
// float32 scales [out].
func FP8Weight(codes, scales *Node) GraphWeight {
	return GraphWeight{W: codes, Scales: scales, FP8: true}
}

// Quantized reports whether the weight is affine-quantized.
func (w GraphWeight) Quantized() bool { return w.Scales != nil && !w.FP8 }

// Out is the output dimension.
func (w GraphWeight) Out() int { return w.W.Shape().Dim(0) }

// In is the input (contracting) dimension.
func (w GraphWeight) In() int {
	if w.Quantized() {
		return w.W.Shape().Dim(1) * 32 / w.Bits
	}
	return w.W.Shape().Dim(1)
}

// DType is the compute dtype of the weight: the dense weight's dtype, or the
// dtype the scales were bound in. An FP8 weight has none (its codes are Uint8):
// Linear computes it in the activations' dtype.
func (w GraphWeight) DType() dtypes.DType {
	if w.Quantized() {
		return w.Scales.DType()
	}
	return w.W.DType()
}

func (w GraphWeight) check() {
	if w.W == nil {
		panic(fmt.Errorf("quant: GraphWeight without W"))
	}
	if w.W.Rank() != 2 {
		panic(fmt.Errorf("quant: weight must be a matrix, got %s", w.W.Shape()))
	}
	if w.FP8 {
		if w.W.DType() != dtypes.Uint8 || w.Scales == nil || w.Scales.Rank() != 1 || w.Scales.Shape().Dim(0) != w.Out() {
			panic(fmt.Errorf("%w: an FP8 weight is Uint8 codes [out, in] with scales [out], got %s and %v", ErrShape, w.W.Shape(), w.Scales))
		}
		return
	}
	if !w.Quantized() {
		return
	}
	if err := w.Scheme.Validate(); err != nil {
		panic(err)
	}
	if w.Biases == nil {
		panic(fmt.Errorf("%w: a quantized GraphWeight needs Biases", ErrMissingBiases))
	}
	if w.W.DType() != dtypes.Uint32 {
		panic(fmt.Errorf("%w: packed words must be Uint32, got %s", ErrShape, w.W.Shape()))
	}
	n, wpr := w.W.Shape().Dim(0), w.W.Shape().Dim(1)
	if wpr*32%w.Bits != 0 || (wpr*32/w.Bits)%w.GroupSize != 0 {
		panic(fmt.Errorf("%w: %d words per row is not a whole number of %d-value groups at %d bits", ErrShape, wpr, w.GroupSize, w.Bits))
	}
	g := wpr * 32 / w.Bits / w.GroupSize
	for _, t := range []*Node{w.Scales, w.Biases} {
		if t.Rank() != 2 || t.Shape().Dim(0) != n || t.Shape().Dim(1) != g {
			panic(fmt.Errorf("%w: scales/biases %s do not match words %s (want [%d, %d] for %d bits, group %d)",
				ErrShape, t.Shape(), w.W.Shape(), n, g, w.Bits, w.GroupSize))
		}
	}
}

// UnpackCodes unpacks MLX words uint32 [N, in·bits/32] into the codes uint32
// [N, in] with shifts and masks only (no Bitcast, so the result does not depend
// on the device's byte order).
func UnpackCodes(words *Node, bits int) *Node {
	g := words.Graph()
	n, wpr := words.Shape().Dim(0), words.Shape().Dim(1)
	u32 := func(v uint32) *Node { return Scalar(g, dtypes.Uint32, v) }
	// spread shifts each word (or 24-bit word) right by k·step for k < count and
	// keeps the low `width` bits: [..., m] -> [..., m, count].
	spread := func(x *Node, count, step int, width uint32) *Node {
		sh := MulScalar(Iota(g, shapes3(count), 2), step)
		return BitwiseAnd(BitwiseShiftRightLogical(ExpandAxes(x, -1), sh), u32(1<<width-1))
	}
	switch bits {
	case 4, 8:
		return Reshape(spread(words, 32/bits, bits, uint32(bits)), n, -1)
	case 6:
		// The words are a byte stream holding 4 values per 3 bytes.
		by := Reshape(spread(words, 4, 8, 8), n, wpr*4/3, 3)
		b0 := Squeeze(Slice(by, AxisRange(), AxisRange(), AxisElem(0)), 2)
		b1 := Squeeze(Slice(by, AxisRange(), AxisRange(), AxisElem(1)), 2)
		b2 := Squeeze(Slice(by, AxisRange(), AxisRange(), AxisElem(2)), 2)
		w24 := BitwiseOr(BitwiseOr(b0, BitwiseShiftLeftScalar(b1, uint32(8))), BitwiseShiftLeftScalar(b2, uint32(16)))
		return Reshape(spread(w24, 4, 6, 6), n, -1)
	}
	panic(&BitsError{Bits: bits})
}

// shapes3 is the [1, 1, count] shape of a shift vector broadcast over [N, m, 1].
func shapes3(count int) shapes.Shape { return shapes.Make(dtypes.Uint32, 1, 1, count) }

// Dequantize returns scale·q + bias [N, in] in dtype dt. The arithmetic is
// float32 (the product and the sum are separate ops, so on the Go backend the
// result equals Affine.Dequantize bit for bit) and is rounded to dt once.
func Dequantize(w GraphWeight, dt dtypes.DType) *Node {
	w.check()
	if !w.Quantized() {
		return ConvertDType(w.W, dt)
	}
	n, k := w.Out(), w.In()
	q := Reshape(ConvertDType(UnpackCodes(w.W, w.Bits), dtypes.Float32), n, k/w.GroupSize, w.GroupSize)
	s := ExpandAxes(ConvertDType(w.Scales, dtypes.Float32), -1)
	b := ExpandAxes(ConvertDType(w.Biases, dtypes.Float32), -1)
	return ConvertDType(Reshape(Add(Mul(q, s), b), n, k), dt)
}

// Path is one way of computing x·wᵀ.
type Path int

const (
	// PathAuto (the zero value) lets the row count choose (Dispatch.Floor).
	PathAuto Path = iota
	// PathQuantized never forms scale·q + bias: per chunk of groups it contracts
	// x with the integer codes (exact in the compute dtype) into float32, applies
	// the scales, and adds the bias term (Σ_j x)·bias. Its float32 intermediate
	// is [chunk, M, N], smaller than the dequantized weight when M is small.
	PathQuantized
	// PathDequantGEMM dequantizes the weight to the compute dtype and runs one
	// dense GEMM.
	PathDequantGEMM
	// PathDense is a dense weight's plain GEMM (reported, never chosen).
	PathDense
)

func (p Path) String() string {
	switch p {
	case PathAuto:
		return "auto"
	case PathQuantized:
		return "quantized"
	case PathDequantGEMM:
		return "dequant-gemm"
	case PathDense:
		return "dense"
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// DQGEMMEnv names the environment variable the binaries read (with
// ParseDispatch): "0" disables the dequantize-then-GEMM path (every quantized
// linear takes PathQuantized), a positive integer N sets the row-count floor
// at which it is taken. This package reads no environment.
const DQGEMMEnv = "FASTVIDEO_DQ_GEMM"

// DefaultDQGEMMFloor is the row count from which a quantized linear
// dequantizes and runs a dense GEMM. On the H200 the dequantize+GEMM path beat
// the grouped quantized path at every row count measured (M = 64 ... 4096,
// K = 5376, N = 5376 and 14336, INT4, bf16; BENCHMARKS.md), so the floor is the
// smallest measured M. MLX uses 768 on Apple GPUs.
const DefaultDQGEMMFloor = 64

// Dispatch decides how a quantized linear runs. The zero value chooses by row
// count with DefaultDQGEMMFloor.
type Dispatch struct {
	// Path forces PathQuantized or PathDequantGEMM for every quantized linear;
	// PathAuto chooses by row count.
	Path Path
	// Floor is the row count from which PathAuto takes PathDequantGEMM;
	// 0 means DefaultDQGEMMFloor.
	Floor int
	// FP8 selects the graph of FP8 weights (FP8Auto: native where the
	// backend has F8E4M3FN).
	FP8 FP8Path
}

// ParseDispatch reads a FASTVIDEO_DQ_GEMM value: "" is the zero Dispatch, "0"
// forces PathQuantized, N > 0 sets the floor.
func ParseDispatch(v string) (Dispatch, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return Dispatch{}, nil
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 0:
		return Dispatch{}, fmt.Errorf("quant: %s=%q is not valid: use 0 to disable the dequantize+GEMM path or a positive row count floor (default %d)",
			DQGEMMEnv, v, DefaultDQGEMMFloor)
	case n == 0:
		return Dispatch{Path: PathQuantized}, nil
	}
	return Dispatch{Floor: n}, nil
}

// Validate rejects a negative floor and a forced path other than PathQuantized
// or PathDequantGEMM.
func (d Dispatch) Validate() error {
	if d.Floor < 0 {
		return fmt.Errorf("quant: dispatch floor %d is negative; use 0 for the default (%d) or a positive row count", d.Floor, DefaultDQGEMMFloor)
	}
	if d.FP8 < FP8Auto || d.FP8 > FP8Native {
		return fmt.Errorf("quant: FP8 path %v is not valid; use auto, emulated or native", d.FP8)
	}
	switch d.Path {
	case PathAuto, PathQuantized, PathDequantGEMM:
		return nil
	}
	return fmt.Errorf("quant: dispatch path %v cannot be forced; use auto, quantized or dequant-gemm", d.Path)
}

// floor is the effective row-count floor of PathAuto.
func (d Dispatch) floor() int {
	if d.Floor == 0 {
		return DefaultDQGEMMFloor
	}
	return d.Floor
}

// Choose returns the path for a quantized linear over rows rows.
func (d Dispatch) Choose(rows int) Path {
	switch {
	case d.Path != PathAuto:
		return d.Path
	case rows >= d.floor():
		return PathDequantGEMM
	}
	return PathQuantized
}

// Linear computes x·wᵀ (+ bias) for x [..., in], w [out, in], bias [out] or nil;
// the result is [..., out] in the weight's compute dtype (x is converted to it,
// as a dense linear does). A quantized weight takes the path d chooses for the
// row count (the product of x's leading axes); the choice is logged at Debug
// level. A dense weight always takes the dense GEMM. An invalid d panics, like
// every graph-building error (validate it with Dispatch.Validate first).
func Linear(x *Node, w GraphWeight, bias *Node, d Dispatch) *Node {
	w.check()
	if err := d.Validate(); err != nil {
		panic(err)
	}
	if x.Shape().Dim(-1) != w.In() {
		panic(fmt.Errorf("%w: input %s has %d features, the weight takes %d", ErrShape, x.Shape(), x.Shape().Dim(-1), w.In()))
	}
	if w.FP8 {
		// The activations keep their dtype: the weight carries none of its own.
		slog.Debug("quant.Linear", "path", "fp8", "rows", x.Shape().Size()/w.In(), "out", w.Out(), "in", w.In(),
			"dtype", x.DType().String(), "fp8", d.FP8.String())
		return nn.AddBias(fp8Linear(x, w, d.FP8), bias)
	}
	dt := w.DType()
	if x.DType() != dt {
		x = ConvertDType(x, dt)
	}
	rows := x.Shape().Size() / w.In()
	p := PathDense
	if w.Quantized() {
		p = d.Choose(rows)
	}
	slog.Debug("quant.Linear", "path", p.String(), "rows", rows, "out", w.Out(), "in", w.In(),
		"bits", w.Bits, "group", w.GroupSize, "dtype", dt.String(), "floor", d.floor(), "forced", d.Path.String())
	// The dense paths are nn.Linear, the very graph a dense model builds, so a dense weight taken
	// through here computes exactly what the model would without quant.
	switch p {
	case PathDense:
		return nn.Linear(x, w.W, bias)
	case PathDequantGEMM:
		return nn.Linear(x, Dequantize(w, dt), bias)
	}
	return nn.AddBias(quantizedDot(x, w), bias)
}

// QuantizedChunkGroups is the number of groups PathQuantized contracts at once;
// its float32 intermediate is [QuantizedChunkGroups, M, N]. It is a constant,
// not a function of the row count, so that the float32 sums over chunks
// associate the same way for every M: a row's result then depends on the row
// count only through the backend's GEMM kernel choice.
const QuantizedChunkGroups = 4

// quantizedDot is PathQuantized: y[m,n] = Σ_g s[n,g]·(Σ_j x[m,g,j]·q[n,g,j]) +
// Σ_g b[n,g]·(Σ_j x[m,g,j]), the inner sums accumulated in float32 by the dot,
// chunks of QuantizedChunkGroups groups added left to right.
func quantizedDot(x *Node, w GraphWeight) *Node {
	dt := w.DType()
	lead := x.Shape().Dimensions[:x.Rank()-1]
	n, k, gs := w.Out(), w.In(), w.GroupSize
	groups := k / gs
	rows := x.Shape().Size() / k
	x3 := Reshape(x, rows, groups, gs)
	codes := Reshape(ConvertDType(UnpackCodes(w.W, w.Bits), dt), n, groups, gs) // exact: codes < 256
	scalesT := Transpose(ConvertDType(w.Scales, dtypes.Float32), 0, 1)          // [G, N]
	var acc *Node
	for c0 := 0; c0 < groups; c0 += QuantizedChunkGroups {
		c1 := min(c0+QuantizedChunkGroups, groups)
		xc := Slice(x3, AxisRange(), AxisRange(c0, c1), AxisRange())
		qc := Slice(codes, AxisRange(), AxisRange(c0, c1), AxisRange())
		p := Dot(xc, qc).WithOutputDType(dtypes.Float32).General([]int{2}, []int{1}, []int{2}, []int{1}) // [c, M, N]
		sc := ExpandAxes(Slice(scalesT, AxisRange(c0, c1), AxisRange()), 1)                              // [c, 1, N]
		part := ReduceSum(Mul(p, sc), 0)
		if acc == nil {
			acc = part
		} else {
			acc = Add(acc, part)
		}
	}
	xs := ReduceSum(ConvertDType(x3, dtypes.Float32), 2) // [M, G]
	bt := Dot(xs, ConvertDType(w.Biases, dtypes.Float32)).General([]int{1}, nil, []int{1}, nil)
	y := ConvertDType(Add(acc, bt), dt)
	return Reshape(y, append(append([]int(nil), lead...), n)...)
}
