package main

import (
	"math"
	"sort"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
)

// runChainGraph runs chainGraph on the CPU backend over host tensors and returns its outputs' values.
func runChainGraph(t *testing.T, in []*tensors.Tensor, rowTiles []int32, n int) [][]float32 {
	t.Helper()
	exec, err := NewExec(testutil.Backend(t), func(in []*Node) []*Node { return chainGraph(in, rowTiles, n, dtypes.Float32) })
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	args := make([]any, len(in))
	for i, x := range in {
		args[i] = x
	}
	outs, err := exec.Call(args...)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([][]float32, len(outs))
	for i, o := range outs {
		vals[i] = tensors.MustCopyFlatData[float32](o)
		o.FinalizeAll()
	}
	return vals
}

// chainGraph's q and ks are their tile's content plus their row's noise over √2, each k with a content of
// its own and its noise rolled by the link's shift; v and gate are the noise rolled by the same shift; no
// two links share a shift (identical inputs would let XLA compute their tile copies once a chain).
func TestChainGraphGivesEachLinkItsOwnInputs(t *testing.T) {
	tl, err := attention.NewTiling([]int{3}, [3]int{5, 5, 6}, 64)
	if err != nil {
		t.Fatal(err)
	}
	const h, d, n = 2, 3, 3
	l, nT, width := tl.Rows(), tl.NumTiles(), h*d
	randn := randnSource(7, 1)
	var host [][]float32
	var in []*tensors.Tensor
	for i := range 4 + 1 + n {
		rows := l
		if i >= 4 {
			rows = nT
		}
		v := randn(rows * width)
		host = append(host, v)
		if i < 4 {
			in = append(in, tensors.FromFlatDataAndDimensions(v, 1, l, h, d))
		} else {
			in = append(in, tensors.FromFlatDataAndDimensions(v, nT, h, d))
		}
	}
	rowTiles := tl.RowTiles()
	out := runChainGraph(t, in, rowTiles, n)
	if len(out) != 1+3*n {
		t.Fatalf("%d outputs for a chain of %d, want %d", len(out), n, 1+3*n)
	}
	check := func(label string, got []float32, want func(r, c int) float64) {
		t.Helper()
		for r := range l {
			for c := range width {
				if w := want(r, c); math.Abs(float64(got[r*width+c])-w) > 1e-6*max(1, math.Abs(w)) {
					t.Fatalf("%s: row %d, column %d is %v, want %v", label, r, c, got[r*width+c], w)
				}
			}
		}
	}
	structured := func(content, noise []float32, shift int) func(r, c int) float64 {
		return func(r, c int) float64 {
			return (float64(content[int(rowTiles[r])*width+c]) + float64(noise[(r+shift)%l*width+c])) / math.Sqrt2
		}
	}
	rolled := func(noise []float32, shift int) func(r, c int) float64 {
		return func(r, c int) float64 { return float64(noise[(r+shift)%l*width+c]) }
	}
	check("q", out[0], structured(host[4], host[0], 0))
	shifts := map[int]bool{}
	for i := range n {
		s := chainShift(i, l)
		if shifts[s] {
			t.Errorf("link %d: shift %d is another link's", i, s)
		}
		shifts[s] = true
		check("k", out[1+3*i], structured(host[5+i], host[1], s))
		check("v", out[2+3*i], rolled(host[2], s))
		check("gate", out[3+3*i], rolled(host[3], s))
	}
}

// With tile-structured q and k, the routing at FastH3's and FastWan's tilings keeps key tiles of each size
// class about as often as uniform random lists do (upstream's kernel bench), so the fine stage walks as many
// K/V rows as a size-neutral choice; with independent rows it keeps the small edge tiles far more often and
// walks 10-17 % fewer. The fractions are logged (go test ./examples/bench -run StructuredInputs -v).
func TestStructuredInputsRouteLikeUniformLists(t *testing.T) {
	for _, geo := range []struct {
		name     string
		sparsity float64
	}{{"h3", 0.9}, {"wan", 0.8}} {
		t.Run(geo.name, func(t *testing.T) {
			tl, _, _, err := vsaBenchTiling(geo.name, 64)
			if err != nil {
				t.Fatal(err)
			}
			kept, uniform := keptClasses(t, tl, geo.sparsity, true)
			if r, u := blockRows(kept), blockRows(uniform); math.Abs(r/u-1) > 0.02 {
				t.Errorf("tile-structured rows: the kept tiles' blocks average %.1f rows, uniform lists' %.1f", r, u)
			}
			kept, _ = keptClasses(t, tl, geo.sparsity, false)
			if r, u := blockRows(kept), blockRows(uniform); r/u > 0.95 {
				t.Errorf("independent rows: the kept tiles' blocks average %.1f rows, uniform lists' %.1f: the bias the "+
					"structure removes is gone, so the test no longer shows it", r, u)
			}
		})
	}
}

