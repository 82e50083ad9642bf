package h3

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fastvideo/attention"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// tinyVSA is the VSA of the tiny fixture's document: [text 8 | cond 6 | audio 74 | video 7×2×3].
func tinyVSA(sparsity float64, mode attention.Mode) *VSA {
	return &VSA{Sparsity: sparsity, TileSize: 64, Mode: mode, Prefix: [3]int{8, 6, 74}, Grid: [3]int{7, 2, 3}}
}

// gatedSource adds random to_gate_compress matrices (scaled by amp; 0 gives zero gates) to the fixture.
func gatedSource(fx *testutil.Fixture, cfg Config, amp float64) *testutil.EditSource {
	r := rand.New(rand.NewPCG(4, 4))
	rep := map[string]safetensors.Info{}
	for b := 0; b < cfg.NumLayers; b++ {
		w := make([]float32, cfg.InnerDim()*cfg.HiddenSize)
		for i := range w {
			w[i] = float32(r.NormFloat64() * amp)
		}
		name := fmt.Sprintf("transformer_blocks.%d.%s", b, gateSuffix)
		rep[name] = safetensors.Info{Name: name, DType: safetensors.F32, Shape: []int{cfg.InnerDim(), cfg.HiddenSize}, Data: safetensors.F32Bytes(w)}
	}
	return &testutil.EditSource{Base: fx.Weights(), Replace: rep}
}

func vsaForward(t *testing.T, fx *testutil.Fixture, src *testutil.EditSource, vsa *VSA) ForwardOutputs {
	t.Helper()
	cfg := fixtureConfig(t, fx)
	return testutil.Run(t, func() (*Model, error) { return FromSource(testutil.Backend(t), cfg, src, Options{}) },
		func(m *Model) (ForwardOutputs, error) {
			in := fixtureInputs(t, fx)
			in.VSA = vsa
			return m.Forward(in)
		})
}

// Sparsity 0 with zero gates is the dense forward; a real gate or a real sparsity changes it; every
// layer forced dense with zero gates is dense again.
func TestVSAForwardProperties(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		dense := vsaForward(t, fx, gatedSource(fx, cfg, 0), nil)
		check := func(label string, got ForwardOutputs, same bool) {
			diff := testutil.MaxAbsDiff(got.Video, dense.Video)
			tol := testutil.ParityTol(dense.Video)
			if same && diff > tol {
				t.Errorf("%s: differs from dense by %.3g (> %.3g)", label, diff, tol)
			}
			if !same && diff <= tol {
				t.Errorf("%s: equals dense (%.3g): the VSA path did nothing", label, diff)
			}
		}
		check("sparsity 0, zero gate", vsaForward(t, fx, gatedSource(fx, cfg, 0), tinyVSA(0, attention.ModeExempt)), true)
		check("sparsity 0, gate", vsaForward(t, fx, gatedSource(fx, cfg, 0.5), tinyVSA(0, attention.ModeExempt)), false)
		check("sparsity 0.9, compete", vsaForward(t, fx, gatedSource(fx, cfg, 0), tinyVSA(0.9, attention.ModeCompete)), false)
		all := tinyVSA(0.9, attention.ModeExempt)
		for b := 0; b < cfg.NumLayers; b++ {
			all.DenseLayers = append(all.DenseLayers, b)
		}
		check("dense layers, zero gate", vsaForward(t, fx, gatedSource(fx, cfg, 0), all), true)
		// Without gate weights in the checkpoint the branch is off (the base H3 checkpoint).
		check("no gate weights", vsaForward(t, fx, &testutil.EditSource{Base: fx.Weights()}, tinyVSA(0, attention.ModeExempt)), true)
	})
}

func TestVSARejectsWrongLayout(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		in := fixtureInputs(t, fx)
		in.VSA = tinyVSA(0.5, attention.ModeExempt)
		in.VSA.Prefix[0]++
		if _, err := m.Forward(in); err == nil {
			t.Error("VSA segments that do not cover the sequence: want an error")
		}
	})
}
