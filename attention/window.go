package attention

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
)

// Windowed attention: the sliding window with sink tokens of FastVideo's MLX Wan runtime
// (fastvideo/mlx_runtime/windowed_attention.py, applied to the self-attention of
// fastvideo/mlx_runtime/fastwan.py; cross-attention stays dense). Over the flattened token index of
// one self-attention sequence of S rows, query i sees key j iff |i − j| ≤ Tokens/2 (integer half) or
// j < Sink: symmetric and non-causal. Wan's tokens are frame-major, so Tokens = 2k·(tokens a frame)
// spans about ±k latent frames. A window of S tokens or more is dense attention, as upstream.
//
// Two ways compute it: the masked dense oracle (PathExact, float32 [B, H, S, S]: small sequences) and
// the block path everywhere else: the sequence cut into WindowTile-row tiles, each query tile
// attending only the key tiles its band and the sink touch (WindowBlocks, graph constants), with the
// element mask inside them. The block path's per-query-tile stage is windowFine: the Triton window
// kernel where it runs (window_triton.go), gathered tiles elsewhere.

// WindowTile is the rows of a tile of the window's block map: the VSA kernel's tile height, so that a
// kernel of the same shape serves both.
const WindowTile = 64

// Window configures sliding-window attention with sink tokens; set Options.Window to use it (not
// together with Options.Sparse). It applies to self-attention only (Lq = Lk).
type Window struct {
	// Tokens is the window width in tokens (upstream's FASTVIDEO_MLX_WINDOW): query i sees key j when
	// |i − j| ≤ Tokens/2. At least 1; Tokens ≥ S is dense attention.
	Tokens int
	// Sink is the number of leading tokens every query sees (FASTVIDEO_MLX_WINDOW_SINK), 0 ≤ Sink ≤ S.
	Sink int
	// HeadChunk bounds the heads (batch × heads) the block path attends at once (0: chosen to keep
	// each chunk's gathered K/V and scores near 1 GiB).
	HeadChunk int
}

// Half is the band's reach on each side of a query: Tokens/2, rounded down as upstream's window // 2.
func (w Window) Half() int { return w.Tokens / 2 }

// Dense reports whether the window is dense attention on a sequence of seqLen tokens (Tokens ≥ S,
// upstream's short cut): Attend then takes the dense path, bit for bit.
func (w Window) Dense(seqLen int) bool { return w.Tokens >= seqLen }

// Check validates the window for a self-attention sequence of seqLen tokens.
func (w Window) Check(seqLen int) error {
	if err := w.checkSizes(); err != nil {
		return err
	}
	if w.Sink > seqLen {
		return fmt.Errorf("attention: window sink of %d tokens exceeds the sequence's %d; use 0 to %d", w.Sink, seqLen, seqLen)
	}
	return nil
}

// checkSizes is what Resolve can check without the sequence.
func (w Window) checkSizes() error {
	if w.Tokens < 1 {
		return fmt.Errorf("attention: window of %d tokens; use 1 or more (Options.Window nil is dense attention)", w.Tokens)
	}
	if w.Sink < 0 {
		return fmt.Errorf("attention: window sink of %d tokens; use 0 or more", w.Sink)
	}
	return nil
}

// WindowBlocks is the block map of a window over a sequence: for each WindowTile-row query tile (the
// last one ragged), the key tiles holding a key some of its queries see, ascending and without
// duplicates: the sink tiles [0, ceil(Sink/64)) and the band tiles [max(0, q0 − half)/64,
// min(S − 1, q1 + half)/64] of its rows q0..q1.
type WindowBlocks struct {
	// SeqLen is S; Tiles = ceil(S/WindowTile) counts both the query and the key tiles.
	SeqLen, Tiles int
	// Stride is the longest list: the width of Index's rows.
	Stride int
	// Index [Tiles·Stride]: query tile t's key tiles are Index[t·Stride : t·Stride+Counts[t]]; the
	// rest of its row holds Tiles (a tile past the last, all padding).
	Index []int32
	// Counts [Tiles] is the length of each list.
	Counts []int32
}

