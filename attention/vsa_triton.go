package attention

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/xlaext"
)

// VSA on the GPU as two Triton kernels (testdata/gen_vsa_triton.py writes vsa_triton.json and
// vsa_pack_triton.json). The pack kernel copies q, k and v into tile-padded, head-major buffers and takes
// each tile's mean for the routing in the same pass. The fine kernel's (64-row video query tile, head)
// programs walk their selected key tiles and read each K and V tile in place, as upstream's
// fastvideo-kernel block_sparse_attn_triton.py does, instead of gathering copies of them, and write the
// output rows straight into the sequence's layout. The kernels read the geometry from operands, so one IR
// serves every sequence of head width 128 and 64-row tiles; they need the GPU build's Triton custom call
// and the CUDA plugin they were made with.

// SparseKernel chooses how the fine stage of block-sparse attention runs on the fused path.
type SparseKernel int

const (
	// SparseAuto (the zero value): the Triton kernel where it can run, the gathered tiles otherwise.
	SparseAuto SparseKernel = iota
	// SparseGather gathers the selected K/V tiles with XLA ops and runs the fused kernel on them.
	SparseGather
	// SparseTriton forces the Triton kernel; building the graph fails where it cannot run.
	SparseTriton
	// SparseMosaic runs the fine stage as the Mosaic GPU kernel (vsa_mosaic.go; Hopper), the Triton kernels
	// still making the tile copies and the routing; building the graph fails where it cannot run. Opt-in:
	// FastH3's DiT forward runs no faster with it than with the Triton kernel (BENCHMARKS.md, session 32).
	SparseMosaic
)

// String returns the name ParseSparseKernel reads.
func (k SparseKernel) String() string {
	switch k {
	case SparseGather:
		return "gather"
	case SparseTriton:
		return "triton"
	case SparseMosaic:
		return "mosaic"
	}
	return "auto"
}

// ParseSparseKernel parses "auto" (or ""), "gather", "triton" and "mosaic".
func ParseSparseKernel(s string) (SparseKernel, error) {
	switch s {
	case "", "auto":
		return SparseAuto, nil
	case "gather":
		return SparseGather, nil
	case "triton":
		return SparseTriton, nil
	case "mosaic":
		return SparseMosaic, nil
	}
	return SparseAuto, fmt.Errorf("attention: VSA kernel %q is not known; use auto, gather, triton or mosaic", s)
}

//go:embed vsa_triton.json
var vsaTritonFile []byte

//go:embed vsa_pack_triton.json
var vsaPackFile []byte

// tritonKernel is a kernel file (vsa_triton.json, window_triton.json): the kernel and what it was
// made with.
type tritonKernel struct {
	xlaext.TritonRecord
	Name    string `json:"name"`
	HeadDim int    `json:"head_dim"`
	Tile    int    `json:"tile"`
	// KeyBlocks are the K/V block rows of each class of key tile the VSA kernel walks, largest (Tile)
	// first: a tile belongs to the last class whose block holds its valid rows.
	KeyBlocks []int `json:"key_blocks"`
	// Operands is the number of operands the kernel takes (the VSA kernels; checked against what this
	// build passes).
	Operands int `json:"operands"`
	// Width is the most key tiles a row of the select kernel holds (vsa_select_triton.json only).
	Width  int    `json:"width"`
	JAX    string `json:"jax"`
	Plugin string `json:"plugin"`
}

// parseTritonKernel reads the kernel file named file.
func parseTritonKernel(file string, data []byte) (*tritonKernel, error) {
	k := &tritonKernel{}
	if err := json.Unmarshal(data, k); err != nil {
		return nil, fmt.Errorf("attention: %s: %w", file, err)
	}
	if err := k.Decode(); err != nil || k.Name == "" || k.HeadDim <= 0 || k.Tile <= 0 {
		return nil, fmt.Errorf("attention: %s is incomplete (name %q, head width %d, tile %d; %v)", file, k.Name, k.HeadDim, k.Tile, err)
	}
	return k, nil
}

