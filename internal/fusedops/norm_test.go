package fusedops

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// normCase is one pre-norm's inputs: x, y [L, D] (the residual stream and the branch output), the tables
// mod [R, 6, D], each token's table row rows [L] and the weight w [D].
type normCase struct {
	l, d, r   int
	x, y, mod []float32
	w         []float32
	rows      []int32
}

// The tables the tests pick, as FastH3's FFN pre-norm: gate_msa, shift_mlp, scale_mlp.
const testGate, testShift, testScale = 2, 3, 4

func newNormCase(l, d, r int, seed uint64) normCase {
	rng := rand.New(rand.NewPCG(seed, 11))
	c := normCase{l: l, d: d, r: r, x: make([]float32, l*d), y: make([]float32, l*d), mod: make([]float32, r*6*d), w: make([]float32, d), rows: make([]int32, l)}
	for i := range c.x {
		c.x[i], c.y[i] = float32(3*rng.NormFloat64()), float32(rng.NormFloat64())
	}
	for i := range c.mod {
		c.mod[i] = float32(0.3 * rng.NormFloat64())
	}
	for i := range c.w {
		c.w[i] = float32(1 + 0.2*rng.NormFloat64())
	}
	for i := range c.rows {
		c.rows[i] = int32(rng.IntN(r))
	}
	return c
}

// reference is the pass in float64 (fastvideo/models/dits/minimax_h3.py: x + gate·y when residual, then
// RMSNorm·w·(1 + scale) + shift): h and the sum.
func (c normCase) reference(residual bool) (h, sum []float64) {
	h, sum = make([]float64, c.l*c.d), make([]float64, c.l*c.d)
	table := func(t, i int) []float32 { return c.mod[(int(c.rows[t])*6+i)*c.d:][:c.d] }
	for t := range c.l {
		s := sum[t*c.d:][:c.d]
		ss := 0.0
		for j := range c.d {
			s[j] = float64(c.x[t*c.d+j])
			if residual {
				s[j] += float64(table(t, testGate)[j]) * float64(c.y[t*c.d+j])
			}
			ss += s[j] * s[j]
		}
		r := 1 / math.Sqrt(ss/float64(c.d)+1e-6)
		for j := range c.d {
			h[t*c.d+j] = s[j]*r*float64(c.w[j])*(1+float64(table(t, testScale)[j])) + float64(table(t, testShift)[j])
		}
	}
	return h, sum
}

func (c normCase) tensors() []*tensors.Tensor {
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(c.x, c.l, c.d), tensors.FromFlatDataAndDimensions(c.y, c.l, c.d),
		tensors.FromFlatDataAndDimensions(c.mod, c.r, 6, c.d), tensors.FromFlatDataAndDimensions(c.rows, c.l),
		tensors.FromFlatDataAndDimensions(c.w, c.d)}
}

// normExec runs both passes in one graph: h of NormModulate on x, then h and the sum of
// ResidualNormModulate on x and y.
func normExec(t *testing.T, b compute.Backend, form Form, in []*tensors.Tensor) (h, rh, rsum *tensors.Tensor, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if err, _ = r.(error); err == nil {
				t.Fatalf("panic without an error: %v", r)
			}
		}
	}()
	e := MustNewExec(b, func(x, y, mod, rows, w *Node) []*Node {
		m := Modulation{Mod: mod, Rows: rows}
		h := NormModulate(x, m, w, 1e-6, testShift, testScale, form)
		rh, sum := ResidualNormModulate(x, y, m, w, 1e-6, testGate, testShift, testScale, form)
		return []*Node{h, rh, sum}
	})
	out, err := e.Call(anys(in)...)
	if err != nil {
		return nil, nil, nil, err
	}
	return out[0], out[1], out[2], nil
}

// TestNormModulateGraphMatchesReference: the graph forms in float32 on the CPU against the float64 passes.
func TestNormModulateGraphMatchesReference(t *testing.T) {
	b := testutil.Backend(t)
	for _, c := range []normCase{newNormCase(5, 48, 3, 1), newNormCase(7, 40, 1, 2)} {
		h, rh, rsum, err := normExec(t, b, FormGraph, c.tensors())
		if err != nil {
			t.Fatal(err)
		}
		wantH, _ := c.reference(false)
		wantRH, wantSum := c.reference(true)
		for _, o := range []struct {
			name string
			got  *tensors.Tensor
			want []float64
		}{{"h", h, wantH}, {"residual h", rh, wantRH}, {"sum", rsum, wantSum}} {
			got, worst, scale := tensors.MustCopyFlatData[float32](o.got), 0.0, 1.0
			for i, w := range o.want {
				worst, scale = max(worst, math.Abs(float64(got[i])-w)), max(scale, math.Abs(w))
			}
			if worst > 1e-4*scale {
				t.Errorf("L %d, D %d, R %d, %s: max |graph - reference| %.3g > %.3g", c.l, c.d, c.r, o.name, worst, 1e-4*scale)
			}
		}
	}
}

