package h3

import (
	"maps"
	"slices"
	"testing"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
)

// vsaFixtureCase is one forward of an h3_dit_vsa fixture: the knobs MiniMaxH3DenoisingStage hands
// MiniMaxH3VSAMetadataBuilder.build (fastvideo/pipelines/basic/minimax_h3/stages/minimax_h3_denoising.py).
type vsaFixtureCase struct {
	TileSize    int     `json:"tile_size"`
	Sparsity    float64 `json:"sparsity"`
	Mode        string  `json:"mode"`
	DenseLayers []int   `json:"dense_layers"`
	TopK        int     `json:"topk"`
	NumVideo    int     `json:"num_video_tiles"`
}

// The DiT forward with VSA on against FastVideo's MiniMaxH3Transformer3DModel run with its VSA-H3
// backend (gen_h3_dit_vsa.py), every case of the fixture: exempt and compete, 64- and 256-row tiles, a
// layer forced dense, trained gates; each must also differ from the dense forward.
func TestVSAForwardParity(t *testing.T) {
	testutil.ForEachPendingFixture(t, "h3_dit_vsa", "dit/h3/testdata/gen_h3_dit_vsa.py", func(t *testing.T, fx *testutil.Fixture) {
		var geo struct {
			Prefix [3]int `json:"prefix_segments"`
			Grid   [3]int `json:"grid"`
		}
		var cases map[string]vsaFixtureCase
		if err := fx.DecodeConfig(&geo, "vsa"); err != nil {
			t.Fatal(err)
		}
		if err := fx.DecodeConfig(&cases, "cases"); err != nil {
			t.Fatal(err)
		}
		m := fixtureModel(t, fx, Options{})
		// Both blocks in one program: a VSA layer and, in the dense-layer case, a dense one together.
		grouped := fixtureModel(t, fx, Options{BlockGroup: 2})
		in := fixtureInputs(t, fx)
		dense, err := m.Forward(in)
		if err != nil {
			t.Fatal(err)
		}
		wantDense, sh := fx.F32(t, "out.dense.video")
		testutil.AssertClose(t, "out.dense.video", dense.Video, wantDense, sh, testutil.ParityTol(wantDense))
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			c := cases[name]
			t.Run(name, func(t *testing.T) {
				mode, err := attention.ParseMode(c.Mode)
				if err != nil {
					t.Fatal(err)
				}
				v := &VSA{Sparsity: c.Sparsity, TileSize: c.TileSize, Mode: mode, DenseLayers: c.DenseLayers, Prefix: geo.Prefix, Grid: geo.Grid}
				if k := attention.TopKTiles(c.Sparsity, c.NumVideo); k != c.TopK || k >= c.NumVideo {
					t.Fatalf("top-k %d of %d video tiles, fixture %d: the case must be really sparse", k, c.NumVideo, c.TopK)
				}
				in.VSA = v
				out, err := m.Forward(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, part := range []struct {
					name string
					got  []float32
				}{{"video", out.Video}, {"audio", out.Audio}} {
					want, sh := fx.F32(t, "out."+name+"."+part.name)
					tol := testutil.ParityTol(want)
					testutil.AssertClose(t, "out."+name+"."+part.name, part.got, want, sh, tol)
				}
				if d := testutil.MaxAbsDiff(out.Video, dense.Video); d <= 100*testutil.ParityTol(dense.Video) {
					t.Errorf("VSA output within %.3g of the dense forward: the case does not exercise sparsity", d)
				}
				g, err := grouped.Forward(in)
				if err != nil {
					t.Fatal(err)
				}
				if !testutil.SameBits(g.Video, out.Video) || !testutil.SameBits(g.Audio, out.Audio) {
					t.Error("two blocks per program differ from one block per program")
				}
				checkPrograms(t, grouped, 2)
				for k := range m.groupExecs {
					if k.vsa && k.blocks != 1 {
						t.Errorf("the default BlockGroup ran a VSA program of %d blocks; VSA keeps one per program", k.blocks)
					}
				}
			})
		}
	})
}
