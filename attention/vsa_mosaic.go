package attention

import (
	_ "embed"
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/xlaext"
)

// VSA's fine stage as a Mosaic GPU kernel (SparseMosaic): the kernel of testdata/gen_vsa_mosaic.py, warpgroup
// MMA and TMA on Hopper, which ran at 0.7-0.8x upstream's Triton forward on the geometries where the
// Triton kernel runs at about 0.96x (BENCHMARKS.md, sessions 31-32). A Mosaic GPU module is compiled for one
// geometry, so the kernel ships as a template (vsa_mosaic.json.gz, xlaext.MosaicTemplate) that a graph
// instantiates at its heads H, tiles T, video tiles V and list width K. The kernel walks the video query
// tiles' lists (query tile first + r for list row r; first is an operand, the prefix tile count) and
// writes their rows head-major, [H, V·64, D]; the graph gathers the sequence's rows out of them and adds
// the compression branch, which the Triton kernel does in its epilogue. The prefix rows attend densely
// elsewhere (vsaKernels.attend).

//go:embed vsa_mosaic.json.gz
var vsaMosaicFile []byte

// mosaicOperands is the number of operands the template's kernel takes: q, k, v, idx, num, valid, first.
const mosaicOperands = 7

// mosaicKernel is vsa_mosaic.json.gz: the template and what it was made with.
type mosaicKernel struct {
	tmpl    *xlaext.MosaicTemplate
	Plugin  string `json:"plugin"`
	JAX     string `json:"jax"`
	Tile    int    `json:"tile"`
	HeadDim int    `json:"head_dim"`
	// Operands is the number of operands the kernel takes (checked against what this build passes).
	Operands int `json:"operands"`
}

var loadVSAMosaic = sync.OnceValues(func() (*mosaicKernel, error) { return parseVSAMosaic("vsa_mosaic.json.gz", vsaMosaicFile) })

// parseVSAMosaic reads a fine-stage template file.
func parseVSAMosaic(file string, data []byte) (*mosaicKernel, error) {
	k := &mosaicKernel{}
	tmpl, err := xlaext.ParseMosaicTemplate(data, k)
	if err != nil {
		return nil, fmt.Errorf("attention: %s: %w", file, err)
	}
	k.tmpl = tmpl
	switch {
	case k.Plugin == "" || k.Tile <= 0 || k.HeadDim <= 0 || len(tmpl.Checks) == 0:
		return nil, fmt.Errorf("attention: %s is incomplete (plugin %q, tile %d, head width %d, %d checked geometries)", file, k.Plugin, k.Tile, k.HeadDim, len(tmpl.Checks))
	case k.Operands != mosaicOperands:
		return nil, fmt.Errorf("attention: %s's kernel takes %d operands, this build passes %d; use the template this build was written for", file, k.Operands, mosaicOperands)
	}
	for _, p := range []string{"H", "T", "V", "K"} {
		if !slices.Contains(tmpl.Params, p) {
			return nil, fmt.Errorf("attention: %s's template has no parameter %s (it has %v)", file, p, tmpl.Params)
		}
	}
	return k, nil
}

// MosaicVSA reports whether the Mosaic GPU fine stage can run on backend for block-sparse attention of
// dtype over tiling t with heads heads of headDim channels, keeping topK video tiles (nil: it can), and why
// not otherwise: the Triton kernels' conditions (their tile copies and routing feed it), the template's
// head width and tile, the plugin it was made with, and a geometry no smaller than those it was checked at.
func MosaicVSA(backend compute.Backend, dtype dtypes.DType, heads, headDim int, t *Tiling, topK int) error {
	_, err := mosaicFor(backend, dtype, heads, headDim, t, topK)
	return err
}

// mosaicFor is the Mosaic fine stage where it runs (MosaicVSA), or why not.
func mosaicFor(backend compute.Backend, dtype dtypes.DType, heads, headDim int, t *Tiling, topK int) (*mosaicKernel, error) {
	k, err := loadVSAMosaic()
	if err != nil {
		return nil, err
	}
	if err := TritonVSA(backend, dtype, headDim, t.TileElems); err != nil {
		return nil, err
	}
	switch {
	case headDim != k.HeadDim:
		return nil, fmt.Errorf("%w: head width %d (the Mosaic kernel takes %d)", errTritonShape, headDim, k.HeadDim)
	case t.TileElems != k.Tile:
		return nil, fmt.Errorf("%w: tiles of %d rows (the Mosaic kernel takes %d)", errTritonShape, t.TileElems, k.Tile)
	}
	if _, err := k.mosaicGeometry(t, heads, t.KeyTiles(topK)); err != nil {
		return nil, err
	}
	if err := xlaext.Compatible(backend, k.Plugin); err != nil {
		return nil, err
	}
	return k, nil
}

