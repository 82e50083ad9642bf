package attention

import (
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

func mustTiling(t *testing.T, prefix []int, grid [3]int, e int) *Tiling {
	t.Helper()
	tl, err := NewTiling(prefix, grid, e)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// The plan's tile counts for 832×480×124 with a 93-token prompt: latent grid (37, 15, 26), prefix
// text 93 + audio 2·207.
func TestTileCountsH3Release(t *testing.T) {
	for _, c := range []struct{ e, prefix, video int }{{64, 9, 280}, {256, 3, 80}} {
		tl := mustTiling(t, []int{93, 0, 414}, [3]int{37, 15, 26}, c.e)
		if tl.NumPrefix != c.prefix || tl.NumVideo != c.video {
			t.Errorf("E=%d: %d prefix + %d video tiles, want %d + %d", c.e, tl.NumPrefix, tl.NumVideo, c.prefix, c.video)
		}
		if k := TopKTiles(0.9, tl.NumVideo); c.e == 64 && k != 28 {
			t.Errorf("E=64: k at sparsity 0.9 = %d, want 28", k)
		}
	}
	// Upstream's 720p check (test_vsa_h3_metadata.py test_geometry_720p): 11 prefix + 120 video tiles.
	tl := mustTiling(t, []int{512, 1760, 400}, [3]int{30, 22, 40}, 256)
	if tl.NumPrefix != 11 || tl.NumVideo != 120 || tl.Rows() != 512+1760+400+26400 {
		t.Errorf("720p: %d + %d tiles over %d rows", tl.NumPrefix, tl.NumVideo, tl.Rows())
	}
}

// Upstream's ragged (4,4,4) oracle (test_geometry_tile64_ragged_tails): prefix tails, per-tile sizes
// as products of the clamped per-axis tails, every video row in the tile its coordinate names.
func TestTilingRagged64(t *testing.T) {
	tl := mustTiling(t, []int{70, 5, 130}, [3]int{9, 10, 13}, 64)
	if got := tl.Sizes[:tl.NumPrefix]; !slices.Equal(got, []int32{64, 6, 5, 64, 64, 2}) {
		t.Errorf("prefix sizes %v", got)
	}
	var want []int32
	for tt := 0; tt < 3; tt++ {
		for hh := 0; hh < 3; hh++ {
			for ww := 0; ww < 4; ww++ {
				want = append(want, int32(min(4, 9-4*tt)*min(4, 10-4*hh)*min(4, 13-4*ww)))
			}
		}
	}
	if !slices.Equal(tl.Sizes[tl.NumPrefix:], want) {
		t.Errorf("video sizes %v, want %v", tl.Sizes[tl.NumPrefix:], want)
	}
	if tl.PrefixRows() != 205 {
		t.Errorf("prefix rows %d, want 205", tl.PrefixRows())
	}
	kslots, pads := kernelSlots(tl), 0
	for _, row := range kslots {
		if row == -1 {
			pads++
		}
	}
	if want := tl.NumTiles()*64 - tl.Rows(); pads != want {
		t.Errorf("the kernels' slot map has %d pads, want %d", pads, want)
	}
	seen := map[int32]bool{}
	for r, slot := range tl.RowSlot {
		if seen[slot] || int(slot%64) >= int(tl.Sizes[slot/64]) {
			t.Fatalf("row %d -> slot %d: not an injective map into valid slots", r, slot)
		}
		seen[slot] = true
		if kslots[slot] != int32(r) {
			t.Fatalf("the kernels' slot map sends slot %d to row %d, the tiling to %d", slot, kslots[slot], r)
		}
		if r >= 205 {
			v := r - 205
			rt, rh, rw := v/130, v/13%10, v%13
			if tile := int(slot / 64); tile != 6+(rt/4*3+rh/4)*4+rw/4 {
				t.Fatalf("video row %d (%d,%d,%d) in tile %d", v, rt, rh, rw, tile)
			}
		}
	}
}

// vsaCase is a small random problem: q, k, v, gate [1, L, H, D].
type vsaCase struct {
	tl         *Tiling
	h, d       int
	q, k, v, g []float32
}

func newVSACase(t *testing.T, prefix []int, grid [3]int, e, h, d int, seed uint64) vsaCase {
	tl := mustTiling(t, prefix, grid, e)
	r := rand.New(rand.NewPCG(seed, 3))
	n := tl.Rows() * h * d
	return vsaCase{tl: tl, h: h, d: d, q: randn(r, n, 1), k: randn(r, n, 1), v: randn(r, n, 1), g: randn(r, n, 1)}
}

// run computes Attend with the sparse options (gate used when withGate) on path.
func (c vsaCase) run(t *testing.T, topK int, mode Mode, withGate bool, path Path) []float32 {
	t.Helper()
	backend := testutil.Backend(t)
	exec, err := NewExec(backend, func(q, k, v, g *Node) *Node {
		s := &Sparse{Tiling: c.tl, TopK: topK, Mode: mode, HeadChunk: 1}
		if withGate {
			s.Gate = g
		}
		return Attend(q, k, v, Options{Path: path, Sparse: s})
	})
	if err != nil {
		t.Fatal(err)
	}
	l := c.tl.Rows()
	mk := func(x []float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, 1, l, c.h, c.d) }
	out, err := exec.Call1(mk(c.q), mk(c.k), mk(c.v), mk(c.g))
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](out)
}

