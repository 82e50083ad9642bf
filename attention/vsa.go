package attention

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	gmattn "github.com/gomlx/gomlx/ml/layers/attention"
)

// Video Sparse Attention (VSA): block-sparse self-attention routed by pooled tile scores, with the gated
// compression branch. The math is FastVideo's: fastvideo/attention/backends/video_sparse_attn_h3.py
// (MiniMaxH3VSAImpl.forward, _pool_tiles, _build_block_mask) for H3, and
// fastvideo-kernel/python/fastvideo_kernel/ops.py (video_sparse_attn, reached through
// fastvideo/attention/backends/video_sparse_attn.py) for Wan, which is the same with no prefix tiles.

// Mode says how prefix key tiles take part in the routing of video query tiles.
type Mode int

const (
	// ModeExempt (the zero value, upstream's default): every video query tile attends all prefix key
	// tiles plus its top-k video key tiles.
	ModeExempt Mode = iota
	// ModeCompete: prefix and video key tiles compete in one top-(k + prefix tiles) selection.
	ModeCompete
)

// String returns the name ParseMode reads.
func (m Mode) String() string {
	if m == ModeCompete {
		return "compete"
	}
	return "exempt"
}

// ParseMode parses "exempt" (or "") and "compete".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "exempt":
		return ModeExempt, nil
	case "compete":
		return ModeCompete, nil
	}
	return ModeExempt, fmt.Errorf("attention: VSA mode %q is not known; use exempt or compete", s)
}

// Sparse configures block-sparse attention; set Options.Sparse to use it.
type Sparse struct {
	// Tiling is the geometry of the sequence (its tables become graph constants).
	Tiling *Tiling
	// TopK is the number of video key tiles each video query tile keeps (see TopKTiles); TopK ≥ NumVideo is
	// exactly dense attention.
	TopK int
	// Mode is the prefix routing.
	Mode Mode
	// Gate is the compression gate [1, L, H, D] (to_gate_compress of the attention input), or nil when
	// the model has none (the branch then contributes nothing and is skipped).
	Gate *Node
	// HeadChunk bounds the heads processed at once by the gathered path (0: chosen to keep each gathered
	// K/V chunk near 1 GiB).
	HeadChunk int
	// Kernel chooses the fine stage's implementation on the fused path (zero: the Triton kernel where
	// it runs, see TritonVSA).
	Kernel SparseKernel
}

// pathGathered is the gathered-tile path with exact float32 attention on the blocks; tests use it to
// check the GPU algorithm on the CPU backend.
const pathGathered Path = 100

// gatherBudget is the byte size one chunk of gathered K (or V) tiles aims at.
const gatherBudget = 1 << 30

// attendSparse is Attend with Options.Sparse set: q, k, v are [1, L, H, D] in the tiling's row order.
func attendSparse(q, k, v *Node, s *Sparse, scale float64, path Path) *Node {
	t := s.Tiling
	if q.Shape().Dim(0) != 1 || q.Shape().Dim(1) != t.Rows() || k.Shape().Dim(1) != t.Rows() {
		panic(fmt.Errorf("attention: VSA needs one sequence of the tiling's %d rows, got q %s, k %s", t.Rows(), q.Shape(), k.Shape()))
	}
	dense := s.TopK >= t.NumVideo
	if dense && s.Gate == nil {
		return denseAttend(q, k, v, scale, path)
	}
	if !dense && path != PathExact {
		if kernels := sparseKernels(q, s, scale, path); kernels != nil {
			return kernels.attend(q, k, v, s, scale, path)
		}
	}
	qt, kt := tileRows(q, t), tileRows(k, t)
	scores := tileScores(poolTiles(qt, t), poolTiles(kt, t)) // [H, nT, nT]
	var out *Node
	switch {
	case dense:
		out = denseAttend(q, k, v, scale, path)
	case path == PathExact:
		out = maskedAttend(q, k, v, tileMask(scores, s), t, scale)
	default:
		sel := selectTiles(scores, s)
		out = selectedAttend(q, qt, kt, tileRows(v, t), k, v, sel, s, scale, path == PathFused)
	}
	if s.Gate == nil {
		return out
	}
	return gated(out, scores, poolTiles(tileRows(v, t), t), s)
}

