package attention

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// refWindowTiles is the block map by brute force: the key tiles holding a key some query of the tile
// sees under the formula (|i − j| ≤ Tokens/2 or j < Sink).
func refWindowTiles(s int, w Window) [][]int32 {
	n := (s + WindowTile - 1) / WindowTile
	out := make([][]int32, n)
	for qt := range out {
		for kt := 0; kt < n; kt++ {
			hit := false
			for i := qt * WindowTile; i < min(s, (qt+1)*WindowTile) && !hit; i++ {
				for j := kt * WindowTile; j < min(s, (kt+1)*WindowTile) && !hit; j++ {
					hit = j < w.Sink || max(i-j, j-i) <= w.Tokens/2
				}
			}
			if hit {
				out[qt] = append(out[qt], int32(kt))
			}
		}
	}
	return out
}

func TestWindowBlocks(t *testing.T) {
	cases := []struct {
		name         string
		s            int
		w            Window
		want         [][]int32 // nil: checked against the brute force only
		stride, tile int
	}{
		{"ragged_last_tile", 200, Window{Tokens: 40}, [][]int32{{0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3}}, 3, 0},
		{"sink_overlaps_band", 200, Window{Tokens: 40, Sink: 70}, [][]int32{{0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}}, 4, 0},
		{"sink_far_from_band", 320, Window{Tokens: 2, Sink: 1}, [][]int32{{0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2, 3, 4}, {0, 3, 4}}, 4, 0},
		{"window_below_tile", 130, Window{Tokens: 1}, [][]int32{{0}, {1}, {2}}, 1, 0},
		{"window_covers_sequence", 130, Window{Tokens: 200, Sink: 130}, [][]int32{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}, 3, 0},
		{"one_ragged_tile", 37, Window{Tokens: 9, Sink: 3}, [][]int32{{0}}, 1, 0},
		{"wide", 1000, Window{Tokens: 300, Sink: 64}, nil, 0, 0},
		{"wide_odd", 777, Window{Tokens: 129, Sink: 65}, nil, 0, 0},
	}
	for _, c := range cases {
		m, err := NewWindowBlocks(c.s, c.w)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := c.want
		if ref := refWindowTiles(c.s, c.w); want == nil {
			want = ref
		} else if !slices.EqualFunc(want, ref, slices.Equal) {
			t.Fatalf("%s: the table's map %v is not the formula's %v", c.name, want, ref)
		}
		if m.Tiles != len(want) || m.SeqLen != c.s || len(m.Index) != m.Tiles*m.Stride || len(m.Counts) != m.Tiles {
			t.Fatalf("%s: %d tiles of stride %d (%d entries, %d counts), want %d tiles", c.name, m.Tiles, m.Stride, len(m.Index), len(m.Counts), len(want))
		}
		if c.stride != 0 && m.Stride != c.stride {
			t.Errorf("%s: stride %d, want %d", c.name, m.Stride, c.stride)
		}
		for q, l := range want {
			row := m.Index[q*m.Stride : (q+1)*m.Stride]
			if got := row[:m.Counts[q]]; !slices.Equal(got, l) {
				t.Errorf("%s: query tile %d lists %v, want %v", c.name, q, got, l)
			}
			for _, p := range row[m.Counts[q]:] {
				if p != int32(m.Tiles) {
					t.Errorf("%s: query tile %d pads with %d, want %d", c.name, q, p, m.Tiles)
				}
			}
		}
	}
	for _, bad := range []struct {
		s    int
		w    Window
		want string
	}{{10, Window{Tokens: 0}, "window of 0 tokens"}, {10, Window{Tokens: 4, Sink: -1}, "sink of -1"}, {10, Window{Tokens: 4, Sink: 11}, "exceeds the sequence's 10"}} {
		if _, err := NewWindowBlocks(bad.s, bad.w); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("S=%d %+v: %v, want %q", bad.s, bad.w, err, bad.want)
		}
	}
}

// refWindow is the float64 oracle of windowed attention: the window's element mask, from its
// formula, over refMasked.
func refWindow(q, k, v []float32, b, s, h, d int, w Window, scale float64) []float64 {
	return refMasked(q, k, v, b, s, s, h, d, scale, func(i, j int) bool {
		return j < w.Sink || math.Abs(float64(i-j)) <= float64(w.Tokens/2)
	})
}

// windowCase is a windowed self-attention problem; the tests read its geometry from the table.
type windowCase struct {
	name         string
	b, s, h, d   int
	tokens, sink int
	headChunk    int
}

func (c windowCase) window() Window {
	return Window{Tokens: c.tokens, Sink: c.sink, HeadChunk: c.headChunk}
}

func (c windowCase) inputs(seed uint64) (q, k, v []float32) {
	r := rand.New(rand.NewPCG(seed, uint64(c.s)))
	n := c.b * c.s * c.h * c.d
	return randn(r, n, 1.5), randn(r, n, 1.5), randn(r, n, 1)
}