var loadVSATriton = sync.OnceValues(func() (*tritonKernel, error) {
	return parseVSAFine("vsa_triton.json", vsaTritonFile)
})

// parseVSAFine reads the fine kernel's file.
func parseVSAFine(file string, data []byte) (*tritonKernel, error) {
	return parseVSAKernel(file, data, vsaFineOperands, "gen_vsa_triton.py")
}

// parseVSAKernel reads a VSA kernel record that walks key classes: a tritonKernel with its key classes,
// refused unless it takes the operands this build passes, naming testdata/generator, which makes it.
func parseVSAKernel(file string, data []byte, operands int, generator string) (*tritonKernel, error) {
	k, err := parseTritonKernel(file, data)
	if err != nil {
		return nil, err
	}
	if err := k.checkKeyBlocks(file); err != nil {
		return nil, err
	}
	if k.Operands != operands {
		return nil, fmt.Errorf("attention: %s's kernel takes %d operands, this build passes %d; regenerate it with testdata/%s", file, k.Operands, operands, generator)
	}
	return k, nil
}

var loadVSAPack = sync.OnceValues(func() (*tritonKernel, error) {
	return parseTritonKernel("vsa_pack_triton.json", vsaPackFile)
})

//go:embed vsa_select_triton.json
var vsaSelectFile []byte

var loadVSASelect = sync.OnceValues(func() ([]*tritonKernel, error) {
	return parseVSASelect("vsa_select_triton.json", vsaSelectFile)
})

// UseKernelFile makes this process run the kernel of data, a VSA kernel file testdata/gen_vsa_triton.py has
// just written (file names the embedded file it replaces: vsa_triton.json or vsa_pack_triton.json), in
// place of the embedded one: a kernel is tested and timed on the GPU machine before it is committed. Call
// it before any graph is built.
func UseKernelFile(file string, data []byte) error {
	var parse func(string, []byte) (*tritonKernel, error)
	var load *func() (*tritonKernel, error)
	switch file {
	case "vsa_triton.json":
		parse, load = parseVSAFine, &loadVSATriton
	case "vsa_pack_triton.json":
		parse, load = parseTritonKernel, &loadVSAPack
	default:
		return fmt.Errorf("attention: %q is not a kernel file this build can take in place of its own; use vsa_triton.json or vsa_pack_triton.json", file)
	}
	k, err := parse(file, data)
	if err != nil {
		return err
	}
	*load = func() (*tritonKernel, error) { return k, nil }
	return nil
}

// checkKeyBlocks: the classes start at a whole tile and shrink, each block at least the 16 rows of a
// tensor-core product.
func (k *tritonKernel) checkKeyBlocks(file string) error {
	for i, n := range k.KeyBlocks {
		if n < 16 || i == 0 && n != k.Tile || i > 0 && n >= k.KeyBlocks[i-1] {
			return fmt.Errorf("attention: %s: key blocks %v must start at the tile (%d) and shrink to no less than 16", file, k.KeyBlocks, k.Tile)
		}
	}
	if len(k.KeyBlocks) == 0 {
		return fmt.Errorf("attention: %s has no key blocks", file)
	}
	return nil
}

// covers reports whether kernel k (loaded with err) computes attention of dtype with heads of
// headDim: bf16 and the kernel's head width; notCovered wraps what it does not compute.
func covers(k *tritonKernel, err error, dtype dtypes.DType, headDim int, notCovered error) error {
	switch {
	case err != nil:
		return err
	case dtype != dtypes.BFloat16:
		return fmt.Errorf("%w: dtype %s (it takes bfloat16)", notCovered, dtype)
	case headDim != k.HeadDim:
		return fmt.Errorf("%w: head width %d (it takes %d)", notCovered, headDim, k.HeadDim)
	}
	return nil
}