// gated adds the compression branch to out [1, L, H, D]: each row gets its tile's softmax(scores)·Vp
// (vp, the tiles' V means [nT, H, D]) times the gate.
func gated(out, scores, vp *Node, s *Sparse) *Node {
	return addCompression(out, compression(scores, vp), s.Gate, s.Tiling.RowTiles())
}

// addCompression adds to the rows of out [1, R, H, D] the compression branch oc [nT, H, D] of their
// tiles rowTiles [R] times gate [1, R, H, D], in float32.
func addCompression(out, oc, gate *Node, rowTiles []int32) *Node {
	rowOC := Gather(oc, ExpandAxes(Const(out.Graph(), rowTiles), -1)) // [R, H, D]
	add := Mul(ExpandAxes(rowOC, 0), ConvertDType(gate, dtypes.Float32))
	return ConvertDType(Add(ConvertDType(out, dtypes.Float32), add), out.DType())
}

// denseAttend is plain attention on the resolved path (gathered means fused-or-exact as available).
func denseAttend(q, k, v *Node, scale float64, path Path) *Node {
	if path == PathFused {
		out, _ := gmattn.Core(q, k, v, gmattn.LayoutBSHD, gmattn.CoreOptions{Scale: scale})
		return out
	}
	return Exact(q, k, v, scale)
}

// tileRows scatters the rows of x [1, L, H, D] into the zero-padded tile buffer [nT, E, H, D].
func tileRows(x *Node, t *Tiling) *Node {
	g := x.Graph()
	h, d := x.Shape().Dim(2), x.Shape().Dim(3)
	rows := Reshape(x, t.Rows(), h, d)
	padded := Concatenate([]*Node{rows, Zeros(g, shapes.Make(x.DType(), 1, h, d))}, 0)
	return Reshape(Gather(padded, ExpandAxes(Const(g, t.SlotRows()), -1)), t.NumTiles(), t.TileElems, h, d)
}

// poolTiles is the float32 mean of each tile's valid rows: the pads are zero, so the sum over all slots
// divided by the true tile size (upstream's _pool_tiles). xt [nT, E, H, D] -> [nT, H, D].
func poolTiles(xt *Node, t *Tiling) *Node {
	sizes := make([]float32, len(t.Sizes))
	for i, s := range t.Sizes {
		sizes[i] = float32(s)
	}
	sum := ReduceSum(ConvertDType(xt, dtypes.Float32), 1)
	return Div(sum, Reshape(Const(xt.Graph(), sizes), len(sizes), 1, 1))
}

// tileScores are the routing scores Qp·Kpᵀ/sqrt(D) per head: [H, nT, nT] float32.
func tileScores(qp, kp *Node) *Node {
	s := Einsum("thd,shd->hts", qp, kp)
	return DivScalar(s, math.Sqrt(float64(qp.Shape().Dim(2))))
}

// selectTiles returns the key tiles of each video query tile per head, [H, V, KeyTiles] int32: in exempt
// mode the prefix tiles followed by the top-k video tiles, in compete mode the top-(k + prefix) tiles.
func selectTiles(scores *Node, s *Sparse) *Node {
	t := s.Tiling
	p, n := t.NumPrefix, t.NumTiles()
	videoRows := Slice(scores, AxisRange(), AxisRange(p, n), AxisRange())
	if s.Mode == ModeCompete || p == 0 {
		_, idx := TopK(videoRows, t.KeyTiles(s.TopK), -1)
		return ConvertDType(idx, dtypes.Int32)
	}
	_, idx := TopK(Slice(videoRows, AxisRange(), AxisRange(), AxisRange(p, n)), s.TopK, -1)
	idx = AddScalar(ConvertDType(idx, dtypes.Int32), float64(p))
	h, nv := idx.Shape().Dim(0), idx.Shape().Dim(1)
	prefix := BroadcastToDims(Iota(scores.Graph(), shapes.Make(dtypes.Int32, 1, 1, p), 2), h, nv, p)
	return Concatenate([]*Node{prefix, idx}, -1)
}

