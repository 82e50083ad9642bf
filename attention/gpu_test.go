package attention

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
	"fastvideo/internal/xlaext"
)

// TestFusedMatchesExactOnGPU checks the cuDNN flash path against the exact path on the same bf16 inputs,
// including cross-attention (Lq != Lk): XLA's cuDNN flash lowering sizes its intermediate from the query
// length and does not check the key length, so that case is the one to test:
//
//	bash bench/build_gpu.sh -test .gpu/attention.test ./attention
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

// TestSparseFusedMatchesGatheredOnGPU checks the VSA fused path's fine-stage kernels (the Triton kernel,
// where it runs: 64-row tiles in the GPU build; the fused kernel on gathered tiles, pad slots masked by
// the extra score channel) against the same algorithm in exact float32 on the same bf16 inputs, for both
// tile sizes and modes, with the compression gate:
//
//	bash bench/build_gpu.sh -test .gpu/attention.test ./attention
//	FASTVIDEO_GPU_TEST=1 ./.gpu/attention.test -test.run 'OnGPU' -test.v
func TestSparseFusedMatchesGatheredOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	for _, e := range []int{64, 256} {
		for _, mode := range []Mode{ModeExempt, ModeCompete} {
			tl, err := NewTiling([]int{93, 0, 414}, [3]int{10, 15, 26}, e)
			if err != nil {
				t.Fatal(err)
			}
			const h, d = 4, 128
			q, k, v, g := randomBF16Inputs(rand.New(rand.NewPCG(9, uint64(e))), tl.Rows(), h, d)
			run := func(p Path, kernel SparseKernel) []float32 {
				ex := MustNewExec(b, func(q, k, v, g *Node) *Node {
					s := &Sparse{Tiling: tl, TopK: TopKTiles(0.9, tl.NumVideo), Mode: mode, Gate: g, Kernel: kernel}
					return ConvertDType(Attend(q, k, v, Options{Path: p, Sparse: s}), dtypes.Float32)
				})
				out, err := ex.Call1(q, k, v, g)
				if err != nil {
					t.Fatal(err)
				}
				return tensors.MustCopyFlatData[float32](out)
			}
			exact := run(pathGathered, SparseGather)
			kernels := []SparseKernel{SparseGather}
			if err := TritonVSA(b, dtypes.BFloat16, d, e); err == nil {
				kernels = append(kernels, SparseTriton)
			} else {
				t.Logf("E=%d: no Triton kernel: %v", e, err)
			}
			for _, kernel := range kernels {
				worst := testutil.MaxAbsDiff(run(PathFused, kernel), exact)
				t.Logf("E=%d %v %v: fused vs gathered exact: max abs diff %.3g", e, mode, kernel, worst)
				if worst > 3e-2 {
					t.Errorf("E=%d %v %v: fused sparse path differs by %.3g (> 3e-2)", e, mode, kernel, worst)
				}
			}
		}
	}
}

