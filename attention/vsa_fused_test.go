package attention

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// TestSparseFusedGraphOnCPU builds the GPU's sparse algorithm (gathered blocks through the fused
// attention call, pad slots masked by the extra score channel) on the CPU backend, where GoMLX
// decomposes the fused call into plain ops, and checks it against the gathered exact path: the
// masking trick and every shape of the fused graph are tested without a GPU.
func TestSparseFusedGraphOnCPU(t *testing.T) {
	h3 := []int{93, 0, 414}
	for _, c := range []struct {
		e      int
		mode   Mode
		prefix []int
	}{{64, ModeExempt, h3}, {256, ModeCompete, h3}, {64, ModeExempt, nil}} { // no prefix: Wan's VSA
		checkSparseFusedGraph(t, c.e, c.mode, c.prefix)
	}
}

func checkSparseFusedGraph(t *testing.T, e int, mode Mode, prefix []int) {
	b := testutil.Backend(t)
	tl, err := NewTiling(prefix, [3]int{10, 15, 26}, e)
	if err != nil {
		t.Fatal(err)
	}
	const h, d = 4, 32
	r := rand.New(rand.NewPCG(9, uint64(e)))
	mk := func() *tensors.Tensor {
		v := make([]float32, tl.Rows()*h*d)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return tensors.FromFlatDataAndDimensions(v, 1, tl.Rows(), h, d)
	}
	q, k, v, g := mk(), mk(), mk(), mk()
	run := func(p Path) []float32 {
		ex := MustNewExec(b, func(q, k, v, g *Node) *Node {
			s := &Sparse{Tiling: tl, TopK: TopKTiles(0.9, tl.NumVideo), Mode: mode, Gate: g}
			return ConvertDType(attendSparse(q, k, v, s, 0.17, p), dtypes.Float32)
		})
		out, err := ex.Call1(q, k, v, g)
		if err != nil {
			t.Fatal(err)
		}
		return tensors.MustCopyFlatData[float32](out)
	}
	if worst := testutil.MaxAbsDiff(run(PathFused), run(pathGathered)); worst > 1e-5 {
		t.Errorf("E=%d %v: the fused sparse graph differs from the gathered exact path by %.3g", e, mode, worst)
	}
}