// tileMask is the block mask [H, nT, nT] (bool) of the selection: prefix query tiles see every tile.
func tileMask(scores *Node, s *Sparse) *Node {
	t := s.Tiling
	g := scores.Graph()
	h, n := scores.Shape().Dim(0), t.NumTiles()
	sel := selectTiles(scores, s)                                 // [H, V, K]
	cols := Iota(g, shapes.Make(dtypes.Int32, 1, 1, 1, n), 3)     // [1, 1, 1, nT]
	video := ReduceLogicalOr(Equal(ExpandAxes(sel, -1), cols), 2) // [H, V, nT]
	prefix := BroadcastToDims(Const(g, true), h, t.NumPrefix, n)  // [H, P, nT]
	return Concatenate([]*Node{prefix, video}, 1)
}

// maskedAttend is the exact oracle (upstream's token-level reference in
// fastvideo/tests/attention/test_vsa_h3_metadata.py): dense float32 scores with the block mask expanded
// to rows. It materializes [H, L, L]: for the CPU backend and tests.
func maskedAttend(q, k, v, mask *Node, t *Tiling, scale float64) *Node {
	g := q.Graph()
	l := t.Rows()
	tiles := t.RowTiles()
	pairs := make([]int32, 0, 2*l*l)
	for i := 0; i < l; i++ {
		for j := 0; j < l; j++ {
			pairs = append(pairs, tiles[i], tiles[j])
		}
	}
	allowed := Gather(TransposeAllAxes(mask, 1, 2, 0), Reshape(Const(g, pairs), l, l, 2)) // [L, L, H]
	allowed = ExpandAxes(TransposeAllAxes(allowed, 2, 0, 1), 0)                           // [1, H, L, L]
	return exactMasked(q, k, v, allowed, scale)
}

// exactMasked is Exact under a mask: q [B, Lq, H, D], k, v [B, Lk, H, D], allowed bool broadcast to
// the float32 scores [B, H, Lq, Lk] (every query must see a key); the result is in q's layout and
// dtype. It materializes the scores: the oracles of small sequences.
func exactMasked(q, k, v, allowed *Node, scale float64) *Node {
	qf, kf, vf := ConvertDType(q, dtypes.Float32), ConvertDType(k, dtypes.Float32), ConvertDType(v, dtypes.Float32)
	s := MulScalar(Dot(qf, kf).General([]int{3}, []int{0, 2}, []int{3}, []int{0, 2}), scale) // [B, H, Lq, Lk]
	p := MaskedSoftmax(s, BroadcastToDims(allowed, s.Shape().Dimensions...), -1)
	o := Dot(p, vf).General([]int{3}, []int{0, 1}, []int{1}, []int{0, 2}) // [B, H, Lq, D]
	return ConvertDType(TransposeAllAxes(o, 0, 2, 1, 3), q.DType())
}

// compression is the compression branch per tile: softmax(scores)·Vp, [nT, H, D] float32.
func compression(scores, vp *Node) *Node {
	return Einsum("hts,shd->thd", Softmax(scores, -1), vp)
}

// selectedAttend does only the selected work with XLA ops: prefix query tiles attend every row densely;
// each video query tile attends its selected key tiles through gatheredVideo.
func selectedAttend(q, qt, kt, vt, k, v, sel *Node, s *Sparse, scale float64, fused bool) *Node {
	t := s.Tiling
	g := q.Graph()
	h, d := q.Shape().Dim(2), q.Shape().Dim(3)
	var prefixOut *Node
	if p, e := t.NumPrefix, t.TileElems; p > 0 {
		qp := Reshape(Slice(qt, AxisRange(0, p)), 1, p*e, h, d)
		prefixOut = Reshape(denseAttend(qp, k, v, scale, prefixPath(fused)), p*e, h, d)
	}
	all := gatheredVideo(q, qt, kt, vt, sel, s, scale, fused) // [V·E, H, D]
	if prefixOut != nil {
		all = Concatenate([]*Node{prefixOut, ConvertDType(all, prefixOut.DType())}, 0)
	}
	return Reshape(Gather(ConvertDType(all, q.DType()), ExpandAxes(Const(g, t.RowSlot), -1)), 1, t.Rows(), h, d)
}