// runsOn reports whether kernel k can run on backend: the fused path's conditions (XLA's CUDA
// plugin) and the plugin the kernel was made with.
func (k *tritonKernel) runsOn(backend compute.Backend, dtype dtypes.DType, headDim int) error {
	if fused, why := fusedAvailable(backend, dtype, headDim); !fused {
		return fmt.Errorf("the fused path cannot run: %s", why)
	}
	return xlaext.Compatible(backend, k.Plugin)
}

// checkScale: the kernels have the scale 1/sqrt(head width) compiled in.
func (k *tritonKernel) checkScale(scale float64, notCovered error) error {
	if math.Abs(scale*math.Sqrt(float64(k.HeadDim))-1) > 1e-9 {
		return fmt.Errorf("%w: scale %g (it computes 1/sqrt(%d))", notCovered, scale, k.HeadDim)
	}
	return nil
}

// BlockSparseKernel reports whether this build has a kernel that reads only the selected K/V tiles in
// place: the GPU build (bash bench/build_gpu.sh), whose graphs can call the embedded Triton kernel. It
// runs where TritonVSA allows (XLA's CUDA plugin it was made with, bf16, head width 128, 64-row
// tiles); there VSA measured faster than dense fused attention, and slower on gathered tiles
// (BENCHMARKS.md, "Video Sparse Attention"). The families default to VSA only where this holds. It
// loads the kernel files as TritonVSA does, all three checked to be made together.
func BlockSparseKernel() bool {
	_, err := loadVSAKernels()
	return err == nil && xlaext.GraphBackendCall()
}

// errTritonShape: the attention is not one the kernel computes.
var errTritonShape = errors.New("the Triton VSA kernel does not cover this attention")

// TritonVSA reports whether the Triton fine-stage kernel can run on backend for attention of dtype with
// heads of headDim and tiles of tileElems rows (nil: it can, subject to the backend being XLA's CUDA
// plugin), and why not otherwise. Plans call it to say which kernel runs; Attend decides the same way.
func TritonVSA(backend compute.Backend, dtype dtypes.DType, headDim, tileElems int) error {
	ks, err := loadVSAKernels()
	if err != nil {
		return err
	}
	for _, k := range []*tritonKernel{ks.pack, ks.fine} {
		if err := covers(k, nil, dtype, headDim, errTritonShape); err != nil {
			return err
		}
	}
	if tileElems != ks.fine.Tile {
		return fmt.Errorf("%w: tiles of %d rows (it takes %d; use a VSA tile size of %d)", errTritonShape, tileElems, ks.fine.Tile, ks.fine.Tile)
	}
	return ks.fine.runsOn(backend, dtype, headDim)
}

// vsaKernels are the kernels of VSA's Triton path: the tile copies and means, the routing's selection (one
// kernel a row width, narrowest first) and the fine stage.
type vsaKernels struct {
	pack, fine *tritonKernel
	route      []*tritonKernel
	// mosaic, when set, runs the fine stage in fine's place (SparseMosaic).
	mosaic *mosaicKernel
}

// sparseKernels returns the kernels attendSparse runs q through on path (nil: the XLA ops): where they
// can run, on the fused path or when asked for; asked for where they cannot, building the graph fails.
func sparseKernels(q *Node, s *Sparse, scale float64, path Path) *vsaKernels {
	if s.Kernel != SparseTriton && s.Kernel != SparseMosaic && (path != PathFused || s.Kernel != SparseAuto) {
		return nil
	}
	kernels, err := tritonEligible(q, s, scale)
	if err == nil && s.Kernel == SparseMosaic {
		kernels, err = kernels.withMosaic(q, s)
	}
	if err != nil && s.Kernel != SparseAuto {
		panic(fmt.Errorf("attention: VSA kernel %s was asked for: %w", s.Kernel, err))
	}
	return kernels
}