// refVSA is the float64 host oracle of the VSA math (upstream's MiniMaxH3VSAImpl.forward with the
// token-level reference of its tests): pooled tile means, scores, top-k selection, masked attention,
// and the gated compression branch when gate != nil.
func refVSA(c vsaCase, topK int, mode Mode, gate []float32) []float64 {
	tl, h, d := c.tl, c.h, c.d
	l, nT, p := tl.Rows(), tl.NumTiles(), tl.NumPrefix
	tiles := tl.RowTiles()
	at := func(x []float32, r, hh, j int) float64 { return float64(x[(r*h+hh)*d+j]) }
	pool := func(x []float32, hh int) [][]float64 {
		out := make([][]float64, nT)
		for i := range out {
			out[i] = make([]float64, d)
		}
		for r := 0; r < l; r++ {
			for j := 0; j < d; j++ {
				out[tiles[r]][j] += at(x, r, hh, j) / float64(tl.Sizes[tiles[r]])
			}
		}
		return out
	}
	out := make([]float64, l*h*d)
	for hh := 0; hh < h; hh++ {
		qp, kp, vp := pool(c.q, hh), pool(c.k, hh), pool(c.v, hh)
		scores := make([][]float64, nT)
		for i := range scores {
			scores[i] = make([]float64, nT)
			for j := range scores[i] {
				for e := 0; e < d; e++ {
					scores[i][j] += qp[i][e] * kp[j][e]
				}
				scores[i][j] /= math.Sqrt(float64(d))
			}
		}
		allow := refMask(scores, p, tl.NumVideo, topK, mode)
		for r := 0; r < l; r++ {
			w := make([]float64, l)
			mx := math.Inf(-1)
			for s := 0; s < l; s++ {
				if !allow[tiles[r]][tiles[s]] {
					continue
				}
				for e := 0; e < d; e++ {
					w[s] += at(c.q, r, hh, e) * at(c.k, s, hh, e)
				}
				w[s] /= math.Sqrt(float64(d))
				mx = math.Max(mx, w[s])
			}
			sum := 0.0
			for s := range w {
				if allow[tiles[r]][tiles[s]] {
					w[s] = math.Exp(w[s] - mx)
					sum += w[s]
				} else {
					w[s] = 0
				}
			}
			comp := softmaxDot(scores[tiles[r]], vp)
			for e := 0; e < d; e++ {
				acc := 0.0
				for s := range w {
					acc += w[s] * at(c.v, s, hh, e)
				}
				out[(r*h+hh)*d+e] = acc / sum
				if gate != nil {
					out[(r*h+hh)*d+e] += comp[e] * at(gate, r, hh, e)
				}
			}
		}
	}
	return out
}