// prefixPath is the path the prefix rows' dense attention takes: fused on the fused path, exact otherwise.
func prefixPath(fused bool) Path {
	if fused {
		return PathFused
	}
	return PathExact
}

// gatheredVideo is the fine stage with XLA ops: each video query tile attends the gathered slots of its
// selected key tiles, heads in chunks, as [V·E, H, D]. fused runs the blocks through the fused kernel,
// with the pad slots masked by an extra score channel (the kernel takes no per-block mask); otherwise the
// blocks run in exact float32 with a boolean mask.
func gatheredVideo(q, qt, kt, vt, sel *Node, s *Sparse, scale float64, fused bool) *Node {
	t := s.Tiling
	g := q.Graph()
	nT, e, h, d := t.NumTiles(), t.TileElems, q.Shape().Dim(2), q.Shape().Dim(3)
	p, nv := t.NumPrefix, t.NumVideo
	qv := TransposeAllAxes(Slice(qt, AxisRange(p, nT)), 0, 2, 1, 3) // [V, H, E, D]
	kh := TransposeAllAxes(kt, 2, 0, 1, 3)                          // [H, nT, E, D]
	vh := TransposeAllAxes(vt, 2, 0, 1, 3)
	valid := validSlots(g, t) // [nT, E] bool
	if fused {
		kh, vh, qv = padChannel(kh, valid, scale, true), padChannel(vh, nil, 0, false), padChannel(qv, nil, 0, true)
	}
	kTiles := sel.Shape().Dim(2)
	chunk := headChunk(s.HeadChunk, h, nv*kTiles*e*kh.Shape().Dim(3)*q.DType().Size())
	parts := chunkHeads(h, chunk, []*Node{kh, vh, qv}, func(in []*Node, h0, hc int) *Node {
		kh, vh, qv := in[0], in[1], in[2]
		idx := headTileIndex(g, Slice(sel, AxisRange(h0, h0+hc)), h0)       // [V, hc, K, 2]
		kb := Reshape(Gather(kh, idx), nv, hc, kTiles*e, kh.Shape().Dim(3)) // [V, hc, K·E, D']
		vb := Reshape(Gather(vh, idx), nv, hc, kTiles*e, vh.Shape().Dim(3))
		qb := Slice(qv, AxisRange(), AxisRange(h0, h0+hc))
		var ob *Node
		if fused {
			ob, _ = gmattn.Core(qb, kb, vb, gmattn.LayoutBHSD, gmattn.CoreOptions{Scale: scale})
			ob = Slice(ob, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, d))
		} else {
			kv := Gather(Where(valid, Ones(g, shapes.Make(dtypes.Float32, nT, e)), Zeros(g, shapes.Make(dtypes.Float32, nT, e))),
				ExpandAxes(Slice(idx, AxisRange(), AxisRange(), AxisRange(), AxisElem(1)), -1)) // [V, hc, K, 1, E]
			keep := Reshape(kv, nv, hc, 1, kTiles*e)
			ob = blockExact(qb, kb, vb, GreaterThan(keep, ZerosLike(keep)), scale)
		}
		return ob
	})
	return Reshape(TransposeAllAxes(Concatenate(parts, 1), 0, 2, 1, 3), nv*e, h, d) // [V·E, H, D]
}

// headChunk is the heads a gathered path attends at once: requested, or as many as keep one chunk's
// gathered K (or V) near gatherBudget at perHead bytes a head.
func headChunk(requested, heads, perHead int) int {
	if requested > 0 {
		return requested
	}
	return max(1, min(heads, gatherBudget/max(1, perHead)))
}