// withMosaic is ks with the Mosaic fine stage for q's graph and tiling, or why it cannot run.
func (ks *vsaKernels) withMosaic(q *Node, s *Sparse) (*vsaKernels, error) {
	m, err := mosaicFor(q.Graph().Backend(), q.DType(), q.Shape().Dim(2), q.Shape().Dim(3), s.Tiling, s.TopK)
	if err != nil {
		return nil, err
	}
	with := *ks
	with.mosaic = m
	return &with, nil
}

// attend is attendSparse through the kernels: the pack kernel makes the tile copies and means of q, k and
// v, the routing selects each video query tile's key tiles, the fine kernel writes the video rows of the
// output in place, and the prefix rows attend every row densely.
func (ks *vsaKernels) attend(q, k, v *Node, s *Sparse, scale float64, path Path) *Node {
	t := s.Tiling
	slotMap := kernelSlots(t)
	slots := Const(q.Graph(), slotMap)
	qh, qp := ks.pack.pack(q, slots, t)
	kh, kp := ks.pack.pack(k, slots, t)
	vh, vp := ks.pack.pack(v, slots, t)
	scores := tileScores(qp, kp) // [H, nT, nT]
	idx, ends := ks.routes(scores, s)
	h, d := q.Shape().Dim(2), q.Shape().Dim(3)
	var gate, oc *Node
	if s.Gate != nil {
		// The kernel adds the compression branch to the rows it writes (the IR takes q's dtype).
		oc = compression(scores, vp)
		gate = Reshape(ConvertDType(s.Gate, q.DType()), t.Rows()*h, d)
	}
	var out *Node
	var err error
	if ks.mosaic != nil {
		out, err = ks.mosaic.fine(t, qh, kh, vh, idx, ends, gate, flatTiles(oc), len(ks.fine.KeyBlocks))
	} else {
		out, err = ks.fine.call(fineGeometryOf(t, t.KeyTiles(s.TopK), slotMap), ends, idx, qh, kh, vh, gate, flatTiles(oc))
	}
	if err != nil {
		panic(fmt.Errorf("attention: VSA kernel: %w", err))
	}
	out = Reshape(out, 1, t.Rows(), h, d)
	if p := t.PrefixRows(); p > 0 {
		// The kernel leaves the prefix rows to this update, which XLA makes in the kernel's buffer.
		prefix := denseAttend(Slice(q, AxisRange(), AxisRange(0, p)), k, v, scale, prefixPath(path == PathFused))
		if oc != nil {
			prefix = addCompression(prefix, oc, Slice(s.Gate, AxisRange(), AxisRange(0, p)), t.RowTiles()[:p])
		}
		zero := ScalarZero(q.Graph(), dtypes.Int32)
		out = DynamicUpdateSlice(out, ConvertDType(prefix, out.DType()), []*Node{zero, zero, zero, zero})
	}
	return out
}

// flatTiles is oc [nT, H, D] as the fine kernel reads it, [nT·H, D] (nil stays nil).
func flatTiles(oc *Node) *Node {
	if oc == nil {
		return nil
	}
	return Reshape(oc, oc.Shape().Dim(0)*oc.Shape().Dim(1), oc.Shape().Dim(2))
}

// pack runs the pack kernel k on x [1, L, H, D] with the tiling's slot map slots (kernelSlots): the
// tile-padded, head-major copy [H·nT·E, D] (zero pads) and each tile's float32 mean over its valid rows
// [nT, H, D] (poolTiles).
func (k *tritonKernel) pack(x, slots *Node, t *Tiling) (packed, pooled *Node) {
	g := x.Graph()
	h, d, nT := x.Shape().Dim(2), x.Shape().Dim(3), t.NumTiles()
	out, err := xlaext.TritonCall(k.Launch(k.Name, [3]int{nT, h, 1}), []*Node{Const(g, []int32{int32(h), int32(nT)}), slots, Reshape(x, t.Rows()*h, d)},
		[]shapes.Shape{shapes.Make(x.DType(), h*nT*t.TileElems, d), shapes.Make(dtypes.Float32, nT*h, d)})
	if err != nil {
		panic(fmt.Errorf("attention: VSA pack kernel: %w", err))
	}
	return out[0], Reshape(out[1], nT, h, d)
}

