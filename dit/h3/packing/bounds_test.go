package packing

import (
	"math"
	"testing"
)

// TestMaxNumFramesIsTheRoPETimeTurn derives MaxNumFrames: the largest 17n+5
// count whose span fits in one turn of the slowest time frequency
// (rope_theta 10000, 16 frequencies: 10000^(-15/16)).
func TestMaxNumFramesIsTheRoPETimeTurn(t *testing.T) {
	turn := 2 * math.Pi / math.Pow(10000, -15.0/16)
	span := func(frames int) float64 { return float64(frames) * FrameRescale }
	if span(MaxNumFrames) > turn || span(MaxNumFrames+FramesPerChunk) <= turn {
		t.Fatalf("MaxNumFrames=%d spans %g units; one turn is %g", MaxNumFrames, span(MaxNumFrames), turn)
	}
	if a, err := AlignNumFrames(MaxNumFrames); err != nil || a != MaxNumFrames {
		t.Fatalf("MaxNumFrames must be aligned: align(%d) = %d, %v", MaxNumFrames, a, err)
	}
	// The bounds keep every RoPE time exact in float32 (the DiT rounds the
	// float64 positions to float32 before use).
	if MaxTextTokens+turn >= 1<<24 {
		t.Fatalf("text positions plus a clip (%g) reach float32's exact-integer range", MaxTextTokens+turn)
	}
}

func TestOutOfRangeInputsFail(t *testing.T) {
	for _, n := range []int{math.MinInt, -1, 0, MaxNumFrames + 1, math.MaxInt - 1, math.MaxInt} {
		if _, err := AlignNumFrames(n); err == nil {
			t.Errorf("AlignNumFrames(%d) must fail", n)
		}
		if _, err := VideoLatentFrames(n); err == nil {
			t.Errorf("VideoLatentFrames(%d) must fail", n)
		}
		if _, err := ResolveTargetNumFrames(n); err == nil {
			t.Errorf("ResolveTargetNumFrames(%d) must fail", n)
		}
	}
	for _, hw := range [][2]int{{320000, 320000}, {9223372036854775776, 32}, {32, -32}, {MaxCanvasSide + 32, 32}} {
		if _, err := NewGeometry(hw[0], hw[1], 124); err == nil {
			t.Errorf("NewGeometry(%d, %d, 124) must fail", hw[0], hw[1])
		}
		if _, _, err := CeilCanvas(hw[0], hw[1]); err == nil {
			t.Errorf("CeilCanvas(%d, %d) must fail", hw[0], hw[1])
		}
		if _, _, err := ResolveTargetCanvas(hw[0], hw[1], [2]float64{16, 9}, VAESpatialRatio); err == nil {
			t.Errorf("ResolveTargetCanvas(%d, %d) must fail", hw[0], hw[1])
		}
	}
	// The largest canvas at the longest clip packs too many rows.
	if _, err := NewGeometry(MaxCanvasSide, MaxCanvasSide, MaxNumFrames); err == nil {
		t.Error("a maximal canvas at MaxNumFrames must exceed MaxSequenceLength")
	}
	if _, err := PlanFastTemporal(124, math.MaxInt); err == nil {
		t.Error("PlanFastTemporal with a huge factor must fail")
	}
	if _, err := PlanFastSpatial(480, 832, math.MaxInt); err == nil {
		t.Error("PlanFastSpatial with a huge scale must fail")
	}
	for _, req := range []Request{
		{NumTextTokens: MaxTextTokens + 1, LatentFrames: 1, LatentHeight: 2, LatentWidth: 2},
		{LatentFrames: math.MaxInt, LatentHeight: math.MaxInt - 1, LatentWidth: 2},
		{LatentFrames: 1 << 20, LatentHeight: 1 << 20, LatentWidth: 1 << 20, PatchSize: [3]int{1, 1, 1}},
		{LatentFrames: 1, LatentHeight: 2, LatentWidth: 2, AudioLatents: math.MaxInt},
		{LatentFrames: 1, LatentHeight: 2, LatentWidth: 2, PatchSize: [3]int{0, 1, 1}},
		{LatentFrames: 1, LatentHeight: 2, LatentWidth: 2, VideoTemporalScale: math.Inf(1)},
		{LatentFrames: 1, LatentHeight: 2, LatentWidth: 2, VideoTemporalScale: math.NaN()},
	} {
		if _, err := Build(req); err == nil {
			t.Errorf("Build(%+v) must fail", req)
		}
	}
	if _, err := PatchifyVideo(make([]float32, 8), 2, 2, 2, 1, [3]int{0, 1, 1}); err == nil {
		t.Error("a zero patch must be rejected")
	}
	if _, err := PackAudio(make([]float32, 2), -1, -1); err == nil {
		t.Error("negative audio dimensions must be rejected")
	}
	if _, err := PatchifyVideo(make([]float32, 4), math.MaxInt/2+1, 2, 2, 2, [3]int{}); err == nil {
		t.Error("a latent whose size overflows must be rejected")
	}
}

func FuzzAlignNumFrames(f *testing.F) {
	for _, n := range []int{-5, 0, 1, 5, 6, 124, 360, 363, MaxNumFrames, MaxNumFrames + 1, math.MaxInt} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int) {
		a, err := AlignNumFrames(n)
		if n < 1 || n > MaxNumFrames {
			if err == nil {
				t.Fatalf("align(%d) = %d, want an error", n, a)
			}
			return
		}
		if err != nil || a < n || a-n >= FramesPerChunk || a%FramesPerChunk != LatentsPerChunk || a > MaxNumFrames {
			t.Fatalf("align(%d) = %d, %v", n, a, err)
		}
		if _, err := VideoLatentFrames(a); err != nil {
			t.Fatalf("VideoLatentFrames(align(%d)=%d): %v", n, a, err)
		}
	})
}

func FuzzNewGeometry(f *testing.F) {
	f.Add(480, 832, 124, 93)
	f.Add(320000, 320000, 124, 0)
	f.Add(9223372036854775776, 32, 124, 0)
	f.Add(MaxCanvasSide, MaxCanvasSide, 345, 1000)
	f.Fuzz(func(t *testing.T, height, width, frames, textTokens int) {
		g, err := NewGeometry(height, width, frames)
		if err != nil {
			return
		}
		if height > MaxCanvasSide || width > MaxCanvasSide || frames > MaxNumFrames || g.NonTextRows() > MaxSequenceLength {
			t.Fatalf("NewGeometry(%d, %d, %d) accepted out-of-range input: %+v", height, width, frames, g)
		}
		l, err := Build(g.Request(nil, textTokens))
		if err != nil {
			if textTokens >= 0 && textTokens <= MaxTextTokens && textTokens+g.NonTextRows() <= MaxSequenceLength {
				t.Fatalf("Build of an in-range geometry %+v with %d tokens: %v", g, textTokens, err)
			}
			return
		}
		if l.SequenceLength != textTokens+g.NonTextRows() || l.SequenceLength > MaxSequenceLength {
			t.Fatalf("layout of %d rows for %d tokens and geometry %+v", l.SequenceLength, textTokens, g)
		}
	})
}
