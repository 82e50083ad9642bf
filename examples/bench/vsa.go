package main

import (
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/attention"
	"fastvideo/dit/h3"
	"fastvideo/dit/wan"
)

var (
	vsaGeometry = flag.String("vsa-geometry", "h3", "vsa: h3 (832x480x124 + 93 text tokens: 14,937 rows, 56 heads x 128, prefix tiles), h3-packed (issue 32's and upstream's bench geometry: 14,976 rows in 234 whole tiles, no prefix, 56 heads x 128), wan (FastWan2.1-1.3B at 832x480x81: 32,760 tokens, 12 heads x 128) or wan-packed (issue 32's and upstream's Wan 1.3B geometry: 32,768 tokens in 512 whole tiles)")
	vsaSparsity = flag.Float64("vsa-sparsity", 0.9, "vsa: sparsity of the sparse attention")
	vsaTile     = flag.Int("vsa-tile", 64, "vsa: tile size, 64 or 256 (h3 only; Wan's is 64)")
	vsaDType    = flag.String("vsa-dtype", "bf16", "vsa: q/k/v dtype")
	vsaChain    = flag.Int("vsa-chain", 1, "vsa: attentions in one program, each one's output the next one's q and each with a k, v and gate of its own, as a DiT's blocks follow each other; the time reported is one attention's (the program's over this), without the per-program launch and sync")
)

func init() {
	register("vsa", func(b compute.Backend, c common) error {
		dt, err := parseDType("vsa-dtype", *vsaDType)
		if err != nil {
			return fmt.Errorf("vsa bench: %w", err)
		}
		tl, heads, headDim, err := vsaBenchTiling(*vsaGeometry, *vsaTile)
		if err != nil {
			return fmt.Errorf("vsa bench: %w", err)
		}
		return benchVSA(b, tl, heads, headDim, dt, c)
	})
}

// vsaBenchTiling is the tiling, heads and head width of a -vsa-geometry, with tiles of tile rows (h3).
func vsaBenchTiling(geometry string, tile int) (*attention.Tiling, int, int, error) {
	switch strings.ToLower(geometry) {
	case "h3":
		doc, err := newH3DiTDocument(480, 832, 124, 93)
		if err != nil {
			return nil, 0, 0, err
		}
		tl, err := h3.LayoutVSA(doc.lay, 0, tile, attention.ModeExempt).Tiling()
		cfg := h3.ReleaseConfig()
		return tl, cfg.NumAttentionHeads, cfg.AttentionHeadDim, err
	case "h3-packed":
		// The geometry upstream's kernel bench and issue 32 time at: FastH3's 14,937 rows padded to 234
		// whole tiles, every tile competing (no prefix). A 4x4x936 grid gives those tiles; which rows
		// share a tile does not change the work, only FastH3's own tiling does (48-row edge tiles and
		// nine exempt prefix tiles: -vsa-geometry h3).
		cfg := h3.ReleaseConfig()
		tl, err := attention.NewTiling(nil, [3]int{4, 4, 936}, 64)
		return tl, cfg.NumAttentionHeads, cfg.AttentionHeadDim, err
	case "wan-packed":
		// Upstream's kernel bench and issue 32's Wan 1.3B geometry: 32,768 tokens in 512 whole tiles, no
		// prefix (top-103 at sparsity 0.8); FastWan's own tiling (-vsa-geometry wan) has edge tiles of 8-32
		// rows.
		cfg := wan.Wan21T2V1_3B()
		tl, err := attention.NewTiling(nil, [3]int{4, 4, 2048}, 64)
		return tl, cfg.NumAttentionHeads, cfg.AttentionHeadDim, err
	case "wan":
		cfg := wan.Wan21T2V1_3B()
		nt, nh, nw, err := cfg.Tokens(21, 60, 104)
		if err != nil {
			return nil, 0, 0, err
		}
		tl, err := attention.NewTiling(nil, [3]int{nt, nh, nw}, wan.VSATileSize)
		return tl, cfg.NumAttentionHeads, cfg.AttentionHeadDim, err
	}
	return nil, 0, 0, badFlag("-vsa-geometry %q is not h3, h3-packed, wan or wan-packed", geometry)
}