// TestTritonVSAMatchesUpstreamOnGPU runs the Triton fine-stage kernel on the inputs of upstream's
// block_sparse_attn_triton.py forward in testdata/gen_vsa_triton.py (ragged tiles, the video rows shuffled
// over the slots, a query tile that selects every key tile and one that selects one, several heads) and
// compares the video rows it writes with upstream's output and the float32 reference. The kernel walks
// each list grouped by class of key tile (keyOrder), upstream in ascending order, so the online softmax
// takes its steps in another order. The outputs are bfloat16 (a step is 2^-7 in [1, 2), 2^-8 below 1): within
// one step of upstream, two of the reference, a step taken at each value's magnitude (testutil.MaxBF16Steps).
func TestTritonVSAMatchesUpstreamOnGPU(t *testing.T) {
	b, kernels := vsaKernelsOnGPU(t)
	kernel := kernels.fine
	testutil.ForEachFixture(t, "vsa_triton", func(t *testing.T, fx *testutil.Fixture) {
		var first int
		if err := fx.DecodeConfig(&first, "prefix_tiles"); err != nil {
			t.Fatal(err)
		}
		q, shape := fx.F32(t, "q") // [1, H, S, D]
		k, _ := fx.F32(t, "k")
		v, _ := fx.F32(t, "v")
		lists, ls := fx.I64(t, "q2k_index") // [1, H, nT, K]
		counts, _ := fx.I64(t, "q2k_num")
		h, rows, d, nT, stride := shape[1], shape[2], shape[3], ls[2], ls[3]
		geo := fineGeometry{Rows: rows, First: first, Tiles: nT - first, Stride: stride,
			Sizes: int32s(fx.I64(t, "variable_block_sizes")), Slots: int32s(fx.I64(t, "slots"))}
		for _, row := range geo.Slots {
			geo.Seq = max(geo.Seq, int(row)+1)
		}
		var idx, num []int32
		for hh := range h {
			for tile := first; tile < nT; tile++ {
				num = append(num, int32(counts[hh*nT+tile]))
				for j := range stride {
					idx = append(idx, int32(max(0, lists[(hh*nT+tile)*stride+j])))
				}
			}
		}
		ex := MustNewExec(b, func(q, k, v *Node) *Node {
			g := q.Graph()
			bf := func(x *Node) *Node { return Reshape(ConvertDType(x, dtypes.BFloat16), h*rows, d) }
			lists, ends := kernel.keyOrder(Reshape(Const(g, idx), h*geo.Tiles, stride), Const(g, num), geo.Sizes)
			out, err := kernel.call(geo, ends, lists, bf(q), bf(k), bf(v), nil, nil)
			if err != nil {
				panic(err)
			}
			return ConvertDType(out, dtypes.Float32)
		})
		in := func(x []float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, shape...) }
		out, err := ex.Call1(in(q), in(k), in(v))
		if err != nil {
			t.Fatal(err)
		}
		// The written rows, laid out as upstream's [H, V·64, D] at the valid slots (zero at the pads).
		written := tensors.MustCopyFlatData[float32](out) // [Seq·H, D]
		videoSlots := geo.Slots[first*64:]
		var got, upstream, reference []float32
		up, _ := fx.F32(t, "out_upstream")
		ref, _ := fx.F32(t, "out_reference")
		for hh := range h {
			for i, row := range videoSlots {
				if row < 0 {
					continue
				}
				at := (hh*len(videoSlots) + i) * d
				got = append(got, written[(int(row)*h+hh)*d:][:d]...)
				upstream = append(upstream, up[at:at+d]...)
				reference = append(reference, ref[at:at+d]...)
			}
		}
		if e, n := testutil.MaxAbsDiff(got, upstream), testutil.MaxBF16Steps(got, upstream); n > 1 {
			t.Errorf("against upstream's kernel: max abs diff %.3g, %.3g bf16 steps (> 1)", e, n)
		} else {
			t.Logf("against upstream's kernel: max abs diff %.3g (%.3g bf16 steps) over %d rows", e, n, len(got)/d)
		}
		if e, n := testutil.MaxAbsDiff(got, reference), testutil.MaxBF16Steps(got, reference); n > 2 {
			t.Errorf("against the float32 reference: max abs diff %.3g, %.3g bf16 steps (> 2)", e, n)
		} else {
			t.Logf("against the float32 reference: max abs diff %.3g (%.3g bf16 steps)", e, n)
		}
	})
}

// vsaKernelsOnGPU is the GPU backend and the VSA kernels, which the GPU build must have there.
func vsaKernelsOnGPU(t *testing.T) (compute.Backend, *vsaKernels) {
	b := testutil.GPUBackend(t, "xla:cuda")
	if err := TritonVSA(b, dtypes.BFloat16, 128, 64); err != nil {
		t.Fatalf("the GPU build on xla:cuda has no Triton VSA kernels: %v", err)
	}
	ks, err := loadVSAKernels()
	if err != nil {
		t.Fatal(err)
	}
	return b, ks
}

func int32s(x []int64, _ []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

// TestTritonPackOnGPU runs the pack kernel on a tiling with prefix segments and edge tiles of every size
// class, several heads, and compares with the XLA ops it replaces on the same backend (tileRows, the
// head-major transpose, poolTiles: tested against upstream's fixtures on the CPU): the copies bit for
// bit, the float32 means to 1e-5 (the kernel sums the 64 slots in another order).
func TestTritonPackOnGPU(t *testing.T) {
	b, kernels := vsaKernelsOnGPU(t)
	pack := kernels.pack
	tl, err := NewTiling([]int{93, 0, 414}, [3]int{10, 15, 26}, 64)
	if err != nil {
		t.Fatal(err)
	}
	const h, d = 3, 128
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]bfloat16.BFloat16, tl.Rows()*h*d)
	for i := range x {
		x[i] = bfloat16.FromFloat32(float32(r.NormFloat64()))
	}
	ex := MustNewExec(b, func(x *Node) []*Node {
		packed, pooled := pack.pack(x, Const(x.Graph(), kernelSlots(tl)), tl)
		xt := tileRows(x, tl)
		want := Reshape(TransposeAllAxes(xt, 2, 0, 1, 3), h*tl.NumTiles()*tl.TileElems, d)
		return []*Node{ConvertDType(packed, dtypes.Float32), pooled, ConvertDType(want, dtypes.Float32), poolTiles(xt, tl)}
	})
	out := ex.MustExec(tensors.FromFlatDataAndDimensions(x, 1, tl.Rows(), h, d))
	flat := func(i int) []float32 { return tensors.MustCopyFlatData[float32](out[i]) }
	testutil.AssertBitExact(t, "tile copies against tileRows", flat(0), flat(2))
	want := flat(3)
	tol := 1e-5 * math.Max(1, testutil.MaxAbs(want))
	if e := testutil.MaxAbsDiff(flat(1), want); e > tol {
		t.Errorf("tile means against poolTiles: max abs diff %.3g (> %.3g)", e, tol)
	} else {
		t.Logf("tile means against poolTiles: max abs diff %.3g", e)
	}
}

