package wan

import (
	"maps"
	"slices"
	"testing"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
)

// The DiT forward with VSA on against FastVideo's WanTransformer3DModel built with
// WanTransformerBlock_VSA over its VIDEO_SPARSE_ATTN backend (gen_wan_dit_vsa.py): trained gates, a
// token grid with ragged tiles, every sparsity of the fixture; each must also differ from the dense
// forward of the same weights.
func TestVSAForwardParity(t *testing.T) {
	testutil.ForEachPendingFixture(t, "wan_dit_vsa", "dit/wan/testdata/gen_wan_dit_vsa.py", func(t *testing.T, fx *testutil.Fixture) {
		var cases map[string]struct {
			Sparsity float64 `json:"sparsity"`
			TopK     int     `json:"topk"`
			NumTiles int     `json:"num_video_tiles"`
		}
		if err := fx.DecodeConfig(&cases, "cases"); err != nil {
			t.Fatal(err)
		}
		m := fixtureModel(t, fx, Options{})
		if !m.HasVSAGates() {
			t.Fatal("the fixture's to_gate_compress weights were not bound")
		}
		in := fixtureInputs(t, fx)
		dense := mustForward(t, m, in)
		want, sh := fx.F32(t, "out.dense.sample")
		testutil.AssertClose(t, "out.dense.sample", dense, want, sh, testutil.ParityTol(want))
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			c := cases[name]
			t.Run(name, func(t *testing.T) {
				if k := attention.TopKTiles(c.Sparsity, c.NumTiles); k != c.TopK || k >= c.NumTiles {
					t.Fatalf("top-k %d of %d tiles, fixture %d: the case must be really sparse", k, c.NumTiles, c.TopK)
				}
				in.VSA = &VSA{Sparsity: c.Sparsity}
				got := mustForward(t, m, in)
				want, sh := fx.F32(t, "out."+name+".sample")
				testutil.AssertClose(t, "out."+name+".sample", got, want, sh, testutil.ParityTol(want))
				if d := testutil.MaxAbsDiff(got, dense); d <= 100*testutil.ParityTol(dense) {
					t.Errorf("VSA output within %.3g of the dense forward: the case does not exercise sparsity", d)
				}
			})
		}
	})
}