// mosaicGeometry is the template's parameters for tiling t with lists of stride key tiles over heads
// heads, or why the template was not checked down to it.
func (k *mosaicKernel) mosaicGeometry(t *Tiling, heads, stride int) (map[string]int, error) {
	params := map[string]int{"H": heads, "T": t.NumTiles(), "V": t.NumVideo, "K": stride}
	if err := k.tmpl.Covers(params); err != nil {
		return nil, fmt.Errorf("%w: %w", errTritonShape, err)
	}
	return params, nil
}

// fine is the fine stage through the Mosaic kernel on the pack kernel's tile copies qh, kh, vh
// [H·nT·E, D] and the routing's lists idx [H·V·K] with their groups' ends [H·V·C]: the sequence's rows
// [Seq·H, D] (the prefix rows the caller's), with the compression branch gate·oc added when gate is set
// (gate [Seq·H, D], oc [nT·H, D] float32), in float32 before the one rounding, as the Triton kernel does.
func (k *mosaicKernel) fine(t *Tiling, qh, kh, vh, idx, ends, gate, oc *Node, classes int) (*Node, error) {
	d, nT, e := qh.Shape().Dim(1), t.NumTiles(), t.TileElems
	h := qh.Shape().Dim(0) / (nT * e)
	stride := idx.Shape().Size() / (h * t.NumVideo)
	params, err := k.mosaicGeometry(t, h, stride)
	if err != nil {
		return nil, err
	}
	module, err := k.tmpl.Instantiate(params)
	if err != nil {
		return nil, err
	}
	lists, counts, valid := mosaicLists(t, h, stride, idx, ends, classes)
	first := Const(qh.Graph(), []int32{int32(t.NumPrefix)})
	bhsd := func(x *Node) *Node { return Reshape(x, h, nT*e, d) }
	out, err := xlaext.MosaicGPUCall(xlaext.MosaicGPUKernel{Name: "vsa_mosaic", Module: module},
		[]*Node{bhsd(qh), bhsd(kh), bhsd(vh), lists, counts, valid, first},
		[]shapes.Shape{shapes.Make(qh.DType(), h, t.NumVideo*e, d)})
	if err != nil {
		return nil, err
	}
	return tileOutputRows(out[0], t, gate, oc), nil
}

// mosaicLists are the Mosaic kernel's lists [H, V, K] of the video query tiles from the routing's idx
// [H·V·K] and ends [H·V·C] (classes groups a row): each list's count is its last group's end, and valid
// holds each listed tile's valid rows (an unlisted entry's is tile 0's: the kernel reads none past the count).
func mosaicLists(t *Tiling, h, stride int, idx, ends *Node, classes int) (lists, counts, valid *Node) {
	g := idx.Graph()
	v := t.NumVideo
	lists = Reshape(idx, h, v, stride)
	counts = Reshape(Slice(Reshape(ends, h*v, classes), AxisRange(), AxisElem(classes-1)), h, v)
	valid = Gather(Const(g, t.Sizes), ExpandAxes(Max(lists, ScalarZero(g, dtypes.Int32)), -1))
	return lists, counts, valid
}

// tileOutputRows gathers the sequence's rows [Seq·H, D] out of the video tiles' rows o [H, V·E, D] (row r
// of head h at o[h, slot(r) − prefix slots]; a prefix row takes row 0, which the caller replaces), adding
// gate·oc in float32 when gate is set (gate [Seq·H, D], oc [nT·H, D] float32).
func tileOutputRows(o *Node, t *Tiling, gate, oc *Node) *Node {
	g := o.Graph()
	h, d, seq := o.Shape().Dim(0), o.Shape().Dim(2), t.Rows()
	videoSlot := make([]int32, seq)
	for r, slot := range t.RowSlot {
		videoSlot[r] = max(0, slot-int32(t.NumPrefix*t.TileElems))
	}
	rows := Gather(TransposeAllAxes(o, 1, 0, 2), ExpandAxes(Const(g, videoSlot), -1)) // [Seq, H, D]
	if gate != nil {
		rowOC := Gather(Reshape(oc, t.NumTiles(), h, d), ExpandAxes(Const(g, t.RowTiles()), -1))
		add := Mul(rowOC, ConvertDType(Reshape(gate, seq, h, d), dtypes.Float32))
		rows = ConvertDType(Add(ConvertDType(rows, dtypes.Float32), add), o.DType())
	}
	return Reshape(rows, seq*h, d)
}