// TestTritonWindowOnGPU runs Attend with a window through the Triton window kernel on every case of
// testdata/gen_window_triton.py (ragged last tile, a window narrower than a tile, sink tiles inside and
// outside the band; a window covering the sequence takes the dense path) and compares with the
// kernel's output as JAX ran it (the same IR on the same inputs: bit for bit) and with the float32
// masked attention (two bfloat16 steps at magnitude 1):
//
//	bash bench/build_gpu.sh -test .gpu/attention.test ./attention
//	cd attention && FASTVIDEO_GPU_TEST=1 ../.gpu/attention.test -test.run TestTritonWindowOnGPU -test.v
func TestTritonWindowOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	if err := TritonWindow(b, dtypes.BFloat16, 128); err != nil {
		t.Fatalf("the GPU build on xla:cuda has no Triton window kernel: %v", err)
	}
	testutil.ForEachFixture(t, "window_triton", func(t *testing.T, fx *testutil.Fixture) {
		var cases []struct {
			Name              string
			Seq, Window, Sink int
			Heads             int
		}
		if err := fx.DecodeConfig(&cases, "cases"); err != nil || len(cases) == 0 {
			t.Fatalf("cases: %v (%d)", err, len(cases))
		}
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				q, shape := fx.F32(t, c.Name+".q") // [1, S, H, D]
				k, _ := fx.F32(t, c.Name+".k")
				v, _ := fx.F32(t, c.Name+".v")
				w := Window{Tokens: c.Window, Sink: c.Sink}
				if shape[1] != c.Seq {
					t.Fatalf("q %v, the case says %d rows", shape, c.Seq)
				}
				ex := MustNewExec(b, func(q, k, v *Node) *Node {
					bf := func(x *Node) *Node { return ConvertDType(x, dtypes.BFloat16) }
					return ConvertDType(Attend(bf(q), bf(k), bf(v), Options{Window: &w}), dtypes.Float32)
				})
				in := func(x []float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, shape...) }
				out, err := ex.Call1(in(q), in(k), in(v))
				if err != nil {
					t.Fatal(err)
				}
				got := tensors.MustCopyFlatData[float32](out)
				reference, _ := fx.F32(t, c.Name+".out_reference")
				if e, n := testutil.MaxAbsDiff(got, reference), testutil.MaxBF16Steps(got, reference); n > 2 {
					t.Errorf("against the float32 masked attention: max abs diff %.3g, %.3g bf16 steps (> 2)", e, n)
				} else {
					t.Logf("against the float32 masked attention: max abs diff %.3g (%.3g bf16 steps)", e, n)
				}
				if w.Dense(c.Seq) {
					return // the dense path ran, not the kernel
				}
				kernel, _ := fx.F32(t, c.Name+".out_kernel")
				if e := testutil.MaxAbsDiff(got, kernel); e != 0 {
					t.Errorf("against the kernel as JAX ran it: max abs diff %.3g, want 0 (the same IR on the same inputs)", e)
				}
			})
		}
	})
}