// refMask is upstream's _build_block_mask for one head.
func refMask(scores [][]float64, p, nv, topK int, mode Mode) [][]bool {
	n := len(scores)
	m := make([][]bool, n)
	for i := range m {
		m[i] = make([]bool, n)
		if i < p || topK >= nv {
			for j := range m[i] {
				m[i][j] = true
			}
			continue
		}
		from, k := p, topK
		if mode == ModeCompete {
			from, k = 0, min(topK+p, n)
		} else {
			for j := 0; j < p; j++ {
				m[i][j] = true
			}
		}
		cols := make([]int, 0, n)
		for j := from; j < n; j++ {
			cols = append(cols, j)
		}
		sort.SliceStable(cols, func(a, b int) bool { return scores[i][cols[a]] > scores[i][cols[b]] })
		for _, j := range cols[:k] {
			m[i][j] = true
		}
	}
	return m
}

func softmaxDot(s []float64, v [][]float64) []float64 {
	mx := slices.Max(s)
	out := make([]float64, len(v[0]))
	sum := 0.0
	for j, x := range s {
		w := math.Exp(x - mx)
		sum += w
		for e := range out {
			out[e] += w * v[j][e]
		}
	}
	for e := range out {
		out[e] /= sum
	}
	return out
}

func maxDiff(got []float32, want []float64) (float64, float64) {
	worst, scale := 0.0, 1.0
	for i := range want {
		worst = math.Max(worst, math.Abs(float64(got[i])-want[i]))
		scale = math.Max(scale, math.Abs(want[i]))
	}
	return worst, scale
}

// Both sparse paths on the CPU (the masked oracle and the gathered-tile algorithm the GPU runs) against
// the float64 oracle, on ragged geometries (partial prefix and video tiles, an empty condition segment),
// both modes, with and without the gate.
func TestSparseMatchesReference(t *testing.T) {
	cases := []struct {
		name   string
		prefix []int
		grid   [3]int
		e      int
	}{
		{"e64_ragged", []int{70, 0, 5}, [3]int{5, 5, 6}, 64},
		{"e64_no_prefix", nil, [3]int{6, 5, 9}, 64},
		{"e256_ragged", []int{40, 3, 20}, [3]int{5, 9, 10}, 256},
	}
	for i, c := range cases {
		vc := newVSACase(t, c.prefix, c.grid, c.e, 2, 8, uint64(10+i))
		for _, mode := range []Mode{ModeExempt, ModeCompete} {
			for _, withGate := range []bool{false, true} {
				topK := max(1, vc.tl.NumVideo/3)
				var gate []float32
				if withGate {
					gate = vc.g
				}
				want := refVSA(vc, topK, mode, gate)
				for _, path := range []Path{PathExact, pathGathered} {
					got := vc.run(t, topK, mode, withGate, path)
					worst, scale := maxDiff(got, want)
					if worst > 1e-4*scale {
						t.Errorf("%s %v gate=%v path %d: max abs error %.3g (scale %.3g)", c.name, mode, withGate, path, worst, scale)
					}
				}
			}
		}
	}
}

// Sparsity 0 with a zero gate, and k = V, equal dense attention.
func TestSparseDenseLimits(t *testing.T) {
	vc := newVSACase(t, []int{70, 0, 5}, [3]int{5, 5, 6}, 64, 2, 8, 5)
	dense := refAttention(vc.q, vc.k, vc.v, 1, vc.tl.Rows(), vc.tl.Rows(), 2, 8, 1/math.Sqrt(8))
	k0 := TopKTiles(0, vc.tl.NumVideo)
	if k0 != vc.tl.NumVideo {
		t.Fatalf("sparsity 0 keeps %d of %d video tiles", k0, vc.tl.NumVideo)
	}
	zero := vc
	zero.g = make([]float32, len(vc.g))
	for _, path := range []Path{PathExact, pathGathered} {
		for _, withGate := range []bool{false, true} {
			got := zero.run(t, k0, ModeCompete, withGate, path)
			if worst, scale := maxDiff(got, dense); worst > 1e-5*scale {
				t.Errorf("path %d gate=%v: k = V differs from dense by %.3g", path, withGate, worst)
			}
		}
	}
	// k = V − 1 must actually be sparse (the test above would pass vacuously otherwise).
	got := vc.run(t, vc.tl.NumVideo-1, ModeExempt, false, PathExact)
	if worst, _ := maxDiff(got, dense); worst < 1e-3 {
		t.Errorf("k = V−1 matches dense (%.3g): the selection does nothing", worst)
	}
}

