package schedule

import (
	"fmt"
	"math"
	"testing"

	"fastvideo/internal/testutil"
)

// relTol is the spec's tolerance for float values the reference does not
// compute in one deterministic float32 order: 1e-6 relative (to max(1,|ref|)).
func relTol(want []float32) float64 {
	m := 0.0
	for _, v := range want {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return 1e-6 * math.Max(1, m)
}

// countDiffBits reports how many elements are not bit-identical.
func countDiffBits(got, want []float32) int {
	n := 0
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			n++
		}
	}
	return n
}

// checkTrajectory runs steps steps of step from the fixture's in.<name>.sample0, feeding step k the
// k-th slice of in.<name>.<inputs> (velocities or model outputs), and compares each result with the
// k-th of out.<name>.samples. With followReference each step starts from the reference sample,
// else from the previous result. It returns the last result, the largest error and the count of
// elements that are not bit-identical.
func checkTrajectory(t *testing.T, fx *testutil.Fixture, name, inputs string, steps int, followReference bool,
	step func(k int, in, x []float32) ([]float32, error)) (last []float32, worst float64, diff int) {
	t.Helper()
	x, shape := fx.F32(t, "in."+name+".sample0")
	in, _ := fx.F32(t, "in."+name+"."+inputs)
	samples, _ := fx.F32(t, "out."+name+".samples")
	n := len(x)
	for k := 0; k < steps; k++ {
		next, err := step(k, in[k*n:(k+1)*n], x)
		if err != nil {
			t.Fatal(err)
		}
		ref := samples[k*n : (k+1)*n]
		d := testutil.AssertClose(t, fmt.Sprintf("step %d", k), next, ref, shape, relTol(ref))
		worst = math.Max(worst, d.MaxAbs)
		diff += countDiffBits(next, ref)
		x = next
		if followReference {
			x = ref
		}
	}
	return x, worst, diff
}

func TestH3ScheduleFixtures(t *testing.T) {
	testutil.ForEachFixture(t, "h3_schedule", func(t *testing.T, fx *testutil.Fixture) {
		var cases map[string]map[string]any
		if err := fx.DecodeConfig(&cases, "cases"); err != nil {
			t.Fatal(err)
		}
		for name, c := range cases {
			t.Run(name, func(t *testing.T) {
				shift := c["shift"].(float64)
				points := int(c["num_inference_steps(grid points)"].(float64))
				lad, err := NewH3Ladder(shift, points-1)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := fx.F32(t, "out."+name+".sigmas")
				testutil.AssertBitExact(t, "sigmas", lad.Sigmas, want)
				wantT, _ := fx.F32(t, "out."+name+".timesteps")
				testutil.AssertBitExact(t, "timesteps", lad.Timesteps, wantT)

				// The ladder is stateless: each step starts from the reference sample.
				_, worst, diff := checkTrajectory(t, fx, name, "velocities", lad.Steps(), true,
					func(k int, velocity, x []float32) ([]float32, error) {
						next := make([]float32, len(x))
						return next, lad.Step(k, velocity, x, next)
					})
				t.Logf("%s: %d-point grid bit-exact; %d steps, max abs error %.3g, %d non-identical elements",
					name, points, lad.Steps(), worst, diff)
			})
		}
		t.Run("explicit", func(t *testing.T) {
			if !fx.Has("out.explicit.sigmas") {
				t.Skip("no explicit-sigmas case in this fixture")
			}
			// The explicit input is stored only as its float32 result, which
			// holds the same values (1, .75, .5, .25, 0 are exact).
			want, _ := fx.F32(t, "out.explicit.sigmas")
			in := make([]float64, len(want))
			for i, v := range want {
				in[i] = float64(v)
			}
			lad, err := NewH3LadderFromSigmas(in)
			if err != nil {
				t.Fatal(err)
			}
			testutil.AssertBitExact(t, "sigmas", lad.Sigmas, want)
			wantT, _ := fx.F32(t, "out.explicit.timesteps")
			testutil.AssertBitExact(t, "timesteps", lad.Timesteps, wantT)
		})
		t.Run("scale_noise", func(t *testing.T) {
			if !fx.Has("out.scale_noise.t0.999") {
				t.Skip("no scale_noise case in this fixture")
			}
			clean, _ := fx.F32(t, "in.scale_noise.clean")
			noise, _ := fx.F32(t, "in.scale_noise.noise")
			want, _ := fx.F32(t, "out.scale_noise.t0.999")
			got := make([]float32, len(clean))
			if err := ScaleNoise(clean, noise, 0.999, got); err != nil {
				t.Fatal(err)
			}
			testutil.AssertBitExact(t, "scale_noise", got, want)
		})
	})
}

func TestWanUniPCFixtures(t *testing.T) {
	testutil.ForEachFixture(t, "wan_unipc_schedule", func(t *testing.T, fx *testutil.Fixture) {
		var cases map[string]struct {
			Shift     float64 `json:"shift"`
			Steps     int     `json:"num_inference_steps"`
			Timesteps []int64 `json:"timesteps"`
		}
		if err := fx.DecodeConfig(&cases, "cases"); err != nil {
			t.Fatal(err)
		}
		for name, c := range cases {
			t.Run(name, func(t *testing.T) {
				u, err := NewUniPC(c.Shift, c.Steps)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := fx.F32(t, "out."+name+".sigmas")
				testutil.AssertBitExact(t, "sigmas", u.Sigmas, want)
				wantT, _ := fx.I64(t, "out."+name+".timesteps")
				for i := range wantT {
					if u.Timesteps[i] != wantT[i] || u.Timesteps[i] != c.Timesteps[i] {
						t.Fatalf("timesteps[%d] = %d, want %d", i, u.Timesteps[i], wantT[i])
					}
				}
				// The solver carries history, so it runs on its own
				// trajectory: errors would accumulate, not hide.
				x, worst, diff := checkTrajectory(t, fx, name, "model_outputs", u.Steps(), false,
					func(_ int, modelOutput, x []float32) ([]float32, error) { return u.Step(modelOutput, x) })
				if _, err := u.Step(x, x); err == nil {
					t.Error("a step past the end must fail")
				}
				t.Logf("%s: sigmas bit-exact, timesteps exact; %d steps, max abs error %.3g, %d of %d elements not bit-identical",
					name, u.Steps(), worst, diff, u.Steps()*len(x))
			})
		}
	})
}