// TestTritonSelectOnGPU runs the select kernel on routing scores with heavy ties and signed zeros and
// compares its lists with the XLA sorts it replaces on the same backend (keyOrder of selectTiles, tested
// against upstream's fixtures on the CPU), entry for entry: both modes, tilings with and without prefix
// tiles and with edge tiles of every class, one key tile kept, and a tiling of 1,440 tiles:
//
//	bash bench/build_gpu.sh -test .gpu/attention.test ./attention
//	FASTVIDEO_GPU_TEST=1 ./.gpu/attention.test -test.run TestTritonSelectOnGPU -test.v
func TestTritonSelectOnGPU(t *testing.T) {
	b, kernels := vsaKernelsOnGPU(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		prefix []int
		grid   [3]int
		topK   int
		mode   Mode
	}{
		{[]int{93, 0, 414}, [3]int{37, 15, 26}, 28, ModeExempt}, // FastH3's tiling at 480x832x124
		{[]int{93, 0, 414}, [3]int{37, 15, 26}, 28, ModeCompete},
		{[]int{29, 70}, [3]int{5, 6, 7}, 1, ModeExempt},
		{nil, [3]int{21, 30, 52}, 125, ModeExempt},  // Wan 1.3B at 480x832x81
		{nil, [3]int{21, 45, 80}, 180, ModeCompete}, // Wan at 720x1280x81
	} {
		tl, err := NewTiling(c.prefix, c.grid, 64)
		if err != nil {
			t.Fatal(err)
		}
		s := &Sparse{Tiling: tl, TopK: c.topK, Mode: c.mode}
		const h = 3
		nT := tl.NumTiles()
		scores := make([]float32, h*nT*nT)
		for i := range scores {
			scores[i] = float32(math.Round(r.NormFloat64()*2)) / 4
			if scores[i] == 0 && r.IntN(2) == 0 {
				scores[i] = float32(math.Copysign(0, -1))
			}
		}
		ex := MustNewExec(b, func(scores *Node) []*Node {
			idx, ends := kernels.routes(scores, s)
			sel := selectTiles(scores, s)
			wantIdx, wantEnds := kernels.fine.keyOrder(Reshape(sel, h*tl.NumVideo, tl.KeyTiles(s.TopK)), nil, tl.Sizes)
			return []*Node{idx, ends, wantIdx, wantEnds}
		})
		out := ex.MustExec(tensors.FromFlatDataAndDimensions(scores, h, nT, nT))
		got := func(i int) []int32 { return tensors.MustCopyFlatData[int32](out[i]) }
		for i, name := range []string{"key tiles", "group ends"} {
			kernel, want := got(i), got(i+2)
			if len(kernel) != len(want) {
				t.Fatalf("tiles %d: the kernel gave %d %s, XLA's sorts %d", nT, len(kernel), name, len(want))
			}
			if !slices.Equal(kernel, want) {
				at := 0
				for kernel[at] == want[at] {
					at++
				}
				t.Errorf("tiles %d, prefix %d, top %d, %s: the kernel's %s differ from XLA's sorts first at entry %d: %d, want %d",
					nT, tl.NumPrefix, c.topK, c.mode, name, at, kernel[at], want[at])
			}
		}
		t.Logf("tiles %d, prefix %d, top %d, %s: %d lists the same", nT, tl.NumPrefix, c.topK, c.mode, h*tl.NumVideo)
	}
}

// TestSparseMosaicOnGPU checks the Mosaic GPU fine stage (SparseMosaic: the template instantiated at the
// geometry, its tile rows gathered into the sequence with the compression branch) against the same
// algorithm in exact float32 and beside the Triton kernel, at FastH3's tiling (289 tiles, 9 of them prefix)
// with 12 heads, a geometry within those the template was checked at, both modes, with the gate:
//
//	bash bench/build_gpu.sh -test .gpu/attention.test ./attention
//	FASTVIDEO_GPU_TEST=1 ./.gpu/attention.test -test.run TestSparseMosaicOnGPU -test.v
func TestSparseMosaicOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	const h, d = 12, 128
	tl, err := NewTiling([]int{93, 414}, [3]int{37, 15, 26}, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := MosaicVSA(b, dtypes.BFloat16, h, d, tl, TopKTiles(0.9, tl.NumVideo)); err != nil {
		t.Fatalf("the GPU build on xla:cuda has no Mosaic fine stage at FastH3's tiling: %v", err)
	}
	q, k, v, g := randomBF16Inputs(rand.New(rand.NewPCG(10, 64)), tl.Rows(), h, d)
	for _, mode := range []Mode{ModeExempt, ModeCompete} {
		run := func(p Path, kernel SparseKernel) []float32 {
			ex := MustNewExec(b, func(q, k, v, g *Node) *Node {
				s := &Sparse{Tiling: tl, TopK: TopKTiles(0.9, tl.NumVideo), Mode: mode, Gate: g, Kernel: kernel, HeadChunk: 2}
				return ConvertDType(Attend(q, k, v, Options{Path: p, Sparse: s}), dtypes.Float32)
			})
			out, err := ex.Call1(q, k, v, g)
			if err != nil {
				t.Fatal(err)
			}
			return tensors.MustCopyFlatData[float32](out)
		}
		exact, mosaic, triton := run(pathGathered, SparseGather), run(PathFused, SparseMosaic), run(PathFused, SparseTriton)
		worst, besideTriton := testutil.MaxAbsDiff(mosaic, exact), testutil.MaxAbsDiff(mosaic, triton)
		t.Logf("%v: Mosaic vs gathered exact: max abs diff %.3g; vs the Triton kernel %.3g (Triton vs exact %.3g)",
			mode, worst, besideTriton, testutil.MaxAbsDiff(triton, exact))
		if worst > 3e-2 {
			t.Errorf("%v: the Mosaic fine stage differs from exact by %.3g (> 3e-2, the fused paths' bound)", mode, worst)
		}
	}
}