// kernelSlots is the tiling's slot map as the kernels read it: the sequence row of each slot, -1 for a pad.
func kernelSlots(t *Tiling) []int32 {
	slots, pad := t.SlotRows(), int32(t.Rows())
	for i, row := range slots {
		if row == pad {
			slots[i] = -1
		}
	}
	return slots
}

// fineGeometry is what the fine kernel reads of a tiling besides the lists: Rows a head in the tile
// buffers, the First query tile, the query Tiles, the list Stride, the sequence's rows Seq, each tile's
// valid rows Sizes and the slot map Slots (kernelSlots).
type fineGeometry struct {
	Rows, First, Tiles, Stride, Seq int
	Sizes, Slots                    []int32
}

// fineGeometryOf is the fine kernel's geometry of tiling t with lists of stride key tiles and the slot
// map slots (kernelSlots).
func fineGeometryOf(t *Tiling, stride int, slots []int32) fineGeometry {
	return fineGeometry{Rows: t.NumTiles() * t.TileElems, First: t.NumPrefix, Tiles: t.NumVideo, Stride: stride, Seq: t.Rows(),
		Sizes: t.Sizes, Slots: slots}
}

// keyClasses is each tile's class of KeyBlocks: the last whose block holds its valid rows (sizes).
func (k *tritonKernel) keyClasses(sizes []int32) []int32 {
	classes := make([]int32, len(sizes))
	for i, size := range sizes {
		for c, n := range k.KeyBlocks {
			if int(size) <= n {
				classes[i] = int32(c)
			}
		}
	}
	return classes
}

// keyOrder arranges the key tile lists sel [R, K] (int32; the first counts [R] of each row, or all of
// them when counts is nil) as the kernel walks them: grouped by class of KeyBlocks, ascending within a
// group, as [R·K], with the end of each row's groups [R·C]. sizes are the tiles' valid rows.
func (k *tritonKernel) keyOrder(sel, counts *Node, sizes []int32) (idx, ends *Node) {
	g := sel.Graph()
	r, kk, nT := sel.Shape().Dim(0), sel.Shape().Dim(1), len(sizes)
	nc := len(k.KeyBlocks)
	class := Gather(Const(g, k.keyClasses(sizes)), ExpandAxes(sel, -1)) // [R, K]
	if counts != nil {
		past := GreaterOrEqual(Iota(g, shapes.Make(dtypes.Int32, r, kk), 1), ExpandAxes(counts, -1))
		class = Where(past, BroadcastToDims(Const(g, int32(nc)), r, kk), class) // sorted past every group
	}
	n := Const(g, int32(nT))
	sorted := Sort(Add(Mul(class, n), sel), -1, true)
	groups := make([]*Node, nc)
	for c := range nc {
		in := LessOrEqual(Div(sorted, n), Const(g, int32(c)))
		groups[c] = ReduceSum(ConvertDType(in, dtypes.Int32), -1)
	}
	return Reshape(Mod(sorted, n), r*kk), Reshape(Stack(groups, -1), r*nc)
}

// vsaFineOperands is the number of operands the fine kernel takes (testdata/gen_vsa_triton.py records
// it in the kernel file): a kernel file of another layout is refused, not launched.
const vsaFineOperands = 10

