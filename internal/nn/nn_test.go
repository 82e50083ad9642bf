package nn

import (
	"math"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
)

// TestOps checks the shared graph operations against their formulas on a small input.
func TestOps(t *testing.T) {
	b := testutil.Backend(t)
	x := []float32{1, -2, 3, 0.5, 4, -1}
	w := []float32{1, 0, -1, 2, 1, 0.5}
	bias := []float32{0.25, -0.5}
	run := func(fn func(x, w, b *Node) *Node) []float32 {
		e := graphexec.MustExec(b, "test.op", func(in []*Node) []*Node { return []*Node{fn(in[0], in[1], in[2])} })
		defer e.Finalize()
		out, err := graphexec.Call(e, tensors.FromFlatDataAndDimensions(x, 2, 3), tensors.FromFlatDataAndDimensions(w, 2, 3), tensors.FromValue(bias))
		if err != nil {
			t.Fatal(err)
		}
		defer graphexec.Finalize(out...)
		v, _ := graphexec.HostF32(out[0])
		return v
	}
	// x·wᵀ + b
	want := []float32{1 + 0 - 3 + 0.25, 2 - 2 + 1.5 - 0.5, 0.5 + 0 + 1 + 0.25, 1 + 4 - 0.5 - 0.5}
	testutil.AssertClose(t, "Linear", run(Linear), want, []int{2, 2}, 1e-6)
	testutil.AssertClose(t, "LinearF32", run(LinearF32), want, []int{2, 2}, 1e-6)
	// LayerNorm of row [1, −2, 3]: mean 2/3, biased variance 38/9.
	ln := run(func(x, _, _ *Node) *Node { return LayerNorm(x, nil, nil, 0) })
	for i, v := range []float64{1, -2, 3} {
		want := (v - 2.0/3) / math.Sqrt(38.0/9)
		if math.Abs(float64(ln[i])-want) > 1e-6 {
			t.Errorf("LayerNorm[%d] = %v, want %v", i, ln[i], want)
		}
	}
	// RMSNorm of row [1, −2, 3]: rms √(14/3).
	rn := run(func(x, _, _ *Node) *Node { return RMSNorm(x, nil, 0) })
	if want := 3 / math.Sqrt(14.0/3); math.Abs(float64(rn[2])-want) > 1e-6 {
		t.Errorf("RMSNorm[2] = %v, want %v", rn[2], want)
	}
	g := run(func(x, _, _ *Node) *Node { return GeluTanh(x) })
	if want := 0.5 * 3 * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(3+0.044715*27))); math.Abs(float64(g[2])-want) > 1e-6 {
		t.Errorf("GeluTanh(3) = %v, want %v", g[2], want)
	}
}
