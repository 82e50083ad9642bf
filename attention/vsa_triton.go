package attention

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/xlaext"
)

// The fine stage of VSA as one Triton kernel (testdata/gen_vsa_triton.py writes vsa_triton.json): each
// (64-row video query tile, head) program walks its selected key tiles and reads each K and V tile in
// place, as upstream's fastvideo-kernel block_sparse_attn_triton.py does, instead of gathering copies
// of them. The kernel reads the geometry from an operand, so one IR serves every sequence of head width
// 128 and 64-row tiles; it needs the GPU build's Triton custom call and the CUDA plugin it was made with.

// SparseKernel chooses how the fine stage of block-sparse attention runs on the fused path.
type SparseKernel int

const (
	// SparseAuto (the zero value): the Triton kernel where it can run, the gathered tiles otherwise.
	SparseAuto SparseKernel = iota
	// SparseGather gathers the selected K/V tiles with XLA ops and runs the fused kernel on them.
	SparseGather
	// SparseTriton forces the Triton kernel; building the graph fails where it cannot run.
	SparseTriton
)

// String returns the name ParseSparseKernel reads.
func (k SparseKernel) String() string {
	switch k {
	case SparseGather:
		return "gather"
	case SparseTriton:
		return "triton"
	}
	return "auto"
}

// ParseSparseKernel parses "auto" (or ""), "gather" and "triton".
func ParseSparseKernel(s string) (SparseKernel, error) {
	switch s {
	case "", "auto":
		return SparseAuto, nil
	case "gather":
		return SparseGather, nil
	case "triton":
		return SparseTriton, nil
	}
	return SparseAuto, fmt.Errorf("attention: VSA kernel %q is not known; use auto, gather or triton", s)
}

//go:embed vsa_triton.json
var vsaTritonFile []byte

// tritonKernel is a kernel file (vsa_triton.json, window_triton.json): the kernel and what it was
// made with.
type tritonKernel struct {
	Name      string `json:"name"`
	IR        string `json:"ir"` // base64 of the MLIR bytecode
	HeadDim   int    `json:"head_dim"`
	Tile      int    `json:"tile"`
	NumWarps  int    `json:"num_warps"`
	NumStages int    `json:"num_stages"`
	// KeyBlocks are the K/V block rows of each class of key tile the VSA kernel walks, largest (Tile)
	// first: a tile belongs to the last class whose block holds its valid rows.
	KeyBlocks []int  `json:"key_blocks"`
	JAX       string `json:"jax"`
	Plugin    string `json:"plugin"`
	ir        []byte
}

// parseTritonKernel reads the kernel file named file.
func parseTritonKernel(file string, data []byte) (*tritonKernel, error) {
	k := &tritonKernel{}
	if err := json.Unmarshal(data, k); err != nil {
		return nil, fmt.Errorf("attention: %s: %w", file, err)
	}
	ir, err := base64.StdEncoding.DecodeString(k.IR)
	if err != nil || len(ir) == 0 || k.Name == "" || k.HeadDim <= 0 || k.Tile <= 0 || k.NumWarps <= 0 || k.NumStages <= 0 {
		return nil, fmt.Errorf("attention: %s is incomplete (ir %d bytes, %v)", file, len(ir), err)
	}
	k.ir = ir
	return k, nil
}

var loadVSATriton = sync.OnceValues(func() (*tritonKernel, error) {
	k, err := parseTritonKernel("vsa_triton.json", vsaTritonFile)
	if err != nil {
		return nil, err
	}
	return k, k.checkKeyBlocks("vsa_triton.json")
})

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
// (BENCHMARKS.md, "Video Sparse Attention"). The families default to VSA only where this holds.
func BlockSparseKernel() bool {
	_, err := loadVSATriton()
	return err == nil && xlaext.GraphBackendCall()
}

// errTritonShape: the attention is not one the kernel computes.
var errTritonShape = errors.New("the Triton VSA kernel does not cover this attention")

// TritonVSA reports whether the Triton fine-stage kernel can run on backend for attention of dtype with
// heads of headDim and tiles of tileElems rows (nil: it can, subject to the backend being XLA's CUDA
// plugin), and why not otherwise. Plans call it to say which kernel runs; Attend decides the same way.
func TritonVSA(backend compute.Backend, dtype dtypes.DType, headDim, tileElems int) error {
	k, err := loadVSATriton()
	if err := covers(k, err, dtype, headDim, errTritonShape); err != nil {
		return err
	}
	if tileElems != k.Tile {
		return fmt.Errorf("%w: tiles of %d rows (it takes %d; use a VSA tile size of %d)", errTritonShape, tileElems, k.Tile, k.Tile)
	}
	return k.runsOn(backend, dtype, headDim)
}

