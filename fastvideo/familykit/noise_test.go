package familykit

import (
	"math"
	"math/rand/v2"
	"testing"
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

// Fill gives every value of the serial stream, bit for bit, across its buffered blocks, odd lengths
// (the spare value carried to the next call) and calls of any size.
func TestGaussianStreamMatchesSerial(t *testing.T) {
	total := 2*noiseBlock + 11
	want := serialNoise(5, VideoNoise, total)
	if got := GaussianNoise(5, VideoNoise, total); !sameBits(got, want[:total]) {
		t.Fatal("GaussianNoise differs from the serial stream")
	}
	g := NewGaussianStream(5, VideoNoise)
	at := 0
	for _, n := range []int{0, 1, 3, 2, 2*noiseBlock - 1, 5, 1} {
		got := make([]float32, n)
		g.Fill(got)
		if !sameBits(got, want[at:at+n]) {
			t.Fatalf("a fill of %d values at %d differs from the serial stream", n, at)
		}
		at += n
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