// TestVSAMosaicMatchesJAXOnGPU runs the embedded template, instantiated by Go at the fixture's geometry (none
// of the geometries it was fitted on), on the inputs of testdata/gen_vsa_mosaic.py: the output must equal
// JAX's run of the same text bit for bit (the same module on the same inputs), and stay within two bf16
// steps of the float32 reference (the generator found JAX's output equal to upstream's Triton forward there):
//
//	bash bench/build_gpu.sh -test .gpu/attention.test ./attention
//	FASTVIDEO_GPU_TEST=1 ./.gpu/attention.test -test.run TestVSAMosaicMatchesJAXOnGPU -test.v
func TestVSAMosaicMatchesJAXOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	m, err := loadVSAMosaic()
	if err != nil {
		t.Fatal(err)
	}
	testutil.ForEachPendingFixture(t, "vsa_mosaic", "attention/testdata/gen_vsa_mosaic.py", func(t *testing.T, fx *testutil.Fixture) {
		q, qs := fx.F32(t, "q") // [H, S, D]
		k, _ := fx.F32(t, "k")
		v, _ := fx.F32(t, "v")
		idx, is := fx.I64(t, "idx") // [H, V, K]
		num, _ := fx.I64(t, "num")
		valid, _ := fx.I64(t, "valid")
		first, _ := fx.I64(t, "first")
		want, ws := fx.F32(t, "out_kernel") // [H, V·64, D]
		ref, _ := fx.F32(t, "out_reference")
		h, s, nV, stride := qs[0], qs[1], is[1], is[2]
		params := map[string]int{"H": h, "T": s / m.Tile, "V": nV, "K": stride}
		if err := m.tmpl.Covers(params); err != nil {
			t.Fatal(err)
		}
		module, err := m.tmpl.Instantiate(params)
		if err != nil {
			t.Fatal(err)
		}
		ex := MustNewExec(b, func(in []*Node) *Node { // q, k, v, idx, num, valid, first
			for i := range 3 {
				in[i] = ConvertDType(in[i], dtypes.BFloat16)
			}
			out, err := xlaext.MosaicGPUCall(xlaext.MosaicGPUKernel{Name: "vsa_mosaic", Module: module},
				in, []shapes.Shape{shapes.Make(dtypes.BFloat16, ws...)})
			if err != nil {
				panic(err)
			}
			return ConvertDType(out[0], dtypes.Float32)
		})
		f32 := func(x []float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, qs...) }
		i32 := func(x []int64, dims ...int) *tensors.Tensor {
			return tensors.FromFlatDataAndDimensions(int32s(x, nil), dims...)
		}
		out, err := ex.Call1(f32(q), f32(k), f32(v), i32(idx, is...), i32(num, h, nV), i32(valid, is...), i32(first, 1))
		if err != nil {
			t.Fatal(err)
		}
		got := tensors.MustCopyFlatData[float32](out)
		testutil.AssertBitExact(t, "the Go graph's run of the instantiated template against JAX's", got, want)
		if e, n := testutil.MaxAbsDiff(got, ref), testutil.MaxBF16Steps(got, ref); n > 2 {
			t.Errorf("against the float32 reference: max abs diff %.3g, %.3g bf16 steps (> 2)", e, n)
		} else {
			t.Logf("H %d, %d tiles, %d listed, lists of %d, first %d: equal to JAX's; against the float32 reference max abs diff %.3g (%.3g bf16 steps)",
				h, s/m.Tile, nV, stride, first[0], e, n)
		}
	})
}

// randomBF16Inputs are q, k, v and gate [1, rows, h, d] of N(0, 1) values in bf16, drawn from r in turn.
func randomBF16Inputs(r *rand.Rand, rows, h, d int) (q, k, v, gate *tensors.Tensor) {
	mk := func() *tensors.Tensor {
		x := make([]bfloat16.BFloat16, rows*h*d)
		for i := range x {
			x[i] = bfloat16.FromFloat32(float32(r.NormFloat64()))
		}
		return tensors.FromFlatDataAndDimensions(x, 1, rows, h, d)
	}
	return mk(), mk(), mk(), mk()
}
