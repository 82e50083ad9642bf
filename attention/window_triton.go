package attention

import (
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/xlaext"
)

// Windowed attention's fine stage as one Triton kernel (testdata/gen_window_triton.py writes
// window_triton.json): the VSA kernel's loop over each 64-row query tile's key tiles, read in place,
// with the window's element mask; the geometry, the half width and the sink come from an operand, so
// one IR serves every sequence and window of head width 128.

//go:embed window_triton.json
var windowTritonFile []byte

var loadWindowTriton = sync.OnceValues(func() (*tritonKernel, error) {
	return parseTritonKernel("window_triton.json", windowTritonFile)
})

// WindowKernel reports whether this build has the Triton window kernel (the GPU build); it runs where
// TritonWindow allows, and the window's key tiles are gathered elsewhere.
func WindowKernel() bool {
	_, err := loadWindowTriton()
	return err == nil && xlaext.GraphBackendCall()
}

// errWindowShape: the attention is not one the window kernel computes.
var errWindowShape = errors.New("the Triton window kernel does not cover this attention")

// TritonWindow reports whether the Triton windowed-attention kernel can run on backend for attention
// of dtype with heads of headDim (nil: it can, subject to the backend being XLA's CUDA plugin), and
// why not otherwise; elsewhere the window runs on gathered tiles. Plans call it to say which runs.
func TritonWindow(backend compute.Backend, dtype dtypes.DType, headDim int) error {
	k, err := loadWindowTriton()
	if err := covers(k, err, dtype, headDim, errWindowShape); err != nil {
		return err
	}
	return k.runsOn(backend, dtype, headDim)
}

// windowKernel returns the kernel that can run windowFine for q [G, R, D] (its size, dtype, head width
// and backend) at scale, as tritonEligible does for VSA, or why none can.
func windowKernel(q *Node, scale float64) (*tritonKernel, error) {
	k, err := loadWindowTriton()
	if err != nil {
		return nil, err
	}
	// The shape checks first: CPU tests reach them (their head widths fail the scale check).
	if err := addressable(q.Shape().Size(), errWindowShape); err != nil {
		return nil, err
	}
	if k.Tile != WindowTile {
		return nil, fmt.Errorf("%w: window_triton.json computes tiles of %d rows, the block map has %d", errWindowShape, k.Tile, WindowTile)
	}
	if err := k.checkScale(scale, errWindowShape); err != nil {
		return nil, err
	}
	if err := TritonWindow(q.Graph().Backend(), q.DType(), q.Shape().Dim(-1)); err != nil {
		return nil, err
	}
	return k, nil
}

// windowCall launches the kernel with the operands testdata/gen_window_triton.py documents: q, k, v
// [G, R, D] (G = batch·heads, R rows a head, whole tiles), the block map idx [Tiles, Stride] and
// counts [Tiles]; the result is [G, R, D].
func (k *tritonKernel) windowCall(q, kk, v, idx, counts *Node, seqLen int, w Window) (*Node, error) {
	gh, rows, d := q.Shape().Dim(0), q.Shape().Dim(1), q.Shape().Dim(2)
	tiles, stride := idx.Shape().Dim(0), idx.Shape().Dim(1)
	params := Const(q.Graph(), []int32{int32(rows), int32(seqLen), int32(stride), int32(w.Half()), int32(w.Sink)})
	flat := func(x *Node) *Node { return Reshape(x, gh*rows, d) }
	out, err := xlaext.TritonCall(k.Launch(k.Name, [3]int{tiles, gh, 1}), []*Node{params, counts, Reshape(idx, tiles*stride), flat(q), flat(kk), flat(v)},
		[]shapes.Shape{shapes.Make(q.DType(), gh*rows, d)})
	if err != nil {
		return nil, err
	}
	return Reshape(out[0], gh, rows, d), nil
}
