package wan

import (
	"testing"

	wandit "fastvideo/dit/wan"
	"fastvideo/internal/testutil"
	"fastvideo/schedule"
)

// TestTI2VStepParity reproduces one Wan2.2 TI2V denoising step of FastVideo's DenoisingStage
// (fastvideo/pipelines/stages/denoising.py, ti2v_task; gen_ti2v_step.py) with the pipeline's own
// pieces: the bfloat16 noise blended with the image latent on the first latent frame, the per-token
// timesteps (bfloat16 t, 0 on the first frame), the DiT forward, the UniPC step and the re-pin.
func TestTI2VStepParity(t *testing.T) {
	testutil.ForEachPendingFixture(t, "wan_ti2v_step", "fastvideo/wan/testdata/gen_ti2v_step.py", func(t *testing.T, fx *testutil.Fixture) {
		var c struct {
			Shape [4]int  `json:"latent_shape"`
			Shift float64 `json:"flow_shift"`
			Steps int     `json:"steps"`
		}
		if err := fx.DecodeConfig(&c); err != nil {
			t.Fatal(err)
		}
		ch, frames, h, w := c.Shape[0], c.Shape[1], c.Shape[2], c.Shape[3]
		u, err := schedule.NewUniPC(c.Shift, c.Steps)
		if err != nil {
			t.Fatal(err)
		}
		ladder, _ := fx.I64(t, "in.ladder_timesteps")
		for k, v := range ladder {
			if u.Timesteps[k] != v {
				t.Fatalf("UniPC timesteps %v, upstream %v", u.Timesteps, ladder)
			}
		}
		x, _ := fx.F32(t, "in.noise")
		z, _ := fx.F32(t, "in.image_latent")
		roundBF16(x)
		pinFirstFrame(x, z, ch, frames)
		check := func(name string, got []float32) {
			want, sh := fx.F32(t, name)
			testutil.AssertClose(t, name, got, want, sh, testutil.ParityTol(want))
		}
		check("out.masked_latent", x)

		cfg := testutil.ParseConfig(t, fx, wandit.ParseConfig, "arch_config")
		pt := cfg.PatchSize
		ts := tokenTimesteps(bf16(float32(u.Timesteps[0])), (h/pt[1])*(w/pt[2]), frames/pt[0]*(h/pt[1])*(w/pt[2]))
		check("out.timesteps", ts)
		text, _ := fx.F32(t, "in.encoder_hidden_states")
		v := testutil.Run(t, func() (*wandit.Model, error) {
			return wandit.FromSource(testutil.Backend(t), cfg, fx.Weights(), wandit.Options{})
		}, func(m *wandit.Model) ([]float32, error) {
			return m.Forward(wandit.ForwardInputs{Latent: x, Frames: frames, Height: h, Width: w, Timesteps: ts, Text: text})
		})
		check("out.noise_pred", v)
		next, err := u.Step(v, x)
		if err != nil {
			t.Fatal(err)
		}
		pinFirstFrame(next, z, ch, frames)
		check("out.next_latent", next)
	})
}