// The embedded Triton window kernel is whole, and where it cannot run the reason says so (the
// pure-Go backend has no fused path, attention it does not compute); Attend then takes the gathered
// tiles, which the window tests check.
func TestTritonWindowUnavailable(t *testing.T) {
	k, err := loadWindowTriton()
	if err != nil {
		t.Fatal(err)
	}
	if k.HeadDim != 128 || k.Tile != WindowTile || k.Plugin == "" || len(k.Bytecode()) < 1000 {
		t.Fatalf("window_triton.json: head %d, tile %d, plugin %q, %d IR bytes", k.HeadDim, k.Tile, k.Plugin, len(k.Bytecode()))
	}
	b := testutil.Backend(t)
	for _, c := range []struct {
		dt   dtypes.DType
		head int
		want string
	}{
		{dtypes.BFloat16, 128, "fused path"},
		{dtypes.Float32, 128, "dtype Float32"},
		{dtypes.BFloat16, 64, "head width 64"},
	} {
		if err := TritonWindow(b, c.dt, c.head); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s head %d: %v, want %q", c.dt, c.head, err, c.want)
		}
	}
}

// The embedded Triton kernels are whole, and where it cannot run the reason says so: on the pure-Go
// backend (no fused path), for attention it does not compute, and in a plain build or with another
// plugin (internal/xlaext). SparseTriton or SparseMosaic asked for where it cannot run fails the graph build; the
// default falls back to the gathered tiles with the same result as SparseGather.
func TestTritonVSAUnavailable(t *testing.T) {
	ks, err := loadVSAKernels()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]*tritonKernel{ks.fine, ks.pack}, ks.route...) {
		if k.HeadDim != 128 || k.Tile != 64 || k.Plugin == "" || len(k.Bytecode()) < 1000 {
			t.Fatalf("%s: head %d, tile %d, plugin %q, %d IR bytes", k.Name, k.HeadDim, k.Tile, k.Plugin, len(k.Bytecode()))
		}
	}
	// FastH3's and Wan 1.3B's tilings (289 and 624 tiles) take the select kernel.
	if k := ks.selectKernel(624); k == nil || k.Width < 624 {
		t.Fatalf("no select kernel for 624 tiles: %+v", k)
	}
	b := testutil.Backend(t)
	for _, c := range []struct {
		dt         dtypes.DType
		head, tile int
		want       string
	}{
		{dtypes.BFloat16, 128, 64, "fused path"},
		{dtypes.Float32, 128, 64, "dtype Float32"},
		{dtypes.BFloat16, 64, 64, "head width 64"},
		{dtypes.BFloat16, 128, 256, "tiles of 256 rows"},
	} {
		err := TritonVSA(b, c.dt, c.head, c.tile)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s head %d tile %d: %v, want %q", c.dt, c.head, c.tile, err, c.want)
		}
	}
	for _, name := range []string{"auto", "gather", "triton", "mosaic"} {
		if k, err := ParseSparseKernel(name); err != nil || k.String() != name {
			t.Errorf("%q: %v %v", name, k, err)
		}
	}
	if _, err := ParseSparseKernel("cuda"); err == nil || !strings.Contains(err.Error(), "auto, gather, triton or mosaic") {
		t.Errorf("unknown kernel: %v", err)
	}

	tl := mustTiling(t, []int{70}, [3]int{5, 6, 7}, 64)
	r := rand.New(rand.NewPCG(3, 4))
	qkv := make([]*tensors.Tensor, 3)
	for i := range qkv {
		qkv[i] = tensors.FromFlatDataAndDimensions(randn(r, tl.Rows()*2*8, 1), 1, tl.Rows(), 2, 8)
	}
	run := func(kernel SparseKernel) ([]float32, error) {
		ex, err := NewExec(b, func(q, k, v *Node) *Node {
			return Attend(q, k, v, Options{Path: pathGathered, Sparse: &Sparse{Tiling: tl, TopK: 3, Kernel: kernel}})
		})
		if err != nil {
			return nil, err
		}
		out, err := ex.Call1(qkv[0], qkv[1], qkv[2])
		if err != nil {
			return nil, err
		}
		return tensors.MustCopyFlatData[float32](out), nil
	}
	auto, err := run(SparseAuto)
	if err != nil {
		t.Fatal(err)
	}
	gather, err := run(SparseGather)
	if err != nil {
		t.Fatal(err)
	}
	testutil.AssertBitExact(t, "auto against gather", auto, gather)
	for _, kernel := range []SparseKernel{SparseTriton, SparseMosaic} {
		if _, err := run(kernel); err == nil || !strings.Contains(err.Error(), "VSA kernel "+kernel.String()+" was asked for") {
			t.Errorf("%s forced on the pure-Go backend: %v", kernel, err)
		}
	}
}