// NewWindowBlocks builds the block map of w over a sequence of seqLen tokens.
func NewWindowBlocks(seqLen int, w Window) (*WindowBlocks, error) {
	if seqLen < 1 {
		return nil, fmt.Errorf("attention: window over an empty sequence (%d tokens)", seqLen)
	}
	if err := w.Check(seqLen); err != nil {
		return nil, err
	}
	n := (seqLen + WindowTile - 1) / WindowTile
	sinkTiles := (w.Sink + WindowTile - 1) / WindowTile
	lists := make([][]int32, n)
	m := &WindowBlocks{SeqLen: seqLen, Tiles: n, Counts: make([]int32, n)}
	for t := range lists {
		q0, q1 := t*WindowTile, min(seqLen, (t+1)*WindowTile)-1
		lo, hi := max(0, q0-w.Half())/WindowTile, min(seqLen-1, q1+w.Half())/WindowTile
		for k := 0; k < sinkTiles && k < lo; k++ {
			lists[t] = append(lists[t], int32(k))
		}
		for k := lo; k <= hi; k++ {
			lists[t] = append(lists[t], int32(k))
		}
		m.Counts[t] = int32(len(lists[t]))
		m.Stride = max(m.Stride, len(lists[t]))
	}
	m.Index = make([]int32, n*m.Stride)
	for t, l := range lists {
		row := m.Index[t*m.Stride : (t+1)*m.Stride]
		for i := range row {
			row[i] = int32(n)
		}
		copy(row, l)
	}
	return m, nil
}

// attendWindow is Attend with Options.Window on a sequence the window does not cover: q, k, v
// [B, S, H, D]; exact takes the masked dense oracle, else the block path.
func attendWindow(q, k, v *Node, w Window, scale float64, exact bool) *Node {
	s := q.Shape().Dim(1)
	if k.Shape().Dim(1) != s {
		panic(fmt.Errorf("attention: a window is for self-attention; got %d queries and %d keys", s, k.Shape().Dim(1)))
	}
	if exact {
		return windowMasked(q, k, v, w, scale)
	}
	m, err := NewWindowBlocks(s, w)
	if err != nil {
		panic(err)
	}
	g := q.Graph()
	b, h, d := q.Shape().Dim(0), q.Shape().Dim(2), q.Shape().Dim(3)
	idx := Reshape(Const(g, m.Index), m.Tiles, m.Stride)
	out := windowFine(windowRows(q, m), windowRows(k, m), windowRows(v, m), idx, Const(g, m.Counts), s, w, scale)
	out = Reshape(Slice(out, AxisRange(), AxisRange(0, s)), b, h, s, d)
	return ConvertDType(TransposeAllAxes(out, 0, 2, 1, 3), q.DType())
}

// windowRows lays x [B, S, H, D] out head-major and zero-padded to whole tiles: [B·H, Tiles·64, D].
func windowRows(x *Node, m *WindowBlocks) *Node {
	b, s, h, d := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2), x.Shape().Dim(3)
	rows := Reshape(TransposeAllAxes(x, 0, 2, 1, 3), b*h, s, d)
	if pad := m.Tiles*WindowTile - s; pad > 0 {
		rows = Concatenate([]*Node{rows, Zeros(x.Graph(), shapes.Make(x.DType(), b*h, pad, d))}, 1)
	}
	return rows
}

// windowMasked is the exact oracle: float32 scores [B, H, S, S] under the element mask. It
// materializes S² scores per head: for the CPU backend and tests.
func windowMasked(q, k, v *Node, w Window, scale float64) *Node {
	g := q.Graph()
	s := q.Shape().Dim(1)
	i := Iota(g, shapes.Make(dtypes.Int32, s, s), 0)
	j := Iota(g, shapes.Make(dtypes.Int32, s, s), 1)
	return exactMasked(q, k, v, Reshape(windowMask(i, j, w, s), 1, 1, s, s), scale)
}

// windowMask is the element mask of query positions i and key positions j (int32, same shape):
// (|i − j| ≤ half or j < sink) and j < S (key padding).
func windowMask(i, j *Node, w Window, s int) *Node {
	band := LessOrEqual(Abs(Sub(i, j)), ConstAsDType(i.Graph(), dtypes.Int32, w.Half()))
	sink := LessThan(j, ConstAsDType(i.Graph(), dtypes.Int32, w.Sink))
	return And(Or(band, sink), LessThan(j, ConstAsDType(i.Graph(), dtypes.Int32, s)))
}

