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
		cases := vsaCases(t, fx)
		m := fixtureModel(t, fx, Options{})
		// Both blocks in one program: a VSA layer and, in the dense-layer case, a dense one together.
		grouped := fixtureModel(t, fx, Options{BlockGroup: 2})
		// Tensor-parallel over the fixture's heads (the fewest shards they split into): the shards in
		// turn, and the SPMD program with an emulated all-reduce; each shard runs VSA on its heads with
		// its rows of the gate.
		runs := []struct {
			label string
			m     *Model
		}{{"", nil}}
		if counts := shardCounts(fixtureConfig(t, fx)); len(counts) > 0 {
			n := counts[0]
			sharded, spmd := fixtureModel(t, fx, Options{Shards: n}), fixtureModel(t, fx, Options{Shards: n})
			emulateSPMD(t, spmd)
			for b, shards := range shardsOf(sharded).blocks {
				cut := 0
				for _, w := range shards {
					if w.Gate != nil {
						cut++
					}
				}
				if cut != n || sharded.p.Blocks[b].Gate.Bound() {
					t.Fatalf("block %d: gate cut into %d slices (whole gate still bound: %v), want %d", b, cut, sharded.p.Blocks[b].Gate.Bound(), n)
				}
			}
			runs = append(runs, runs[0], runs[0])
			runs[1].label, runs[1].m = "tensor-parallel ", sharded
			runs[2].label, runs[2].m = "SPMD ", spmd
		} else {
			t.Log("no tensor-parallel runs: the fixture's heads and FFN width have no common divisor")
		}
		in := fixtureInputs(t, fx)
		dense := mustForward(t, m, in)
		wantDense, sh := fx.F32(t, "out.dense.video")
		testutil.AssertClose(t, "out.dense.video", dense.Video, wantDense, sh, testutil.ParityTol(wantDense))
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			t.Run(name, func(t *testing.T) {
				in.VSA = cases[name]
				out := mustForward(t, m, in)
				for _, run := range runs {
					got := out
					if run.m != nil {
						got = mustForward(t, run.m, in)
					}
					for _, part := range []struct {
						name string
						got  []float32
					}{{"video", got.Video}, {"audio", got.Audio}} {
						want, sh := fx.F32(t, "out."+name+"."+part.name)
						testutil.AssertClose(t, run.label+"out."+name+"."+part.name, part.got, want, sh, testutil.ParityTol(want))
					}
				}
				if d := testutil.MaxAbsDiff(out.Video, dense.Video); d <= 100*testutil.ParityTol(dense.Video) {
					t.Errorf("VSA output within %.3g of the dense forward: the case does not exercise sparsity", d)
				}
				g := mustForward(t, grouped, in)
				if !testutil.SameBits(g.Video, out.Video) || !testutil.SameBits(g.Audio, out.Audio) {
					t.Error("two blocks per program differ from one block per program")
				}
				checkPrograms(t, grouped, 2)
				for k := range groupedExecs(t, m) {
					if k.vsa && k.blocks != 1 {
						t.Errorf("the default BlockGroup ran a VSA program of %d blocks; VSA keeps one per program", k.blocks)
					}
				}
			})
		}
	})
}

// vsaCases reads an h3_dit_vsa fixture's cases as the VSA each forward runs, by case name; every case
// must be really sparse.
func vsaCases(t *testing.T, fx *testutil.Fixture) map[string]*VSA {
	t.Helper()
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
	out := map[string]*VSA{}
	for name, c := range cases {
		mode, err := attention.ParseMode(c.Mode)
		if err != nil {
			t.Fatal(err)
		}
		if k := attention.TopKTiles(c.Sparsity, c.NumVideo); k != c.TopK || k >= c.NumVideo {
			t.Fatalf("%s: top-k %d of %d video tiles, fixture %d: the case must be really sparse", name, k, c.NumVideo, c.TopK)
		}
		out[name] = &VSA{Sparsity: c.Sparsity, TileSize: c.TileSize, Mode: mode, DenseLayers: c.DenseLayers, Prefix: geo.Prefix, Grid: geo.Grid}
	}
	return out
}