// call launches the fine kernel with the operands testdata/gen_vsa_triton.py documents: each head's
// tile-padded rows of q, k, v [H·Rows, D] (the pack kernel's copies), the key tile lists idx
// [H·Tiles·Stride] grouped by class with their groups' ends [H·Tiles·C] (keyOrder), and the
// compression branch the kernel adds to each row (nil: none): gate [Seq·H, D] in q's dtype and each
// tile's oc [nT·H, D] float32. The result is the sequence's rows [Seq·H, D], of which the video query
// tiles' rows are written.
func (k *tritonKernel) call(geo fineGeometry, ends, idx, q, kk, v, gate, oc *Node) (*Node, error) {
	g := q.Graph()
	h, d := q.Shape().Dim(0)/geo.Rows, q.Shape().Dim(1)
	gated := int32(1)
	if gate == nil {
		// One-row placeholders: the kernel's loads of them are masked off.
		gated, gate, oc = 0, Zeros(g, shapes.Make(q.DType(), 1, d)), Zeros(g, shapes.Make(dtypes.Float32, 1, d))
	}
	params := Const(g, []int32{int32(geo.Rows), int32(geo.First), int32(geo.Tiles), int32(geo.Stride), int32(h), gated})
	out, err := xlaext.TritonCall(k.Launch(k.Name, [3]int{geo.Tiles, h, 1}), []*Node{params, ends, idx, Const(g, geo.Sizes), Const(g, geo.Slots), q, kk, v, gate, oc},
		[]shapes.Shape{shapes.Make(q.DType(), geo.Seq*h, d)})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// tritonEligible is TritonVSA for the graph being built, with the scale the kernel has compiled in; it
// returns the kernels that can run.
func tritonEligible(q *Node, s *Sparse, scale float64) (*vsaKernels, error) {
	ks, err := loadVSAKernels()
	if err != nil {
		return nil, err
	}
	// The shape check first: CPU tests reach it (their head widths fail the scale check).
	t := s.Tiling
	if err := addressable(t.NumTiles()*t.TileElems*q.Shape().Dim(2)*q.Shape().Dim(3), errTritonShape); err != nil {
		return nil, err
	}
	if err := ks.fine.checkScale(scale, errTritonShape); err != nil {
		return nil, err
	}
	if err := TritonVSA(q.Graph().Backend(), q.DType(), q.Shape().Dim(3), t.TileElems); err != nil {
		return nil, err
	}
	return ks, nil
}

// loadVSAKernels is the three kernel files, loaded once, checked to be made together.
func loadVSAKernels() (*vsaKernels, error) {
	fine, err := loadVSATriton()
	if err != nil {
		return nil, err
	}
	pack, err := loadVSAPack()
	if err != nil {
		return nil, err
	}
	route, err := loadVSASelect()
	if err != nil {
		return nil, err
	}
	if pack.Tile != fine.Tile || pack.Plugin != fine.Plugin {
		return nil, fmt.Errorf("attention: vsa_pack_triton.json (tiles of %d, %s) and vsa_triton.json (%d, %s) were not made together; run testdata/gen_vsa_triton.py",
			pack.Tile, pack.Plugin, fine.Tile, fine.Plugin)
	}
	for _, k := range route {
		if k.Plugin != fine.Plugin || !slices.Equal(k.KeyBlocks, fine.KeyBlocks) {
			return nil, fmt.Errorf("attention: vsa_select_triton.json (key blocks %v, %s) and vsa_triton.json (%v, %s) were not made together; run testdata/gen_vsa_select.py",
				k.KeyBlocks, k.Plugin, fine.KeyBlocks, fine.Plugin)
		}
	}
	return &vsaKernels{pack: pack, route: route, fine: fine}, nil
}

// addressable reports whether a kernel's operand of elems elements is within the int32 element offsets
// the kernels compute (nil), or why not.
func addressable(elems int, notCovered error) error {
	if elems > math.MaxInt32 {
		return fmt.Errorf("%w: an operand of %d elements is past the kernel's int32 offsets (%d)", notCovered, elems, math.MaxInt32)
	}
	return nil
}