// attendWith runs Attend on the case's inputs with opts.
func attendWith(t *testing.T, c windowCase, q, k, v []float32, opts Options) []float32 {
	t.Helper()
	exec, err := NewExec(testutil.Backend(t), func(q, k, v *Node) *Node { return Attend(q, k, v, opts) })
	if err != nil {
		t.Fatal(err)
	}
	mk := func(x []float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, c.b, c.s, c.h, c.d) }
	out, err := exec.Call1(mk(q), mk(k), mk(v))
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](out)
}

// Both window paths (the masked oracle and the block path) against the float64 formula, within the
// f32 parity tolerance, on sequences that are not whole tiles, with several heads, with and without a
// sink, windows narrower and wider than a tile.
func TestWindowMatchesReference(t *testing.T) {
	cases := []windowCase{
		{name: "narrow_no_sink", b: 1, s: 150, h: 2, d: 8, tokens: 20, headChunk: 1},
		{name: "narrow_sink", b: 1, s: 150, h: 3, d: 8, tokens: 11, sink: 5},
		{name: "wide_sink_in_band", b: 1, s: 217, h: 2, d: 16, tokens: 100, sink: 70, headChunk: 1},
		{name: "wide_sink_far", b: 1, s: 333, h: 2, d: 8, tokens: 70, sink: 9},
		{name: "single_token", b: 1, s: 70, h: 2, d: 8, tokens: 1, sink: 0},
		{name: "sink_one_tile", b: 1, s: 90, h: 1, d: 8, tokens: 3, sink: 64},
		{name: "batch2", b: 2, s: 129, h: 2, d: 8, tokens: 66, sink: 1, headChunk: 3},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.window().Dense(c.s) {
				t.Fatalf("window %d covers the %d tokens: the case tests nothing", c.tokens, c.s)
			}
			q, k, v := c.inputs(uint64(20 + i))
			want := refWindow(q, k, v, c.b, c.s, c.h, c.d, c.window(), 1/math.Sqrt(float64(c.d)))
			dense := refAttention(q, k, v, c.b, c.s, c.s, c.h, c.d, 1/math.Sqrt(float64(c.d)))
			if worst, scale := maxDiff(toF32(dense), want); worst < 1e-3*scale {
				t.Fatalf("the window equals dense attention here (%.3g): the case tests nothing", worst)
			}
			w := c.window()
			for _, p := range []Path{PathExact, PathAuto} {
				got := attendWith(t, c, q, k, v, Options{Path: p, Window: &w})
				worst, scale := maxDiff(got, want)
				t.Logf("path %v: max abs error %.3g (scale %.3g)", p, worst, scale)
				if worst > 1e-4*scale {
					t.Errorf("path %v: max abs error %.3g > 1e-4 × %.3g", p, worst, scale)
				}
			}
		})
	}
}

func toF32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// A window of the sequence or wider is the dense path, bit for bit, on both paths.
func TestWindowCoveringIsDense(t *testing.T) {
	c := windowCase{b: 1, s: 100, h: 2, d: 8}
	q, k, v := c.inputs(3)
	for _, p := range []Path{PathExact, PathAuto} {
		dense := attendWith(t, c, q, k, v, Options{Path: p})
		for _, w := range []Window{{Tokens: 100}, {Tokens: 1000, Sink: 100}} {
			testutil.AssertBitExact(t, "window "+p.String(), attendWith(t, c, q, k, v, Options{Path: p, Window: &w}), dense)
		}
	}
}

// A window with Sparse, of no tokens, a negative sink, a sink past the sequence or over
// cross-attention is refused: by Resolve where it can tell, else by the graph build.
func TestWindowRejects(t *testing.T) {
	b := testutil.Backend(t)
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Window: &Window{Tokens: 8}, Sparse: &Sparse{}}, "both set"},
		{Options{Window: &Window{}}, "window of 0 tokens"},
		{Options{Window: &Window{Tokens: 8, Sink: -2}}, "sink of -2"},
	} {
		if _, err := Resolve(b, dtypes.Float32, 8, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Resolve(%+v): %v, want %q", c.opts, err, c.want)
		}
	}
	for _, c := range []struct {
		lq, lk int
		w      Window
		want   string
	}{{10, 10, Window{Tokens: 4, Sink: 11}, "exceeds the sequence's 10"}, {10, 12, Window{Tokens: 4}, "self-attention"}} {
		exec := MustNewExec(b, func(q, k *Node) *Node { return Attend(q, k, k, Options{Window: &c.w}) })
		_, err := exec.Call(tensors.FromFlatDataAndDimensions(make([]float32, c.lq*8), 1, c.lq, 1, 8),
			tensors.FromFlatDataAndDimensions(make([]float32, c.lk*8), 1, c.lk, 1, 8))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lq %d, Lk %d, %+v: %v, want %q", c.lq, c.lk, c.w, err, c.want)
		}
	}
	if err := (Window{Tokens: 4, Sink: 10}).Check(10); err != nil {
		t.Errorf("a sink of the whole sequence: %v", err)
	}
}