// blockRows is the K/V rows the fine kernel reads for a key tile on average, given the fractions of tiles
// in each class of its key blocks (attention/vsa_triton.json: 64, 32, 16 rows).
func blockRows(fractions [3]float64) float64 {
	return 64*fractions[0] + 32*fractions[1] + 16*fractions[2]
}

// keptClasses routes chainGraph's q and k (tile-structured, or with contents all zero: independent rows) at
// tiling tl and sparsity, four heads of 128, and returns the fractions of the kept video key tiles in each
// class of the fine kernel's key blocks (33-64, 17-32 and 1-16 valid rows), and each class's fraction of all
// video tiles (uniform lists).
func keptClasses(t *testing.T, tl *attention.Tiling, sparsity float64, structured bool) (kept, uniform [3]float64) {
	const h, d = 4, 128
	l, nT := tl.Rows(), tl.NumTiles()
	topK := attention.TopKTiles(sparsity, tl.NumVideo)
	class := func(size int32) int {
		switch {
		case size > 32:
			return 0
		case size > 16:
			return 1
		}
		return 2
	}
	for _, s := range tl.Sizes[tl.NumPrefix:] {
		uniform[class(s)] += 1 / float64(tl.NumVideo)
	}
	randn := randnSource(11, 3)
	in := []*tensors.Tensor{}
	for range 4 {
		in = append(in, tensors.FromFlatDataAndDimensions(randn(l*h*d), 1, l, h, d))
	}
	for range 2 {
		c := make([]float32, nT*h*d)
		if structured {
			c = randn(nT * h * d)
		}
		in = append(in, tensors.FromFlatDataAndDimensions(c, nT, h, d))
	}
	out := runChainGraph(t, in, tl.RowTiles(), 1)
	means := func(x []float32) []float64 { // [tile][head][d]
		m := make([]float64, nT*h*d)
		for r, tile := range tl.RowTiles() {
			for c := range h * d {
				m[int(tile)*h*d+c] += float64(x[r*h*d+c]) / float64(tl.Sizes[tile])
			}
		}
		return m
	}
	qp, kp := means(out[0]), means(out[1])
	var got [3]float64
	type score struct {
		tile int
		s    float64
	}
	scores := make([]score, 0, tl.NumVideo)
	for head := range h {
		for qt := tl.NumPrefix; qt < nT; qt++ {
			scores = scores[:0]
			for kt := tl.NumPrefix; kt < nT; kt++ {
				s := 0.0
				for c := range d {
					s += qp[(qt*h+head)*d+c] * kp[(kt*h+head)*d+c]
				}
				scores = append(scores, score{kt, s})
			}
			sort.Slice(scores, func(i, j int) bool { return scores[i].s > scores[j].s })
			for _, s := range scores[:topK] {
				got[class(tl.Sizes[s.tile])] += 1 / float64(h*tl.NumVideo*topK)
			}
		}
	}
	label := "independent rows"
	if structured {
		label = "tile-structured rows"
	}
	t.Logf("%s, top-%d of %d video tiles: kept tiles of 33-64 / 17-32 / 1-16 valid rows %.0f%% / %.0f%% / %.0f%%, "+
		"%.1f K/V rows a tile (all tiles: %.0f%% / %.0f%% / %.0f%%, %.1f rows)", label, topK, tl.NumVideo,
		100*got[0], 100*got[1], 100*got[2], blockRows(got), 100*uniform[0], 100*uniform[1], 100*uniform[2], blockRows(uniform))
	return got, uniform
}
