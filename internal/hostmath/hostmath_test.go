package hostmath

import (
	"math"
	"testing"
)

func TestTimestepSinusoidAtZero(t *testing.T) {
	// t = 0 gives [1×128, 0×128] for the release's 256 frequencies.
	e := TimestepSinusoid([]float32{0}, 256)
	for i, v := range e {
		want := float32(0)
		if i < 128 {
			want = 1
		}
		if v != want {
			t.Fatalf("sinusoid(0)[%d] = %v, want %v", i, v, want)
		}
	}
}

func TestTimestepSinusoidRows(t *testing.T) {
	// Row r is timestep r; freq_i = exp(−ln(10000)·i/half) in float32, the product rounded to float32.
	ts := []float32{1000, 757, 0.5}
	const dim = 8
	e := TimestepSinusoid(ts, dim)
	if len(e) != len(ts)*dim {
		t.Fatalf("%d values, want %d", len(e), len(ts)*dim)
	}
	for r, ts := range ts {
		for i := 0; i < dim/2; i++ {
			f := float32(math.Exp(float64(float32(float32(-math.Log(10000))*float32(i)) / float32(dim/2))))
			a := float64(ts * f)
			if c, s := e[r*dim+i], e[r*dim+dim/2+i]; c != float32(math.Cos(a)) || s != float32(math.Sin(a)) {
				t.Errorf("row %d freq %d: (cos, sin) = (%v, %v), want (%v, %v)", r, i, c, s, float32(math.Cos(a)), float32(math.Sin(a)))
			}
		}
	}
}

func TestLinspace(t *testing.T) {
	for _, c := range []struct {
		start, stop float64
		num         int
		want        []float64
	}{
		{0, 1, 0, []float64{}},
		{3, 9, 1, []float64{3}},
		{0, 1, 5, []float64{0, 0.25, 0.5, 0.75, 1}},
		{1, 0.001, 3, []float64{1, 0.5005, 0.001}},
		{2, 2, 3, []float64{2, 2, 2}},
	} {
		got := Linspace(c.start, c.stop, c.num)
		if len(got) != len(c.want) {
			t.Fatalf("Linspace(%v, %v, %d) has %d values, want %d", c.start, c.stop, c.num, len(got), len(c.want))
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("Linspace(%v, %v, %d)[%d] = %v, want %v", c.start, c.stop, c.num, i, got[i], c.want[i])
			}
		}
	}
	// The last value is stop exactly, whatever the rounding of the steps before it.
	if v := Linspace(0.1, 0.7, 7); v[6] != 0.7 {
		t.Errorf("Linspace(0.1, 0.7, 7) ends at %v, want 0.7", v[6])
	}
}
