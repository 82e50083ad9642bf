package h3

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fastvideo/attention"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// fixtureVSA is the VSA of an h3_dit fixture's document, [text | condition | audio | video grid], read
// from its inputs and request.
func fixtureVSA(t *testing.T, fx *testutil.Fixture, sparsity float64, mode attention.Mode) *VSA {
	t.Helper()
	var req struct {
		Frames   int `json:"latent_frames"`
		H        int `json:"latent_h"`
		W        int `json:"latent_w"`
		CondRows int `json:"num_condition_video_rows"`
	}
	if err := fx.DecodeConfig(&req, "request"); err != nil {
		t.Fatal(err)
	}
	p := fixtureConfig(t, fx).PatchSize
	text, _ := fx.I64(t, "in.text_indices")
	audio, _ := fx.I64(t, "in.audio_indices")
	return &VSA{Sparsity: sparsity, TileSize: 64, Mode: mode, Prefix: [3]int{len(text), req.CondRows, len(audio)},
		Grid: [3]int{req.Frames / p[0], req.H / p[1], req.W / p[2]}}
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
		check("sparsity 0, zero gate", vsaForward(t, fx, gatedSource(fx, cfg, 0), fixtureVSA(t, fx, 0, attention.ModeExempt)), true)
		check("sparsity 0, gate", vsaForward(t, fx, gatedSource(fx, cfg, 0.5), fixtureVSA(t, fx, 0, attention.ModeExempt)), false)
		check("sparsity 0.9, compete", vsaForward(t, fx, gatedSource(fx, cfg, 0), fixtureVSA(t, fx, 0.9, attention.ModeCompete)), false)
		all := fixtureVSA(t, fx, 0.9, attention.ModeExempt)
		for b := 0; b < cfg.NumLayers; b++ {
			all.DenseLayers = append(all.DenseLayers, b)
		}
		check("dense layers, zero gate", vsaForward(t, fx, gatedSource(fx, cfg, 0), all), true)
		// Without gate weights in the checkpoint the branch is off (the base H3 checkpoint).
		check("no gate weights", vsaForward(t, fx, &testutil.EditSource{Base: fx.Weights()}, fixtureVSA(t, fx, 0, attention.ModeExempt)), true)
	})
}

func TestVSARejectsWrongLayout(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		in := fixtureInputs(t, fx)
		in.VSA = fixtureVSA(t, fx, 0.5, attention.ModeExempt)
		in.VSA.Prefix[0]++
		if _, err := m.Forward(in); err == nil {
			t.Error("VSA segments that do not cover the sequence: want an error")
		}
	})
}
