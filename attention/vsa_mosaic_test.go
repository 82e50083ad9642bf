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
// emulated: the exact path's fine stage (no gate) laid out as the kernel writes it, the video tiles' rows
// head-major [H, V·64, D], gathered back into the sequence with the compression branch added
// (tileOutputRows) must give the exact path's gated output at every video row (the prefix rows are the
// dense prefix attention's, which the caller writes over them); and the lists the kernel reads
// (mosaicLists) give each video tile its routed key tiles with their count and valid rows.
func TestMosaicListsAndRows(t *testing.T) {
	c := newVSACase(t, []int{70}, [3]int{5, 6, 7}, 64, 3, 8, 11)
	tl, topK := c.tl, 3
	fine, want := c.run(t, topK, ModeExempt, false, PathExact), c.run(t, topK, ModeExempt, true, PathExact)
	l, e, nT, nV := tl.Rows(), tl.TileElems, tl.NumTiles(), tl.NumVideo
	prefixSlots, prefixRows := int32(tl.NumPrefix*e), tl.PrefixRows()
	tiles := make([]float32, c.h*nV*e*c.d) // [H, V·E, D], zero at the pads
	for r, slot := range tl.RowSlot[prefixRows:] {
		for hh := range c.h {
			copy(tiles[(hh*nV*e+int(slot-prefixSlots))*c.d:][:c.d], fine[((prefixRows+r)*c.h+hh)*c.d:][:c.d])
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
	out, err := ex.Call1(tensors.FromFlatDataAndDimensions(tiles, c.h, nV*e, c.d), mk(c.q), mk(c.k), mk(c.v), mk(c.g))
	if err != nil {
		t.Fatal(err)
	}
	if prefixRows == 0 {
		t.Fatal("the case has no prefix rows: it would not check that the kernel's rows start after them")
	}
	video := prefixRows * c.h * c.d
	got := tensors.MustCopyFlatData[float32](out)
	if e, tol := testutil.MaxAbsDiff(got[video:], want[video:]), 1e-5*max(1, testutil.MaxAbs(want)); e > tol {
		t.Errorf("the kernel's rows gathered with gate·oc against the exact gated output: max abs diff %.3g (> %.3g)", e, tol)
	}

	// Two heads, the tiling's video tiles with lists of 3 in groups of 2 classes.
	h, stride, classes := 2, 3, 2
	idx, ends := make([]int32, h*nV*stride), make([]int32, h*nV*classes)
	for row := range h * nV {
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
	res, err := lx.Call(tensors.FromFlatDataAndDimensions(idx, h*nV*stride), tensors.FromFlatDataAndDimensions(ends, h*nV*classes))
	if err != nil {
		t.Fatal(err)
	}
	lists, counts, valid := tensors.MustCopyFlatData[int32](res[0]), tensors.MustCopyFlatData[int32](res[1]), tensors.MustCopyFlatData[int32](res[2])
	if got := res[0].Shape().Dimensions; len(got) != 3 || got[0] != h || got[1] != nV || got[2] != stride {
		t.Fatalf("lists %v, want [%d %d %d]", got, h, nV, stride)
	}
	for row := range h * nV {
		if want := ends[row*classes+1]; counts[row] != want {
			t.Fatalf("list %d: count %d, want %d", row, counts[row], want)
		}
		for j := range stride {
			if want := idx[row*stride+j]; lists[row*stride+j] != want || valid[row*stride+j] != tl.Sizes[want] {
				t.Fatalf("list %d entry %d: tile %d (valid %d), want %d (%d)", row, j, lists[row*stride+j], valid[row*stride+j], want, tl.Sizes[want])
			}
		}
	}
}
