package schedule

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// The steps' updates run over the cores (elementwise): at a latent's size, cut into several ranges,
// each element, with out aliasing the sample or not, is what the step's formula gives it alone.
func TestStepsOverCores(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // several ranges even on a machine of one or two cores
	const n = 1<<17 + 3
	rng := rand.New(rand.NewPCG(1, 2))
	random := func() []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	h3, err := NewH3Ladder(5, 4)
	if err != nil {
		t.Fatal(err)
	}
	euler, err := NewFlowMatchEuler(3, 4)
	if err != nil {
		t.Fatal(err)
	}
	dmd, err := NewDMDLadder([]int{1000, 757, 522})
	if err != nil {
		t.Fatal(err)
	}
	a, b := random(), random()
	cases := []struct {
		name string
		run  func(a, b, out []float32) error
		one  func(i int) float32 // element i alone, from a and b
	}{
		{"H3Ladder.Step", func(a, b, out []float32) error { return h3.Step(1, b, a, out) }, func(i int) float32 {
			sigmaT, ratio := 1-h3.Timesteps[1], h3.Sigmas[2]/h3.Sigmas[1]
			x0 := a[i] + float32(sigmaT*b[i])
			return float32(ratio*a[i]) + float32((1-ratio)*x0)
		}},
		{"ScaleNoise", func(a, b, out []float32) error { return ScaleNoise(a, b, 0.999, out) }, func(i int) float32 {
			return float32(0.999*a[i]) + float32((1-float32(0.999))*b[i])
		}},
		{"FlowMatchEuler.Step", func(a, b, out []float32) error { return euler.Step(2, b, a, out) }, func(i int) float32 {
			return a[i] + float32((euler.Sigmas[3]-euler.Sigmas[2])*b[i])
		}},
		{"DMDLadder.PredictX0", func(a, b, out []float32) error { return dmd.PredictX0(1, b, a, out) }, func(i int) float32 {
			return float32(float64(a[i]) - float64(dmd.sigma64[1]*float64(b[i])))
		}},
		{"DMDLadder.Renoise", func(a, b, out []float32) error { return dmd.Renoise(0, a, b, out) }, func(i int) float32 {
			return float32((1-dmd.Sigmas[1])*a[i]) + float32(dmd.Sigmas[1]*b[i])
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := make([]float32, n)
			if err := c.run(a, b, out); err != nil {
				t.Fatal(err)
			}
			inPlace := append([]float32(nil), a...)
			if err := c.run(inPlace, b, inPlace); err != nil {
				t.Fatal(err)
			}
			for i := range out {
				want := c.one(i)
				if out[i] != want || inPlace[i] != want {
					t.Fatalf("element %d: %g, in place %g, want %g", i, out[i], inPlace[i], want)
				}
			}
		})
	}
}