// tritonAttend is the fine stage through kernel k: the video query tiles of qt against their selected
// key tiles sel [H, V, K] of kt and vt (tile buffers [nT, E, H, D]), as [V·E, H, D].
func (k *tritonKernel) tritonAttend(qt, kt, vt, sel *Node, s *Sparse) (*Node, error) {
	t := s.Tiling
	nT, e, h, d := t.NumTiles(), t.TileElems, qt.Shape().Dim(2), qt.Shape().Dim(3)
	nv, kk := t.NumVideo, sel.Shape().Dim(2)
	headMajor := func(x *Node) *Node { return Reshape(TransposeAllAxes(x, 2, 0, 1, 3), h*nT*e, d) } // [H·S, D]
	idx, ends := k.keyOrder(Reshape(sel, h*nv, kk), nil, t.Sizes)
	out, err := k.call(nT*e, t.NumPrefix, nv, kk, ends, idx, Const(qt.Graph(), t.Sizes), headMajor(qt), headMajor(kt), headMajor(vt))
	if err != nil {
		return nil, err
	}
	return Reshape(TransposeAllAxes(Reshape(out, h, nv, e, d), 1, 2, 0, 3), nv*e, h, d), nil
}

// keyOrder arranges the key tile lists sel [R, K] (int32; the first counts [R] of each row, or all of
// them when counts is nil) as the kernel walks them: grouped by class of KeyBlocks, ascending within a
// group, as [R·K], with the end of each row's groups [R·C]. sizes are the tiles' valid rows.
func (k *tritonKernel) keyOrder(sel, counts *Node, sizes []int32) (idx, ends *Node) {
	g := sel.Graph()
	r, kk, nT := sel.Shape().Dim(0), sel.Shape().Dim(1), len(sizes)
	nc := len(k.KeyBlocks)
	classes := make([]int32, nT)
	for i, size := range sizes {
		for c, n := range k.KeyBlocks {
			if int(size) <= n {
				classes[i] = int32(c)
			}
		}
	}
	class := Gather(Const(g, classes), ExpandAxes(sel, -1)) // [R, K]
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

// call launches the kernel with the operands testdata/gen_vsa_triton.py documents: each head's rows
// (tiles of 64, the first query tile first) of q, k, v [H·rows, D], the key tile lists idx
// [H·tiles·stride] grouped by class with their groups' ends [H·tiles·C] (keyOrder) and the tiles' valid
// rows sizes; the result is [H·tiles·64, D], a query tile's rows after another's.
func (k *tritonKernel) call(rows, first, tiles, stride int, ends, idx, sizes, q, kk, v *Node) (*Node, error) {
	h, d := q.Shape().Dim(0)/rows, q.Shape().Dim(1)
	params := Const(q.Graph(), []int32{int32(rows), int32(first), int32(tiles), int32(stride)})
	kernel := xlaext.TritonKernel{Name: k.Name, IR: k.ir, Grid: [3]int{tiles, h, 1}, NumWarps: k.NumWarps, NumStages: k.NumStages}
	out, err := xlaext.TritonCall(kernel, []*Node{params, ends, idx, sizes, q, kk, v},
		[]shapes.Shape{shapes.Make(q.DType(), h*tiles*k.Tile, d)})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// tritonEligible is TritonVSA for the graph being built, with the scale the kernel has compiled in; it
// returns the kernel that can run.
func tritonEligible(q *Node, s *Sparse, scale float64) (*tritonKernel, error) {
	k, err := loadVSATriton()
	if err != nil {
		return nil, err
	}
	// The shape check first: CPU tests reach it (their head widths fail the scale check).
	t := s.Tiling
	if err := addressable(t.NumTiles()*t.TileElems*q.Shape().Dim(2)*q.Shape().Dim(3), errTritonShape); err != nil {
		return nil, err
	}
	if err := k.checkScale(scale, errTritonShape); err != nil {
		return nil, err
	}
	if err := TritonVSA(q.Graph().Backend(), q.DType(), q.Shape().Dim(3), t.TileElems); err != nil {
		return nil, err
	}
	return k, nil
}

// addressable reports whether a kernel's operand of elems elements is within the int32 element offsets
// the kernels compute (nil), or why not.
func addressable(elems int, notCovered error) error {
	if elems > math.MaxInt32 {
		return fmt.Errorf("%w: an operand of %d elements is past the kernel's int32 offsets (%d)", notCovered, elems, math.MaxInt32)
	}
	return nil
}
