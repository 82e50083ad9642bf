package attention

import (
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// TestVSAMosaicFile: the embedded template loads with what it was made with and the least geometry it
// was checked at, and a file of another kernel layout is refused.
func TestVSAMosaicFile(t *testing.T) {
	k, err := loadVSAMosaic()
	if err != nil {
		t.Fatal(err)
	}
	if k.Plugin == "" || k.Tile != 64 || k.HeadDim != 128 || k.Operands != mosaicOperands {
		t.Fatalf("plugin %q, tile %d, head width %d, %d operands", k.Plugin, k.Tile, k.HeadDim, k.Operands)
	}
	tl := mustTiling(t, []int{93, 414}, [3]int{37, 15, 26}, 64) // FastH3's tiling: 289 tiles
	if _, err := k.mosaicGeometry(tl, 56, tl.KeyTiles(28)); err != nil {
		t.Errorf("FastH3's geometry: %v", err)
	}
	if _, err := k.mosaicGeometry(mustTiling(t, []int{70}, [3]int{5, 6, 7}, 64), 2, 3); err == nil ||
		!strings.Contains(err.Error(), "below the") {
		t.Errorf("a geometry under the checked ones: %v", err)
	}
	if _, err := parseVSAMosaic("x", []byte("not gzip")); err == nil {
		t.Error("a damaged file parsed")
	}
}

// TestMosaicListsAndRows checks the graph around the Mosaic kernel on the CPU with the kernel's output
// emulated: the exact path's fine stage (no gate) laid out as the kernel writes it, [H, nT·64, D] head-major
// tile rows, gathered back into the sequence with the compression branch added (tileOutputRows) must give
// the exact path's gated output; and the lists the kernel reads (mosaicLists) give each prefix tile one key
// tile, each video tile its routed ones with their count and valid rows.
func TestMosaicListsAndRows(t *testing.T) {
	c := newVSACase(t, []int{70}, [3]int{5, 6, 7}, 64, 3, 8, 11)
	tl, topK := c.tl, 3
	fine, want := c.run(t, topK, ModeExempt, false, PathExact), c.run(t, topK, ModeExempt, true, PathExact)
	l, e, nT := tl.Rows(), tl.TileElems, tl.NumTiles()
	tiles := make([]float32, c.h*nT*e*c.d) // [H, nT·E, D], zero at the pads
	for r, slot := range tl.RowSlot {
		for hh := range c.h {
			copy(tiles[(hh*nT*e+int(slot))*c.d:][:c.d], fine[(r*c.h+hh)*c.d:][:c.d])
		}
	}
	b := testutil.Backend(t)
	ex, err := NewExec(b, func(o, q, k, v, g *Node) *Node {
		qt, kt := tileRows(q, tl), tileRows(k, tl)
		oc := compression(tileScores(poolTiles(qt, tl), poolTiles(kt, tl)), poolTiles(tileRows(v, tl), tl))
		return tileOutputRows(o, tl, Reshape(g, l*c.h, c.d), flatTiles(oc))
	})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(x []float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, 1, l, c.h, c.d) }
	out, err := ex.Call1(tensors.FromFlatDataAndDimensions(tiles, c.h, nT*e, c.d), mk(c.q), mk(c.k), mk(c.v), mk(c.g))
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](out)
	if e, tol := testutil.MaxAbsDiff(got, want), 1e-5*max(1, testutil.MaxAbs(want)); e > tol {
		t.Errorf("the kernel's rows gathered with gate·oc against the exact gated output: max abs diff %.3g (> %.3g)", e, tol)
	}

	// Two heads, the tiling's video tiles with lists of 3 in groups of 2 classes.
	h, stride, classes, v := 2, 3, 2, tl.NumVideo
	idx, ends := make([]int32, h*v*stride), make([]int32, h*v*classes)
	for row := range h * v {
		for j := range stride {
			idx[row*stride+j] = int32((row + 2*j) % nT)
		}
		ends[row*classes], ends[row*classes+1] = 1, int32(1+row%stride) // counts 1..3
	}
	lx, err := NewExec(b, func(i, en *Node) []*Node {
		lists, counts, valid := mosaicLists(tl, h, stride, i, en, classes)
		return []*Node{lists, counts, valid}
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := lx.Call(tensors.FromFlatDataAndDimensions(idx, h*v*stride), tensors.FromFlatDataAndDimensions(ends, h*v*classes))
	if err != nil {
		t.Fatal(err)
	}
	lists, counts, valid := tensors.MustCopyFlatData[int32](res[0]), tensors.MustCopyFlatData[int32](res[1]), tensors.MustCopyFlatData[int32](res[2])
	p := tl.NumPrefix
	if got := res[0].Shape().Dimensions; len(got) != 3 || got[0] != h || got[1] != nT || got[2] != stride {
		t.Fatalf("lists %v, want [%d %d %d]", got, h, nT, stride)
	}
	for hh := range h {
		for tile := range nT {
			row := hh*nT + tile
			wantCount, wantList := int32(1), []int32{0, 0, 0}
			if tile >= p {
				src := hh*v + tile - p
				wantCount, wantList = ends[src*classes+1], idx[src*stride:][:stride]
			}
			if counts[row] != wantCount {
				t.Fatalf("head %d tile %d: count %d, want %d", hh, tile, counts[row], wantCount)
			}
			for j := range stride {
				if lists[row*stride+j] != wantList[j] || valid[row*stride+j] != tl.Sizes[wantList[j]] {
					t.Fatalf("head %d tile %d entry %d: tile %d (valid %d), want %d (%d)", hh, tile, j,
						lists[row*stride+j], valid[row*stride+j], wantList[j], tl.Sizes[wantList[j]])
				}
			}
		}
	}
}