// TestKernelOffsetsBound: the kernels compute element offsets in int32, so an operand past 2^31−1
// elements is refused (the gathered path runs) instead of wrapping.
func TestKernelOffsetsBound(t *testing.T) {
	if err := addressable(math.MaxInt32, errTritonShape); err != nil {
		t.Errorf("2^31-1 elements: %v", err)
	}
	err := addressable(math.MaxInt32+1, errTritonShape)
	if !errors.Is(err, errTritonShape) || !strings.Contains(err.Error(), "2147483648 elements") {
		t.Errorf("2^31 elements: %v", err)
	}
}

// keyOrder hands the kernel each row's first counts key tiles grouped by the kernel file's classes
// (the tiles of more valid rows first), ascending within a group, with each group's end: checked
// against a plain sort on a tiling with edge tiles of every class and rows of random lengths.
func TestKeyOrder(t *testing.T) {
	k, err := loadVSATriton()
	if err != nil {
		t.Fatal(err)
	}
	tl, err := NewTiling([]int{29, 70}, [3]int{5, 6, 7}, 64)
	if err != nil {
		t.Fatal(err)
	}
	class := func(tile int32) int {
		c := 0
		for i, n := range k.KeyBlocks {
			if int(tl.Sizes[tile]) <= n {
				c = i
			}
		}
		return c
	}
	seen := map[int]bool{}
	for tile := range tl.Sizes {
		seen[class(int32(tile))] = true
	}
	if len(seen) != len(k.KeyBlocks) {
		t.Fatalf("the tiling's sizes %v cover classes %v of %v", tl.Sizes, seen, k.KeyBlocks)
	}
	nT, rows, stride := tl.NumTiles(), 40, 9
	r := rand.New(rand.NewPCG(3, 4))
	sel, counts := make([]int32, 0, rows*stride), make([]int32, rows)
	for i := range rows {
		counts[i] = int32(1 + r.IntN(stride))
		for _, tile := range r.Perm(nT)[:stride] {
			sel = append(sel, int32(tile))
		}
	}
	exec := MustNewExec(testutil.Backend(t), func(sel, counts *Node) []*Node {
		idx, ends := k.keyOrder(sel, counts, tl.Sizes)
		return []*Node{idx, ends}
	})
	out := exec.MustExec(tensors.FromFlatDataAndDimensions(sel, rows, stride), counts)
	idx, ends := tensors.MustCopyFlatData[int32](out[0]), tensors.MustCopyFlatData[int32](out[1])
	nc := len(k.KeyBlocks)
	for i := range rows {
		want := slices.Clone(sel[i*stride : i*stride+int(counts[i])])
		slices.SortFunc(want, func(a, b int32) int { return cmp.Or(cmp.Compare(class(a), class(b)), cmp.Compare(a, b)) })
		if got := idx[i*stride : i*stride+len(want)]; !slices.Equal(got, want) {
			t.Errorf("row %d: tiles %v, want %v", i, got, want)
		}
		for c := range nc {
			n := int32(0)
			for _, tile := range want {
				if class(tile) <= c {
					n++
				}
			}
			if got := ends[i*nc+c]; got != n {
				t.Errorf("row %d: group %d ends at %d, want %d", i, c, got, n)
			}
		}
	}
}