// benchVSA times one attention call at the tiling's geometry: dense, then VSA at -vsa-sparsity with the
// gated compression branch, its fine stage on gathered tiles and through the Triton kernel where that
// runs, on random q, k, v and gate drawn on the device.
func benchVSA(b compute.Backend, tl *attention.Tiling, heads, headDim int, dt dtypes.DType, c common) error {
	if err := c.medianIters("vsa"); err != nil {
		return err
	}
	if *vsaChain < 1 {
		return badFlag("-vsa-chain %d; use 1 or more attentions a program", *vsaChain)
	}
	l := tl.Rows()
	k := attention.TopKTiles(*vsaSparsity, tl.NumVideo)
	path, err := attention.Resolve(b, dt, headDim, c.Attention)
	if err != nil {
		return err
	}
	fmt.Printf("vsa: %s geometry, %d rows, %d heads x %d, %s, path %s; E=%d: %d prefix + %d video tiles, sparsity %g -> top-%d\n",
		*vsaGeometry, l, heads, headDim, dt, path, tl.TileElems, tl.NumPrefix, tl.NumVideo, *vsaSparsity, k)
	qkvg, err := vsaInputs(b, dt, tl, heads, headDim, *vsaChain, randnSource(c.Seed, 0x76736120))
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range qkvg {
			t.FinalizeAll()
		}
	}()
	denseTFLOP := 4 * float64(l) * float64(l) * float64(heads*headDim) / 1e12
	sparseTFLOP := 4 * float64(tl.AttendedPairs(k)) * float64(heads*headDim) / 1e12
	type row struct {
		label  string
		sparse *attention.Sparse
		tflop  float64
	}
	rows := []row{{"dense", nil, denseTFLOP}}
	kernels := []attention.SparseKernel{attention.SparseGather}
	if err := attention.TritonVSA(b, dt, headDim, tl.TileElems); err == nil {
		kernels = append(kernels, attention.SparseTriton)
	} else {
		fmt.Printf("vsa: no Triton fine stage: %v\n", err)
	}
	if err := attention.MosaicVSA(b, dt, heads, headDim, tl, k); err == nil {
		kernels = append(kernels, attention.SparseMosaic)
	} else {
		fmt.Printf("vsa: no Mosaic fine stage: %v\n", err)
	}
	for _, kernel := range kernels {
		rows = append(rows, row{fmt.Sprintf("vsa %g %s", *vsaSparsity, kernel), &attention.Sparse{Tiling: tl, TopK: k, Kernel: kernel}, sparseTFLOP})
	}
	for _, run := range rows {
		if err := timeAttention(b, qkvg, run.label, run.sparse, run.tflop, c); err != nil {
			return err
		}
	}
	return nil
}

// vsaInputs draws the bench's inputs on the device: q, then the k, v and gate of each of n chained
// attentions ([1, L, heads, headDim] in dt), from randn's N(0, 1) values.
//
// q and every k are tile-structured: row r is (c[tile(r)] + e_r)/√2, with c a vector a tile and head and e
// a vector a row. A trained model's neighbouring tokens share content, and VSA's routing works on the
// tiles' means. Independent rows (e alone) would make a tile's mean vary as 1/√(its valid rows), so the
// routing would favour the small edge tiles, which the fine kernel walks in 16- and 32-row blocks. At
// FastH3's tiling, 25 % of the video key tiles such a routing keeps have 1-16 valid rows, against 10 % of
// all tiles: a fine stage with about 12 % less work than a size-neutral choice
// (TestStructuredInputsRouteLikeUniformLists; BENCHMARKS.md, "Session 26").
//
// No two attentions of the chain share a k, v or gate. With one set for the whole chain, XLA's
// common-subexpression pass computes their tile copies and means once a program (the Triton pack calls,
// or the gathered path's copies, are then identical), and the time per attention leaves out most of two
// of the three pack kernels a DiT block runs. So each k has a content of its own, and the noise of k, v
// and gate is rolled along the sequence by chainShift rows a link.
func vsaInputs(b compute.Backend, dt dtypes.DType, tl *attention.Tiling, heads, headDim, n int, randn func(int) []float32) ([]*tensors.Tensor, error) {
	l, nT := tl.Rows(), tl.NumTiles()
	noise, err := randomOnDevice(b, dtypes.Float32, randn, 4, l*heads*headDim, 1, l, heads, headDim) // q, k, v, gate
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range noise {
			t.FinalizeAll()
		}
	}()
	args := make([]any, 0, 5+n)
	for _, t := range noise {
		args = append(args, t)
	}
	for range 1 + n { // the contents of q and of each k
		args = append(args, tensors.FromFlatDataAndDimensions(randn(nT*heads*headDim), nT, heads, headDim))
	}
	prep, err := NewExec(b, func(in []*Node) []*Node { return chainGraph(in, tl.RowTiles(), n, dt) })
	if err != nil {
		return nil, err
	}
	defer prep.Finalize()
	return prep.Call(args...)
}