// TestNormModulateKernelNotOnCPU: the CPU backend runs the graph forms under FormAuto, says why the kernels
// cannot run, and refuses FormKernel when the graph is built.
func TestNormModulateKernelNotOnCPU(t *testing.T) {
	b := testutil.Backend(t)
	if err := NormModulateKernel(b, dtypes.BFloat16, dtypes.BFloat16, 5376); err == nil {
		t.Fatal("the kernels report they can run on the CPU backend")
	}
	c := newNormCase(3, 32, 2, 3)
	auto, autoR, autoSum, err := normExec(t, b, FormAuto, c.tensors())
	if err != nil {
		t.Fatal(err)
	}
	graph, graphR, graphSum, _ := normExec(t, b, FormGraph, c.tensors())
	for _, p := range [][2]*tensors.Tensor{{auto, graph}, {autoR, graphR}, {autoSum, graphSum}} {
		a, g := tensors.MustCopyFlatData[float32](p[0]), tensors.MustCopyFlatData[float32](p[1])
		for i := range a {
			if a[i] != g[i] {
				t.Fatalf("FormAuto differs from FormGraph on the CPU at %d", i)
			}
		}
	}
	if _, _, _, err := normExec(t, b, FormKernel, c.tensors()); err == nil || !strings.Contains(err.Error(), "norm_modulate kernel was asked for") {
		t.Fatalf("FormKernel on the CPU: %v, want the kernel refused", err)
	}
}

// TestNormModulateKernelOnGPU: the kernels against the graph forms on the same bf16 inputs, at FastH3's
// width and two others. The kernels round where the graph rounds, so they differ where the order of the
// statistic's float32 sum moves the normalized value by a bf16 step (and where XLA keeps a product
// unrounded): the rounded product with 1 + scale then differs by at most three steps of its magnitude and
// the rounded sum with shift by one more, so every h lies within four bf16 steps (at the larger of its two
// terms) of the graph's, and every residual sum within one step:
//
//	bash bench/build_gpu.sh -test .gpu/fusedops.test ./internal/fusedops
//	cd internal/fusedops && FASTVIDEO_GPU_TEST=1 ../../.gpu/fusedops.test -test.run OnGPU -test.v
func TestNormModulateKernelOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	if err := NormModulateKernel(b, dtypes.BFloat16, dtypes.BFloat16, 5376); err != nil {
		t.Fatalf("the kernels cannot run on xla:cuda: %v", err)
	}
	for _, c := range []normCase{newNormCase(600, 5376, 3, 5), newNormCase(37, 640, 2, 6), newNormCase(9, 16, 1, 7)} {
		in := c.tensors()
		for _, i := range []int{0, 1, 2, 4} { // x, y, the tables and w in bf16, as the DiT holds them
			in[i] = toBF16(in[i])
		}
		kh, kr, ks, err := normExec(t, b, FormKernel, in)
		if err != nil {
			t.Fatal(err)
		}
		gh, gr, gs, err := normExec(t, b, FormGraph, in)
		if err != nil {
			t.Fatal(err)
		}
		mod := tensors.MustCopyFlatData[bfloat16.BFloat16](in[2])
		shiftOf := func(i int) float64 { return float64(mod[(int(c.rows[i/c.d])*6+testShift)*c.d+i%c.d].Float32()) }
		for _, o := range []struct {
			name     string
			got, ref *tensors.Tensor
			residual bool
		}{{"h", kh, gh, false}, {"residual h", kr, gr, true}} {
			got, want := tensors.MustCopyFlatData[bfloat16.BFloat16](o.got), tensors.MustCopyFlatData[bfloat16.BFloat16](o.ref)
			exact, _ := c.reference(o.residual)
			equal := 0
			for i := range got {
				// The larger of h's two terms, |RMSNorm·w·(1 + scale)| and |shift|, from the float64 pass.
				term := max(math.Abs(shiftOf(i)), math.Abs(exact[i]-shiftOf(i)))
				switch d := math.Abs(float64(got[i].Float32()) - float64(want[i].Float32())); {
				case d == 0:
					equal++
				case d > 4*testutil.BF16Spacing(term):
					t.Fatalf("L %d, D %d, %s: element %d kernel %g, graph %g: more than four bf16 steps of %g apart",
						c.l, c.d, o.name, i, got[i].Float32(), want[i].Float32(), term)
				}
			}
			t.Logf("L %d, D %d, %s: %.2f %% of %d elements equal", c.l, c.d, o.name, 100*float64(equal)/float64(len(got)), len(got))
		}
		got, want := tensors.MustCopyFlatData[bfloat16.BFloat16](ks), tensors.MustCopyFlatData[bfloat16.BFloat16](gs)
		for i := range got {
			if bf16StepsApart(got[i], want[i]) > 1 {
				t.Fatalf("L %d, D %d, sum: element %d kernel %g, graph %g: more than one bf16 step apart", c.l, c.d, i, got[i].Float32(), want[i].Float32())
			}
		}
	}
}

// TestUseKernelFile: a file that does not parse is refused and leaves the kernels in use alone; the
// embedded file is accepted and gives the norm kernels.
func TestUseKernelFile(t *testing.T) {
	before, _ := loadKernels()
	if err := UseKernelFile([]byte(`{"plugin": "p 1", "head": 128, "heads": 64, "kernels": {"norm_modulate": null}}`)); err == nil {
		t.Fatal("a file with an empty kernel was accepted")
	}
	if after, _ := loadKernels(); after != before {
		t.Fatal("a refused file replaced the kernels in use")
	}
	if err := UseKernelFile(kernelFileData); err != nil {
		t.Fatal(err)
	}
	f, err := loadKernels()
	if err != nil || f.Kernels["norm_modulate"] == nil || f.Kernels["residual_norm_modulate"] == nil || f.Vec != 16 || f.Width < 5376 {
		t.Fatalf("the embedded file through UseKernelFile: %v", err)
	}
}
