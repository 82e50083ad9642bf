package quant

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// run builds and evaluates fn once on the test backend.
func run(t *testing.T, fn func(in []*Node) []*Node, args ...any) []*tensors.Tensor {
	t.Helper()
	e, err := NewExec(testutil.Backend(t), fn)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	out, err := e.Call(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// affineArgs are the graph inputs of a quantized weight: words, and scales
// and biases in dtype dt.
func affineArgs(a *Affine, dt dtypes.DType) []any {
	return []any{
		tensors.FromFlatDataAndDimensions(a.Words, a.Rows, a.WordsPerRow(a.Cols)),
		floatTensor(a.Scales, dt, a.Rows, a.GroupsPerRow(a.Cols)),
		floatTensor(a.Biases, dt, a.Rows, a.GroupsPerRow(a.Cols)),
	}
}

func floatTensor(v []float32, dt dtypes.DType, dims ...int) *tensors.Tensor {
	if dt == dtypes.BFloat16 {
		return tensors.FromFlatDataAndDimensions(bfloat16.FromFloat32s(v...), dims...)
	}
	return tensors.FromFlatDataAndDimensions(append([]float32(nil), v...), dims...)
}

func f32s(t *testing.T, x *tensors.Tensor) []float32 {
	t.Helper()
	switch x.DType() {
	case dtypes.Float32:
		return tensors.MustCopyFlatData[float32](x)
	case dtypes.BFloat16:
		b := tensors.MustCopyFlatData[bfloat16.BFloat16](x)
		out := make([]float32, len(b))
		for i, v := range b {
			out[i] = v.Float32()
		}
		return out
	}
	t.Fatalf("unexpected dtype %s", x.DType())
	return nil
}

func TestGraphUnpackDequantizeMatchHost(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, bits := range []int{8, 6, 4} {
		for _, store := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			t.Run(fmt.Sprintf("int%d_%s", bits, store), func(t *testing.T) {
				rows, cols := 6, 384
				a, err := Quantize(testMatrix(r, rows, cols), rows, cols, bits, 64, store)
				if err != nil {
					t.Fatal(err)
				}
				sdt := dtypes.Float32
				if store == safetensors.BF16 {
					sdt = dtypes.BFloat16
				}
				s := a.Scheme
				out := run(t, func(in []*Node) []*Node {
					w := QuantizedWeight(in[0], in[1], in[2], s)
					return []*Node{UnpackCodes(in[0], bits), Dequantize(w, dtypes.Float32), Dequantize(w, dtypes.BFloat16)}
				}, affineArgs(a, sdt)...)
				codes, _ := a.Unpack()
				got := tensors.MustCopyFlatData[uint32](out[0])
				for i := range codes {
					if got[i] != uint32(codes[i]) {
						t.Fatalf("graph code %d = %d, host %d", i, got[i], codes[i])
					}
				}
				host, _ := a.Dequantize()
				testutil.AssertBitExact(t, "graph f32 dequantization", f32s(t, out[1]), host)
				hostBF := make([]float32, len(host))
				for i, v := range host {
					hostBF[i] = bfloat16.FromFloat32(v).Float32()
				}
				testutil.AssertBitExact(t, "graph bf16 dequantization", f32s(t, out[2]), hostBF)
			})
		}
	}
}

// refLinear is x·deqᵀ in float64.
func refLinear(x []float32, rows int, deq []float32, n, k int) []float32 {
	out := make([]float32, rows*n)
	for m := 0; m < rows; m++ {
		for j := 0; j < n; j++ {
			var s float64
			for i := 0; i < k; i++ {
				s += float64(x[m*k+i]) * float64(deq[j*k+i])
			}
			out[m*n+j] = float32(s)
		}
	}
	return out
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// TestLinearPaths: both paths equal the float64 product with the dequantized
// weight to f32 rounding, and PathDequantGEMM equals a dense GEMM with the
// host-dequantized weight bit for bit. K = 640 (10 groups) exercises a ragged
// last chunk of PathQuantized; x has rank 3.
func TestLinearPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const n, k = 48, 640
	for _, bits := range []int{8, 6, 4} {
		t.Run(fmt.Sprintf("int%d", bits), func(t *testing.T) {
			a, err := Quantize(testMatrix(r, n, k), n, k, bits, 64, safetensors.BF16)
			if err != nil {
				t.Fatal(err)
			}
			deq, _ := a.Dequantize()
			x := randVec(r, 2*3*k)
			bias := randVec(r, n)
			s := a.Scheme
			args := append([]any{tensors.FromFlatDataAndDimensions(x, 2, 3, k), tensors.FromFlatDataAndDimensions(deq, n, k),
				tensors.FromFlatDataAndDimensions(bias, n)}, affineArgs(a, dtypes.Float32)...)
			out := run(t, func(in []*Node) []*Node {
				w := QuantizedWeight(in[3], in[4], in[5], s)
				return []*Node{
					Linear(in[0], w, in[2], Dispatch{Path: PathQuantized}),
					Linear(in[0], w, in[2], Dispatch{Path: PathDequantGEMM}),
					Linear(in[0], DenseWeight(in[1]), in[2], Dispatch{}),
				}
			}, args...)
			want := refLinear(x, 6, deq, n, k)
			for i := range want {
				want[i] += bias[i%n]
			}
			shape := []int{2, 3, n}
			if got := out[0].Shape().Dimensions; fmt.Sprint(got) != fmt.Sprint(shape) {
				t.Fatalf("output shape %v, want %v", got, shape)
			}
			tol := testutil.ParityTol(want) / 10
			testutil.AssertClose(t, "quantized path vs float64", f32s(t, out[0]), want, shape, tol)
			testutil.AssertClose(t, "dequant-gemm path vs float64", f32s(t, out[1]), want, shape, tol)
			testutil.AssertBitExact(t, "dequant-gemm path vs dense GEMM on the host-dequantized weight", f32s(t, out[1]), f32s(t, out[2]))
		})
	}
}

// TestLinearBFloat16: bf16 activations and scales; both paths stay within bf16
// accuracy of the float64 product (the quantized path accumulates in float32).
func TestLinearBFloat16(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const rows, n, k = 4, 32, 256
	a, err := Quantize(testMatrix(r, n, k), n, k, 6, 64, safetensors.BF16)
	if err != nil {
		t.Fatal(err)
	}
	x := randVec(r, rows*k)
	xb := make([]float32, len(x))
	for i, v := range x {
		xb[i] = bfloat16.FromFloat32(v).Float32()
	}
	deq, _ := a.Dequantize()
	want := refLinear(xb, rows, deq, n, k)
	s := a.Scheme
	args := append([]any{floatTensor(x, dtypes.BFloat16, rows, k)}, affineArgs(a, dtypes.BFloat16)...)
	out := run(t, func(in []*Node) []*Node {
		w := QuantizedWeight(in[1], in[2], in[3], s)
		return []*Node{Linear(in[0], w, nil, Dispatch{Path: PathQuantized}), Linear(in[0], w, nil, Dispatch{Path: PathDequantGEMM})}
	}, args...)
	for i, name := range []string{"quantized", "dequant-gemm"} {
		if out[i].DType() != dtypes.BFloat16 {
			t.Fatalf("%s path returns %s, want bf16", name, out[i].DType())
		}
		// bf16 output rounding (2^-9 relative) plus, for dequant-gemm, bf16 weights.
		testutil.AssertClose(t, name+" bf16", f32s(t, out[i]), want, []int{rows, n}, 5e-3*testutil.MaxAbs(want))
	}
}

// TestDisabledDispatch is the acceptance "the disabled-dispatch path is
// evaluated (not just built) and matches the quantized path exactly":
//
//   - with the dispatch of FASTVIDEO_DQ_GEMM=0, Linear at M = 800 (above the
//     default floor) is evaluated, logs the quantized path, and equals the
//     forced PathQuantized at M = 800 bit for bit;
//   - the same rows computed at M = 16 and M = 1 (below the floor, zero
//     Dispatch, which also takes the quantized path) equal those rows of the
//     M = 800 result bit for bit: the disabled dispatch is the small-M kernel,
//     row for row, not merely something close to it (this needs a backend whose
//     GEMM kernel choice does not depend on M: the Go backend switches kernels at
//     4 MFLOP per dot, so N and K are sized to keep every dot below that);
//   - with the zero Dispatch, M = 800 takes the dequant-GEMM path (logged), which
//     agrees with the quantized path to f32 rounding; a Floor of N moves the floor.
func TestDisabledDispatch(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const n, k, big = 16, 256, 800 // largest dot: 4 groups × 800 × 16 × 64 = 3.3 MFLOP
	a, err := Quantize(testMatrix(r, n, k), n, k, 4, 64, safetensors.BF16)
	if err != nil {
		t.Fatal(err)
	}
	x := randVec(r, big*k)
	s := a.Scheme
	log := testutil.CaptureSlog(t, "quant.Linear", "path")

	eval := func(rows int, d Dispatch) []float32 {
		args := append([]any{tensors.FromFlatDataAndDimensions(x[:rows*k], rows, k)}, affineArgs(a, dtypes.Float32)...)
		out := run(t, func(in []*Node) []*Node {
			return []*Node{Linear(in[0], QuantizedWeight(in[1], in[2], in[3], s), nil, d)}
		}, args...)
		return f32s(t, out[0])
	}
	expectPath := func(want string) {
		t.Helper()
		if got := strings.Join(log.Take(), ","); got != want {
			t.Fatalf("logged path %q, want %q", got, want)
		}
	}
	parse := func(v string) Dispatch {
		t.Helper()
		d, err := ParseDispatch(v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	disabled := eval(big, parse("0"))
	expectPath("quantized")
	testutil.AssertBitExact(t, "FASTVIDEO_DQ_GEMM=0 at M=800 vs PathQuantized at M=800", disabled, eval(big, Dispatch{Path: PathQuantized}))
	expectPath("quantized")

	small := eval(16, Dispatch{})
	expectPath("quantized")
	testutil.AssertBitExact(t, "rows 0..15 at M=16 vs the same rows at M=800 (disabled)", small, disabled[:16*n])
	one := eval(1, Dispatch{})
	expectPath("quantized")
	testutil.AssertBitExact(t, "row 0 at M=1 vs the same row at M=800 (disabled)", one, disabled[:n])

	dq := eval(big, Dispatch{})
	expectPath("dequant-gemm")
	testutil.AssertBitExact(t, "default dispatch at M=800 vs PathDequantGEMM", dq, eval(big, Dispatch{Path: PathDequantGEMM}))
	expectPath("dequant-gemm")
	testutil.AssertClose(t, "dequant-gemm vs quantized at M=800", dq, disabled, []int{big, n}, testutil.ParityTol(disabled)/10)

	eval(16, parse("16"))
	expectPath("dequant-gemm")
	eval(15, parse("16"))
	expectPath("quantized")
}

func TestParseDispatch(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Dispatch
		ok   bool
	}{
		{"", Dispatch{}, true}, {"0", Dispatch{Path: PathQuantized}, true}, {"1024", Dispatch{Floor: 1024}, true},
		{" 64 ", Dispatch{Floor: 64}, true}, {"-1", Dispatch{}, false}, {"yes", Dispatch{}, false}, {"1.5", Dispatch{}, false},
	} {
		d, err := ParseDispatch(c.in)
		if (err == nil) != c.ok || (c.ok && d != c.want) {
			t.Errorf("ParseDispatch(%q) = %+v, %v; want %+v", c.in, d, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), DQGEMMEnv) {
			t.Errorf("error %q does not name %s", err, DQGEMMEnv)
		}
	}
	if got := (Dispatch{}).Choose(DefaultDQGEMMFloor - 1); got != PathQuantized {
		t.Errorf("zero Dispatch below the default floor: %v", got)
	}
	if got := (Dispatch{}).Choose(DefaultDQGEMMFloor); got != PathDequantGEMM {
		t.Errorf("zero Dispatch at the default floor: %v", got)
	}
	if (Dispatch{Path: PathQuantized}).Choose(1<<20) != PathQuantized {
		t.Error("a forced PathQuantized must disable the dequant-GEMM path")
	}
	for _, bad := range []Dispatch{{Floor: -1}, {Path: PathDense}, {Path: Path(9)}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
	// An invalid Dispatch fails the graph build with an error, not a crash.
	a, _ := Quantize(make([]float32, 64*4), 4, 64, 8, 64, safetensors.F32)
	e, err := NewExec(testutil.Backend(t), func(in []*Node) []*Node {
		return []*Node{Linear(in[0], QuantizedWeight(in[1], in[2], in[3], a.Scheme), nil, Dispatch{Floor: -1})}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	_, err = e.Call(append([]any{tensors.FromFlatDataAndDimensions(make([]float32, 64), 1, 64)}, affineArgs(a, dtypes.Float32)...)...)
	if err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("invalid dispatch: got %v", err)
	}
}