// chunkHeads runs attend on each chunk of at most chunk of heads heads, [h0, h0+hc), with the
// chunk's inputs in, and returns the chunks' outputs in order. The chunks are independent, so XLA
// would run them at once with every chunk's gathered blocks live together (one 18.6 GiB buffer at
// FastH3's 832x480x124): a barrier makes each chunk's inputs wait for the previous chunk's output.
func chunkHeads(heads, chunk int, in []*Node, attend func(in []*Node, h0, hc int) *Node) []*Node {
	var parts []*Node
	for h0 := 0; h0 < heads; h0 += chunk {
		if n := len(parts); n > 0 {
			b := OptimizationBarriers(append(append([]*Node(nil), in...), parts[n-1])...)
			in, parts[n-1] = b[:len(in)], b[len(in)]
		}
		parts = append(parts, attend(in, h0, min(chunk, heads-h0)))
	}
	return parts
}

// validSlots marks the slots that hold a row, [nT, E] bool.
func validSlots(g *Graph, t *Tiling) *Node {
	v := make([]bool, t.NumTiles()*t.TileElems)
	for _, slot := range t.RowSlot {
		v[slot] = true
	}
	return Reshape(Const(g, v), t.NumTiles(), t.TileElems)
}

// headTileIndex turns the selection sel [hc, V, K] of heads h0.. into Gather indices [V, hc, K, 2]
// (head, tile) into a [H, nT, E, D] tensor.
func headTileIndex(g *Graph, sel *Node, h0 int) *Node {
	hc, nv, kk := sel.Shape().Dim(0), sel.Shape().Dim(1), sel.Shape().Dim(2)
	heads := AddScalar(Iota(g, shapes.Make(dtypes.Int32, hc, nv, kk), 0), float64(h0))
	return TransposeAllAxes(Stack([]*Node{heads, sel}, -1), 1, 0, 2, 3)
}

// padChannel appends 8 channels to x [..., E, D] so the fused kernel can mask pad key slots: for
// queries a 1 then zeros, for keys the bias 0 (valid slot) or −1e4/scale (pad) then zeros (the score of
// a pad slot drops by 1e4, its softmax weight to zero), for values zeros. valid is [nT, E].
func padChannel(x, valid *Node, scale float64, first bool) *Node {
	g := x.Graph()
	dims := x.Shape().Dimensions
	rest := append(append([]int{}, dims[:len(dims)-1]...), 7)
	one := append(append([]int{}, dims[:len(dims)-1]...), 1)
	var c *Node
	switch {
	case valid != nil:
		bias := Where(valid, Zeros(g, shapes.Make(x.DType(), valid.Shape().Dimensions...)),
			BroadcastToDims(ConstAsDType(g, x.DType(), -1e4/scale), valid.Shape().Dimensions...))
		c = ExpandAxes(bias, -1) // [nT, E, 1]: the leading axes of x (heads) broadcast
		for c.Rank() < len(one) {
			c = ExpandAxes(c, 0)
		}
		c = BroadcastToDims(c, one...)
	case first:
		c = Ones(g, shapes.Make(x.DType(), one...))
	default:
		c = Zeros(g, shapes.Make(x.DType(), one...))
	}
	return Concatenate([]*Node{x, c, Zeros(g, shapes.Make(x.DType(), rest...))}, -1)
}

// blockExact is float32 attention of query blocks q [V, hc, E, D] over gathered keys k, v [V, hc, S, D]
// under the mask allowed (bool, broadcast to [V, hc, E, S]: VSA's key validity [V, hc, 1, S], the
// window's element mask [V, 1, E, S]); the result [V, hc, E, D] is float32.
func blockExact(q, k, v, allowed *Node, scale float64) *Node {
	s := MulScalar(Einsum("bhqd,bhkd->bhqk", ConvertDType(q, dtypes.Float32), ConvertDType(k, dtypes.Float32)), scale)
	mask := BroadcastToDims(allowed, s.Shape().Dimensions...)
	return Einsum("bhqk,bhkd->bhqd", MaskedSoftmax(s, mask, -1), ConvertDType(v, dtypes.Float32))
}