// chainGraph builds vsaInputs' tensors from in: the noise of q, k, v and gate [1, L, H, D], then the tile
// contents [nT, H, D] of q and of each of n ks (float32), with rowTiles the tile of each row.
func chainGraph(in []*Node, rowTiles []int32, n int, dt dtypes.DType) []*Node {
	eq, ek, v, gate, contents := in[0], in[1], in[2], in[3], in[4:]
	g := eq.Graph()
	at := ExpandAxes(Const(g, rowTiles), -1)
	structured := func(content, e *Node) *Node {
		rows := ExpandAxes(Gather(content, at), 0) // [1, L, H, D]
		return ConvertDType(DivScalar(Add(rows, e), math.Sqrt2), dt)
	}
	out := []*Node{structured(contents[0], eq)}
	for i := range n {
		s := chainShift(i, eq.Shape().Dim(1))
		out = append(out, structured(contents[1+i], rollRows(ek, s)), ConvertDType(rollRows(v, s), dt), ConvertDType(rollRows(gate, s), dt))
	}
	return out
}

// chainShift is the rows the noise of the i-th chained attention's k, v and gate is rolled by (from 0) in a
// sequence of l rows: 997 a link, a prime, so that every link of a chain shorter than l has its own shift
// unless l is a multiple of 997 (no geometry of the bench's is).
func chainShift(i, l int) int {
	return i * 997 % l
}

// rollRows rolls x [1, L, ...] along its sequence axis by s rows: row r of the result is row (r+s) mod L.
func rollRows(x *Node, s int) *Node {
	l := x.Shape().Dim(1)
	if s%l == 0 {
		return x
	}
	return Concatenate([]*Node{Slice(x, AxisRange(), AxisRange(s%l, l)), Slice(x, AxisRange(), AxisRange(0, s%l))}, 1)
}

// chainAttend is -vsa-chain attentions (sparse nil: dense): in holds q, then each attention's k, v and
// gate; each attention's output is the next one's q.
func chainAttend(in []*Node, sparse *attention.Sparse, opts attention.Options) *Node {
	q := in[0]
	for kvg := in[1:]; len(kvg) >= 3; kvg = kvg[3:] {
		o := opts
		if sparse != nil {
			s := *sparse
			s.Gate = kvg[2]
			o.Sparse = &s
		}
		q = attention.Attend(q, kvg[0], kvg[1], o)
	}
	return q
}

// timeAttention compiles and times one attention graph (sparse nil: dense) over the inputs, in the
// attention's dtype already (a DiT's q, k, v are): -vsa-chain attentions, each one's output the next
// one's q (qkvg: q, then each attention's k, v and gate), and the reported times are per attention.
func timeAttention(b compute.Backend, qkvg []*tensors.Tensor, label string, sparse *attention.Sparse, tflop float64, c common) error {
	exec, err := NewExec(b, func(in []*Node) *Node {
		// One scalar back: the time is the attention's.
		return ReduceAllSum(ConvertDType(chainAttend(in, sparse, c.Attention), dtypes.Float32))
	})
	if err != nil {
		return err
	}
	defer exec.Finalize()
	var sum float32
	args := make([]any, len(qkvg))
	for i, t := range qkvg {
		args[i] = t
	}
	tm, err := timeRuns(c.Warmup, c.Iters, func() error {
		out, err := exec.Call1(args...)
		if err != nil {
			return err
		}
		sum = tensors.MustCopyFlatData[float32](out)[0]
		out.FinalizeAll()
		return nil
	})
	if err != nil {
		return err
	}
	n := float64(*vsaChain)
	chain := ""
	if *vsaChain > 1 {
		chain = fmt.Sprintf(" (a program of %d chained attentions over %d; first is the program's)", *vsaChain, *vsaChain)
	}
	fmt.Printf("vsa[%s]: first %.3f s, min %.3f ms, median %.3f ms over %d%s; %.1f TFLOP -> %.0f TFLOP/s; output sum %.4g; peak device %d MiB\n",
		label, tm.First, 1e3*tm.Min()/n, 1e3*tm.Median()/n, c.Iters, chain, tflop, tflop*n/tm.Median(), sum, tm.PeakGPU)
	return c.Window.bracket("vsa["+label+"]", tm.Median(), func() error {
		out, err := exec.Call1(args...)
		if err == nil {
			out.FinalizeAll()
		}
		return err
	})
}
