package wan

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// gatedSource adds to_gate_compress weights and biases to the fixture, as a FastWan student carries
// them: each block's own attn1.to_q scaled by amp (0 gives zero gates).
func gatedSource(t *testing.T, fx *testutil.Fixture, cfg Config, amp float32) *testutil.EditSource {
	rep := map[string]safetensors.Info{}
	for b := 0; b < cfg.NumLayers; b++ {
		for _, part := range []string{"weight", "bias"} {
			v, sh := fx.F32(t, fmt.Sprintf("w.blocks.%d.attn1.to_q.%s", b, part))
			for i := range v {
				v[i] *= amp
			}
			name := fmt.Sprintf("blocks.%d.to_gate_compress.%s", b, part)
			rep[name] = safetensors.Info{Name: name, DType: safetensors.F32, Shape: sh, Data: safetensors.F32Bytes(v)}
		}
	}
	return &testutil.EditSource{Base: fx.Weights(), Replace: rep}
}

// vsaInputs is a latent whose token grid (5, 5, 6) has ragged (4,4,4) tiles on every axis: 8 tiles, so
// a sparsity below 1 keeps fewer than all of them (the fixture's own 3×2×3 grid is a single tile).
func vsaInputs(t *testing.T, fx *testutil.Fixture, cfg Config) ForwardInputs {
	in := fixtureInputs(t, fx)
	r := rand.New(rand.NewPCG(6, 6))
	in.Frames, in.Height, in.Width = 5, 10, 12
	in.Latent = make([]float32, cfg.InChannels*in.Frames*in.Height*in.Width)
	for i := range in.Latent {
		in.Latent[i] = float32(r.NormFloat64())
	}
	in.Timesteps = []float32{757}
	return in
}

func vsaForward(t *testing.T, fx *testutil.Fixture, src *testutil.EditSource, vsa *VSA) []float32 {
	t.Helper()
	return gridForward(t, fx, src, Options{}, func(in *ForwardInputs) { in.VSA = vsa })
}

// gridForward runs the model of src (the fixture's configuration, opts) on vsaInputs' ragged grid,
// with set's changes to the inputs.
func gridForward(t *testing.T, fx *testutil.Fixture, src weights.Source, opts Options, set func(*ForwardInputs)) []float32 {
	t.Helper()
	cfg := fixtureConfig(t, fx)
	return testutil.Run(t, func() (*Model, error) { return FromSource(testutil.Backend(t), cfg, src, opts) },
		func(m *Model) ([]float32, error) {
			in := vsaInputs(t, fx, cfg)
			set(&in)
			return m.Forward(in)
		})
}

// Sparsity 0 (k = every tile) with zero gates is the dense forward; a real gate or a real sparsity
// changes it; every layer forced dense with zero gates is dense again.
func TestVSAForwardProperties(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		dense := vsaForward(t, fx, gatedSource(t, fx, cfg, 0), nil)
		check := func(label string, got []float32, same bool) {
			diff, tol := testutil.MaxAbsDiff(got, dense), testutil.ParityTol(dense)
			if same && diff > tol {
				t.Errorf("%s: differs from dense by %.3g (> %.3g)", label, diff, tol)
			}
			if !same && diff <= tol {
				t.Errorf("%s: equals dense (%.3g): the VSA path did nothing", label, diff)
			}
		}
		check("sparsity 0, zero gate", vsaForward(t, fx, gatedSource(t, fx, cfg, 0), &VSA{}), true)
		check("sparsity 0, gate", vsaForward(t, fx, gatedSource(t, fx, cfg, 0.5), &VSA{}), false)
		check("sparsity 0.7, zero gate", vsaForward(t, fx, gatedSource(t, fx, cfg, 0), &VSA{Sparsity: 0.7}), false)
		all := &VSA{Sparsity: 0.9}
		for b := 0; b < cfg.NumLayers; b++ {
			all.DenseLayers = append(all.DenseLayers, b)
		}
		check("dense layers, zero gate", vsaForward(t, fx, gatedSource(t, fx, cfg, 0), all), true)
	})
}

// VSA without gate weights, a sparsity outside [0, 1) or an unknown layer are errors, not a silent
// dense run.
func TestVSARejectsBadRequests(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		if m.HasVSAGates() {
			t.Fatal("the dense fixture has no to_gate_compress, yet HasVSAGates")
		}
		in := vsaInputs(t, fx, fixtureConfig(t, fx))
		in.VSA = &VSA{Sparsity: 0.5}
		if _, err := m.Forward(in); err == nil || !strings.Contains(err.Error(), "to_gate_compress") {
			t.Errorf("VSA without gates: error %v, want one naming to_gate_compress", err)
		}
		cfg := fixtureConfig(t, fx)
		gated := testutil.Run(t, func() (*Model, error) {
			return FromSource(testutil.Backend(t), cfg, gatedSource(t, fx, cfg, 0.1), Options{})
		}, func(m *Model) ([]error, error) {
			var errs []error
			for _, v := range []*VSA{{Sparsity: 1}, {Sparsity: -0.1}, {DenseLayers: []int{cfg.NumLayers}}} {
				in.VSA = v
				_, err := m.Forward(in)
				errs = append(errs, err)
			}
			return errs, nil
		})
		for i, err := range gated {
			if err == nil {
				t.Errorf("bad VSA request %d: no error", i)
			}
		}
	})
}