// A VSA kernel file must carry the operand layout this build passes: a fine kernel from before the
// gated epilogue (8 operands) or a select kernel of another layout is refused with the command that
// regenerates it, never launched with operands it does not read; the select kernels' widths ascend.
func TestParseVSAKernelFiles(t *testing.T) {
	parseFine := func(file string, data []byte) error { _, err := parseVSAFine(file, data); return err }
	parseSelect := func(file string, data []byte) error { _, err := parseVSASelect(file, data); return err }
	type refusal struct {
		key   string
		value any
		want  string
	}
	for _, f := range []struct {
		file     string
		data     []byte
		parse    func(string, []byte) error
		refusals []refusal
	}{
		{"vsa_triton.json", vsaTritonFile, parseFine, []refusal{
			{"operands", 8.0, "takes 8 operands, this build passes 10"},
			{"operands", nil, "takes 0 operands"},
			{"key_blocks", []any{32.0, 64.0}, "key blocks [32 64] must start at the tile"},
		}},
		{"vsa_select_triton.json", vsaSelectFile, parseSelect, []refusal{
			{"operands", 5.0, "takes 5 operands, this build passes 3; regenerate it with testdata/gen_vsa_select.py"},
			{"width", nil, "kernel 1 holds rows of 0 tiles; the widths must be positive and ascending"},
			{"width", 100000.0, "kernel 2 holds rows of 1024 tiles; the widths must be positive and ascending"},
			{"key_blocks", nil, "has no key blocks"},
		}},
	} {
		if err := f.parse(f.file, f.data); err != nil {
			t.Fatalf("the committed kernel file: %v", err)
		}
		for _, c := range f.refusals {
			// The select file is a list (one kernel a width): its second kernel is the one edited.
			var committed any
			if err := json.Unmarshal(f.data, &committed); err != nil {
				t.Fatal(err)
			}
			m, _ := committed.(map[string]any)
			if list, ok := committed.([]any); ok {
				m = list[1].(map[string]any)
			}
			if c.value == nil {
				delete(m, c.key)
			} else {
				m[c.key] = c.value
			}
			b, err := json.Marshal(committed)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.parse(f.file, b); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %s = %v: error %v, want one saying %q", f.file, c.key, c.value, err, c.want)
			}
		}
	}
	if err := parseSelect("vsa_select_triton.json", []byte("[]")); err == nil || !strings.Contains(err.Error(), "holds no kernel") {
		t.Errorf("an empty select file: %v", err)
	}
}

// TestUseKernelFile: a kernel file in place of the embedded one of its name is checked as the embedded one
// is, and a refused file or an unknown name leaves the kernels in use as they were.
func TestUseKernelFile(t *testing.T) {
	before, _ := loadVSATriton()
	bad := strings.Replace(string(vsaTritonFile), `"operands": 10`, `"operands": 8`, 1)
	if bad == string(vsaTritonFile) {
		t.Fatal(`the committed vsa_triton.json has no "operands": 10 to edit`)
	}
	if err := UseKernelFile("vsa_triton.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "takes 8 operands") {
		t.Errorf("a file of another operand count: %v", err)
	}
	if err := UseKernelFile("vsa_select_triton.json", vsaSelectFile); err == nil || !strings.Contains(err.Error(), "use vsa_triton.json or vsa_pack_triton.json") {
		t.Errorf("a file this build cannot take in place of its own: %v", err)
	}
	if after, _ := loadVSATriton(); after != before {
		t.Fatal("a refused file replaced the kernel in use")
	}
	for name, data := range map[string][]byte{"vsa_triton.json": vsaTritonFile, "vsa_pack_triton.json": vsaPackFile} {
		if err := UseKernelFile(name, data); err != nil {
			t.Fatalf("the embedded %s through UseKernelFile: %v", name, err)
		}
	}
	if _, err := loadVSAKernels(); err != nil {
		t.Fatalf("the embedded files through UseKernelFile: %v", err)
	}
}
