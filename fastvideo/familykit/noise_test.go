package familykit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"fastvideo/internal/testutil"
)

// serialNoise is the stream one value pair at a time, as Fill computed it before its transforms
// ran over the cores.
func serialNoise(seed int64, stream NoiseStream, n int) []float32 {
	src := rand.NewPCG(uint64(seed), uint64(stream)*0x9e3779b97f4a7c15)
	out := make([]float32, 0, n+1)
	for len(out) < n {
		u1 := (float64(src.Uint64()>>11) + 1) / (1 << 53)
		u2 := float64(src.Uint64()>>11) / (1 << 53)
		r := math.Sqrt(-2 * math.Log(u1))
		s, c := math.Sincos(2 * math.Pi * u2)
		out = append(out, float32(r*c), float32(r*s))
	}
	return out
}

// Fill gives every value of the serial stream, bit for bit, across the cores' ranges, odd lengths (the
// spare value carried to the next call) and calls of any size.
func TestGaussianStreamMatchesSerial(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // several ranges even on a machine of one or two cores
	const size = 1 << 16
	total := 2*size + 11
	want := serialNoise(5, VideoNoise, total)
	testutil.AssertBitExact(t, "GaussianNoise against the serial stream", GaussianNoise(5, VideoNoise, total), want[:total])
	g := NewGaussianStream(5, VideoNoise)
	at := 0
	for _, n := range []int{0, 1, 3, 2, 2*size - 1, 5, 1} {
		got := make([]float32, n)
		g.Fill(got)
		testutil.AssertBitExact(t, fmt.Sprintf("a fill of %d values at %d against the serial stream", n, at), got, want[at:at+n])
		at += n
	}
}

// A PCG jumped n draws ahead draws what the sequence does after n draws, and its state is the one the
// sequence reaches: the LCG constants are math/rand/v2's.
func TestPCGAfter(t *testing.T) {
	seq := rand.NewPCG(7, 11)
	start := pcgState(seq)
	drawn := uint64(0)
	for _, n := range []uint64{0, 1, 2, 3, 64, 1000, 65537} {
		for ; drawn < n; drawn++ {
			seq.Uint64()
		}
		jumped := pcgAfter(start, n)
		if pcgState(jumped) != pcgState(seq) {
			t.Fatalf("after %d draws: state %+v, the sequence's %+v", n, pcgState(jumped), pcgState(seq))
		}
		want := *seq
		for i := range 5 {
			if a, b := jumped.Uint64(), want.Uint64(); a != b {
				t.Fatalf("after %d draws, draw %d: %#x, want %#x", n, i, a, b)
			}
		}
	}
}
