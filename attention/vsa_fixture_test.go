package attention

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// vsaFixtureCase is one case of a VSA fixture's JSON (written by testdata/gen_vsa.py).
type vsaFixtureCase struct {
	Prefix   []int   `json:"prefix_segments"`
	Grid     [3]int  `json:"grid"`
	TileSize int     `json:"tile_size"`
	Sparsity float64 `json:"sparsity"`
	TopK     int     `json:"topk"`
	Prefixes int     `json:"num_prefix_tiles"`
	Videos   int     `json:"num_video_tiles"`
}

// forEachVSAFixture runs fn on every case of every fixture of kind; it skips only while the generated
// file is not yet in testdata/ (gen_vsa.py runs on the GPU machine, where FastVideo's torch code is).
func forEachVSAFixture(t *testing.T, kind, file string, fn func(t *testing.T, fx *testutil.Fixture, name string, c vsaFixtureCase)) {
	if _, err := os.Stat(filepath.Join("testdata", file)); os.IsNotExist(err) {
		t.Skipf("testdata/%s is not generated yet: run testdata/gen_vsa.py on the GPU machine", file)
	}
	testutil.ForEachFixture(t, kind, func(t *testing.T, fx *testutil.Fixture) {
		var cases map[string]vsaFixtureCase
		if err := fx.DecodeConfig(&cases, "cases"); err != nil {
			t.Fatal(err)
		}
		for name, c := range cases {
			t.Run(name, func(t *testing.T) { fn(t, fx, name, c) })
		}
	})
}

// fixtureVSACase reads a case's inputs and checks its tiling against upstream's metadata.
func fixtureVSACase(t *testing.T, fx *testutil.Fixture, name string, c vsaFixtureCase) vsaCase {
	tl := mustTiling(t, c.Prefix, c.Grid, c.TileSize)
	if tl.NumPrefix != c.Prefixes || tl.NumVideo != c.Videos || TopKTiles(c.Sparsity, tl.NumVideo) != c.TopK {
		t.Fatalf("tiles %d + %d, k %d; upstream %d + %d, k %d", tl.NumPrefix, tl.NumVideo,
			TopKTiles(c.Sparsity, tl.NumVideo), c.Prefixes, c.Videos, c.TopK)
	}
	sizes, _ := fx.I64(t, "out."+name+".variable_block_sizes")
	slots, _ := fx.I64(t, "out."+name+".untile_combined_index")
	for i, s := range sizes {
		if int64(tl.Sizes[i]) != s {
			t.Fatalf("tile %d: %d rows, upstream %d", i, tl.Sizes[i], s)
		}
	}
	for r, s := range slots {
		if int64(tl.RowSlot[r]) != s {
			t.Fatalf("row %d: slot %d, upstream %d", r, tl.RowSlot[r], s)
		}
	}
	in := func(n string) []float32 { v, _ := fx.F32(t, "in."+name+"."+n); return v }
	h := int(fx.Config["heads"].(float64))
	return vsaCase{tl: tl, h: h, d: int(fx.Config["head_dim"].(float64)), q: in("q"), k: in("k"), v: in("v"), g: in("gate")}
}

// routing returns the pooled Q and K [H, nT, D], the scores [H, nT, nT] and the masks of both modes as
// 0/1 floats.
func (c vsaCase) routing(t *testing.T, topK int) [][]float32 {
	exec, err := NewExec(testutil.Backend(t), func(q, k *Node) []*Node {
		qp, kp := poolTiles(tileRows(q, c.tl), c.tl), poolTiles(tileRows(k, c.tl), c.tl)
		s := tileScores(qp, kp)
		mask := func(m Mode) *Node {
			return ConvertDType(tileMask(s, &Sparse{Tiling: c.tl, TopK: topK, Mode: m}), dtypes.Float32)
		}
		if topK >= c.tl.NumVideo {
			all := OnesLike(s)
			return []*Node{TransposeAllAxes(qp, 1, 0, 2), TransposeAllAxes(kp, 1, 0, 2), s, all, all}
		}
		return []*Node{TransposeAllAxes(qp, 1, 0, 2), TransposeAllAxes(kp, 1, 0, 2), s, mask(ModeExempt), mask(ModeCompete)}
	})
	if err != nil {
		t.Fatal(err)
	}
	l := c.tl.Rows()
	out, err := exec.Call(tensors.FromFlatDataAndDimensions(c.q, 1, l, c.h, c.d), tensors.FromFlatDataAndDimensions(c.k, 1, l, c.h, c.d))
	if err != nil {
		t.Fatal(err)
	}
	res := make([][]float32, len(out))
	for i, o := range out {
		res[i] = tensors.MustCopyFlatData[float32](o)
	}
	return res
}

func assertMask(t *testing.T, label string, got []float32, want []int64) {
	t.Helper()
	for i := range want {
		if (got[i] != 0) != (want[i] != 0) {
			t.Fatalf("%s: tile pair %d selected=%v, upstream %v", label, i, got[i] != 0, want[i] != 0)
		}
	}
}

func TestVSAH3FixtureParity(t *testing.T) {
	forEachVSAFixture(t, "vsa_h3", "vsa_h3.safetensors", func(t *testing.T, fx *testutil.Fixture, name string, c vsaFixtureCase) {
		vc := fixtureVSACase(t, fx, name, c)
		r := vc.routing(t, c.TopK)
		for i, n := range []string{"q_pooled", "k_pooled", "scores"} {
			want, sh := fx.F32(t, "out."+name+"."+n)
			testutil.AssertClose(t, n, r[i], want, sh, testutil.ParityTol(want))
		}
		for m, mode := range map[Mode]string{ModeExempt: "exempt", ModeCompete: "compete"} {
			mask, _ := fx.I64(t, "out."+name+"."+mode+".mask")
			assertMask(t, mode, r[3+int(m)], mask)
			for _, path := range []Path{PathExact, pathGathered} {
				for _, out := range []string{"reference", "attn", "attn_gated"} {
					want, sh := fx.F32(t, "out."+name+"."+mode+"."+out)
					got := vc.run(t, c.TopK, m, out == "attn_gated", path)
					testutil.AssertClose(t, mode+"."+out, got, want, sh, testutil.ParityTol(want))
				}
			}
		}
	})
}

func TestVSAWanFixtureParity(t *testing.T) {
	forEachVSAFixture(t, "vsa_wan", "vsa_wan.safetensors", func(t *testing.T, fx *testutil.Fixture, name string, c vsaFixtureCase) {
		vc := fixtureVSACase(t, fx, name, c)
		r := vc.routing(t, c.TopK)
		want, sh := fx.F32(t, "out."+name+".scores")
		testutil.AssertClose(t, "scores", r[2], want, sh, testutil.ParityTol(want))
		mask, _ := fx.I64(t, "out."+name+".mask")
		assertMask(t, "mask", r[3], mask)
		for _, path := range []Path{PathExact, pathGathered} {
			want, sh := fx.F32(t, "out."+name+".attn_gated")
			testutil.AssertClose(t, "attn_gated", vc.run(t, c.TopK, ModeExempt, true, path), want, sh, testutil.ParityTol(want))
		}
	})
}
