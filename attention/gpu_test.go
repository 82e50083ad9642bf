package attention

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// TestFusedMatchesExactOnGPU checks the cuDNN flash path against the exact path on the same bf16 inputs,
// including cross-attention (Lq != Lk): XLA's cuDNN flash lowering sizes its intermediate from the query
// length and does not check the key length, so that case is the one to test:
//
//	go test -c -o .gpu/attention.test ./attention
//	FASTVIDEO_GPU_TEST=1 ./.gpu/attention.test -test.run TestFusedMatchesExactOnGPU -test.v
func TestFusedMatchesExactOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	if p, err := Resolve(b, dtypes.BFloat16, 128, Options{}); err != nil || p != PathFused {
		t.Fatalf("auto path on xla:cuda with bf16: %v, %v; want fused", p, err)
	}
	for _, c := range []struct {
		name        string
		lq, lk, h   int
		headDim     int
		unitScaling float64
	}{
		{"self_1500", 1500, 1500, 8, 128, 1},
		{"cross_lq333_lk1000", 333, 1000, 8, 128, 1},
		{"cross_lq1000_lk77", 1000, 77, 4, 64, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, uint64(c.lq)))
			mk := func(l int) *tensors.Tensor {
				v := make([]bfloat16.BFloat16, l*c.h*c.headDim)
				for i := range v {
					v[i] = bfloat16.FromFloat32(float32(r.NormFloat64() * c.unitScaling))
				}
				return tensors.FromFlatDataAndDimensions(v, 1, l, c.h, c.headDim)
			}
			q, k, v := mk(c.lq), mk(c.lk), mk(c.lk)
			run := func(p Path) []float32 {
				e := MustNewExec(b, func(q, k, v *Node) *Node {
					return ConvertDType(Attend(q, k, v, Options{Path: p}), dtypes.Float32)
				})
				out, err := e.Call1(q, k, v)
				if err != nil {
					t.Fatal(err)
				}
				return tensors.MustCopyFlatData[float32](out)
			}
			fused, exact := run(PathFused), run(PathExact)
			worst := 0.0
			for i := range exact {
				worst = math.Max(worst, math.Abs(float64(fused[i])-float64(exact[i])))
			}
			t.Logf("fused vs exact (bf16 in/out): max abs diff %.3g", worst)
			if worst > 3e-2 {
				t.Errorf("fused path differs from the exact path by %.3g (> 3e-2 on unit-scale inputs)", worst)
			}
		})
	}
}

// TestSparseFusedMatchesGatheredOnGPU checks the VSA fused path (the fused kernel on gathered tiles, pad
// slots masked by the extra score channel) against the same algorithm in exact float32 on the same bf16
// inputs, for both tile sizes and modes, with the compression gate:
//
//	FASTVIDEO_GPU_TEST=1 ./.gpu/attention.test -test.run TestSparseFusedMatchesGatheredOnGPU -test.v
func TestSparseFusedMatchesGatheredOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	for _, e := range []int{64, 256} {
		for _, mode := range []Mode{ModeExempt, ModeCompete} {
			tl, err := NewTiling([]int{93, 0, 414}, [3]int{10, 15, 26}, e)
			if err != nil {
				t.Fatal(err)
			}
			const h, d = 4, 128
			r := rand.New(rand.NewPCG(9, uint64(e)))
			mk := func() *tensors.Tensor {
				v := make([]bfloat16.BFloat16, tl.Rows()*h*d)
				for i := range v {
					v[i] = bfloat16.FromFloat32(float32(r.NormFloat64()))
				}
				return tensors.FromFlatDataAndDimensions(v, 1, tl.Rows(), h, d)
			}
			q, k, v, g := mk(), mk(), mk(), mk()
			run := func(p Path) []float32 {
				ex := MustNewExec(b, func(q, k, v, g *Node) *Node {
					s := &Sparse{Tiling: tl, TopK: TopKTiles(0.9, tl.NumVideo), Mode: mode, Gate: g}
					return ConvertDType(Attend(q, k, v, Options{Path: p, Sparse: s}), dtypes.Float32)
				})
				out, err := ex.Call1(q, k, v, g)
				if err != nil {
					t.Fatal(err)
				}
				return tensors.MustCopyFlatData[float32](out)
			}
			worst := testutil.MaxAbsDiff(run(PathFused), run(pathGathered))
			t.Logf("E=%d %v: fused vs gathered exact: max abs diff %.3g", e, mode, worst)
			if worst > 3e-2 {
				t.Errorf("E=%d %v: fused sparse path differs by %.3g (> 3e-2)", e, mode, worst)
			}
		}
	}
}