// windowFine is the window's fine stage: the Triton window kernel where windowKernel allows (as
// selectedAttend takes the Triton VSA kernel through tritonEligible), else gatheredWindow; every
// query tile against the key tiles of its list. Its operands:
//   - q, k, v [G, Tiles·64, D] in the attention's dtype, G = B·H head-major, each head's rows zero-padded
//     to whole tiles;
//   - idx [Tiles, Stride] int32 and counts [Tiles] int32, the WindowBlocks as graph constants (padding
//     entries of idx hold Tiles);
//   - seqLen S (keys at S and beyond are padding), the window's Tokens and Sink, and scale.
//
// It returns [G, Tiles·64, D] (the padding query rows are discarded by the caller).
func windowFine(q, k, v, idx, counts *Node, seqLen int, w Window, scale float64) *Node {
	kernel, err := windowKernel(q, scale)
	if err != nil {
		return gatheredWindow(q, k, v, idx, seqLen, w, scale)
	}
	out, err := kernel.windowCall(q, k, v, idx, counts, seqLen, w)
	if err != nil {
		panic(err)
	}
	return out
}

// gatheredWindow is windowFine with XLA ops: each query tile's listed K/V tiles are copied out (heads
// in chunks) and attended in float32 under the element mask.
func gatheredWindow(q, k, v, idx *Node, seqLen int, w Window, scale float64) *Node {
	g := q.Graph()
	nh, d := q.Shape().Dim(0), q.Shape().Dim(2)
	n, stride := idx.Shape().Dim(0), idx.Shape().Dim(1)
	// One zero tile past the last: the lists' padding entries point at it, and the mask drops it.
	pad := Zeros(g, shapes.Make(q.DType(), nh, 1, WindowTile, d))
	kt := Concatenate([]*Node{Reshape(k, nh, n, WindowTile, d), pad}, 1) // [G, Tiles+1, 64, D]
	vt := Concatenate([]*Node{Reshape(v, nh, n, WindowTile, d), pad}, 1)
	qt := TransposeAllAxes(Reshape(q, nh, n, WindowTile, d), 1, 0, 2, 3) // [Tiles, G, 64, D]
	mask := ExpandAxes(windowTileMask(idx, seqLen, w), 1)                // [Tiles, 1, 64, Stride·64]
	// A head's gathered K (or V) tiles, or its float32 scores, whichever is larger.
	chunk := headChunk(w.HeadChunk, nh, n*stride*WindowTile*max(d*q.DType().Size(), WindowTile*dtypes.Float32.Size()))
	parts := chunkHeads(nh, chunk, []*Node{kt, vt, qt}, func(in []*Node, h0, hc int) *Node {
		kt, vt, qt := in[0], in[1], in[2]
		sel := headTileIndex(g, BroadcastToDims(ExpandAxes(idx, 0), hc, n, stride), h0) // [Tiles, hc, Stride, 2]
		kb := Reshape(Gather(kt, sel), n, hc, stride*WindowTile, d)
		vb := Reshape(Gather(vt, sel), n, hc, stride*WindowTile, d)
		return blockExact(Slice(qt, AxisRange(), AxisRange(h0, h0+hc)), kb, vb, mask, scale)
	})
	out := TransposeAllAxes(Concatenate(parts, 1), 1, 0, 2, 3) // [G, Tiles, 64, D] float32
	return Reshape(out, nh, n*WindowTile, d)
}

// windowTileMask is the element mask of each query tile against its gathered key slots,
// [Tiles, 64, Stride·64] bool. A padding query row (past S) takes the last row's mask, so that no
// row is empty.
func windowTileMask(idx *Node, seqLen int, w Window) *Node {
	g := idx.Graph()
	n, stride := idx.Shape().Dim(0), idx.Shape().Dim(1)
	e := Iota(g, shapes.Make(dtypes.Int32, 1, 1, WindowTile), 2)
	qpos := Add(MulScalar(Iota(g, shapes.Make(dtypes.Int32, n, 1, 1), 0), WindowTile), e) // [Tiles, 1, 64]
	qpos = MinScalar(Reshape(qpos, n, WindowTile, 1), float64(seqLen-1))
	kpos := Reshape(Add(MulScalar(ExpandAxes(idx, -1), WindowTile), e), n, 1, stride*WindowTile)
	dims := []int{n, WindowTile, stride * WindowTile}
	return windowMask(BroadcastToDims(qpos, dims...), BroadcastToDims(kpos, dims...), w, seqLen)
}
