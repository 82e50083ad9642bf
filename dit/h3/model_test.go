package h3

import (
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3/packing"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

// fixtureConfig decodes the tiny config a fixture was generated with; fixtureModel opens the model of
// a fixture on the test backend.
var fixtureConfig, fixtureModel = testutil.FixtureReaders(ParseConfig, FromSource, "arch_config")

// mustForward runs the model once; an error fails the test.
func mustForward(t testing.TB, m *Model, in ForwardInputs) ForwardOutputs {
	t.Helper()
	out, err := m.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func i32(t *testing.T, fx *testutil.Fixture, name string) []int32 {
	t.Helper()
	v, _ := fx.I64(t, name)
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func fixtureInputs(t *testing.T, fx *testutil.Fixture) ForwardInputs {
	t.Helper()
	video, _ := fx.F32(t, "in.hidden_states")
	audio, _ := fx.F32(t, "in.audio_hidden_states")
	text, _ := fx.F32(t, "in.encoder_hidden_states")
	ts, _ := fx.F32(t, "in.timestep")
	pos, _ := fx.F64(t, "in.position_ids")
	return ForwardInputs{
		VideoRows: video, AudioRows: audio, Text: text, Timesteps: ts,
		TimestepIndices: i32(t, fx, "in.timestep_indices"), TokenTags: i32(t, fx, "in.token_tags"),
		PositionIDs:  pos,
		VideoIndices: i32(t, fx, "in.video_indices"), AudioIndices: i32(t, fx, "in.audio_indices"),
		TextIndices: i32(t, fx, "in.text_indices"),
	}
}

// convertFixture writes the fixture's weights converted with bits (group 64, BF16 scales and biases, as
// MLX checkpoints store them) to a new folder; there is no config.json: the config travels in the
// manifest.
func convertFixture(t *testing.T, fx *testutil.Fixture, bits int, opts ConvertOptions) string {
	t.Helper()
	opts.Scheme = quant.Scheme{Bits: bits, GroupSize: quant.DefaultGroupSize}
	opts.ScaleDType = safetensors.BF16
	return writeConvertedFixture(t, fx, opts)
}

// writeConvertedFixture writes the fixture's weights converted with opts to a new folder.
func writeConvertedFixture(t *testing.T, fx *testutil.Fixture, opts ConvertOptions) string {
	t.Helper()
	ts, man, err := Convert(fx.Weights(), fixtureArch(t, fx), opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteConverted(dir, ts, man); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkActs compares every float act.* tensor of the fixture with the intermediate the forward traced
// under the same name (values in row-major order; the fixture's batch axis of 1 is implicit in ours).
func checkActs(t *testing.T, fx *testutil.Fixture, acts testutil.Trace) {
	t.Helper()
	acts.CheckActs(t, fx, func(key string, got testutil.Traced) []float32 {
		switch key {
		case "adaln_indices": // integers: exact
			name := "act." + key
			want, _ := fx.I64(t, name)
			if len(got.Values) != len(want) {
				t.Errorf("%s: %d values, want %d", name, len(got.Values), len(want))
				return nil
			}
			for i := range want {
				if int64(got.Values[i]) != want[i] {
					t.Errorf("%s[%d] = %v, want %d", name, i, got.Values[i], want[i])
					break
				}
			}
			return nil
		case "block0_adaln_tables": // fixture [6, R, D] (table-major); ours [R, 6, D].
			return testutil.Transpose01(got.Values, got.Shape[0], got.Shape[1], got.Shape[2])
		}
		return got.Values
	})
}

// eulerStep is MiniMaxH3Scheduler.step (fastvideo/models/schedulers/scheduling_minimax_h3.py): x0 = x + (1 − t)·v, r = σ'/σ, r·x + (1 − r)·x0, float32.
func eulerStep(x, v []float32, t, sigma, sigmaNext float32) []float32 {
	out := make([]float32, len(x))
	s := 1 - t
	r := sigmaNext / sigma
	for i := range x {
		x0 := float32(x[i] + float32(s*v[i]))
		out[i] = float32(r*x[i]) + float32((1-r)*x0)
	}
	return out
}

// stepIndex finds the ladder position of timestep t (1 − σ_k == t in float32).
func stepIndex(t *testing.T, sigmas []float32, ts float32) int {
	t.Helper()
	for k := 0; k+1 < len(sigmas); k++ {
		if 1-sigmas[k] == ts {
			return k
		}
	}
	t.Fatalf("timestep %v is not 1 − σ of any step of %v", ts, sigmas)
	return -1
}

func TestForwardParity(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		out, acts := testutil.TracedForward(t, &m.trace, func() (ForwardOutputs, error) { return m.Forward(fixtureInputs(t, fx)) })
		checkOutputs(t, fx, out, acts)
		checkNextRows(t, fx, out)
	})
}

// checkOutputs compares a traced forward's velocities and intermediates with the fixture's.
func checkOutputs(t *testing.T, fx *testutil.Fixture, out ForwardOutputs, acts testutil.Trace) {
	t.Helper()
	wantV, shV := fx.F32(t, "out.video")
	wantA, shA := fx.F32(t, "out.audio")
	testutil.AssertClose(t, "out.video", out.Video, wantV, shV, testutil.ParityTol(wantV))
	testutil.AssertClose(t, "out.audio", out.Audio, wantA, shA, testutil.ParityTol(wantA))
	checkActs(t, fx, acts)
}

// assertOutputsAtDType checks both outputs of a forward computed in dt against the fixture's f32
// reference at dt's tolerance; each label is the output's name followed by suffix.
func assertOutputsAtDType(t *testing.T, fx *testutil.Fixture, out ForwardOutputs, dt dtypes.DType, suffix string) {
	t.Helper()
	for _, c := range []struct {
		name string
		got  []float32
	}{{"out.video", out.Video}, {"out.audio", out.Audio}} {
		want, sh := fx.F32(t, c.name)
		testutil.AssertAtDType(t, c.name+suffix, dt, c.got, want, sh)
	}
}

// checkNextRows applies the scheduler step to the target rows (condition video rows stay fixed) and
// unpatchifies, against out.next_*.
func checkNextRows(t *testing.T, fx *testutil.Fixture, out ForwardOutputs) {
	t.Helper()
	var req struct {
		LatentFrames  int     `json:"latent_frames"`
		LatentH       int     `json:"latent_h"`
		LatentW       int     `json:"latent_w"`
		AudioLatents  int     `json:"num_audio_latents"`
		CondVideoRows int     `json:"num_condition_video_rows"`
		TVideo        float32 `json:"video_timestep"`
		TAudio        float32 `json:"audio_timestep"`
	}
	if err := fx.DecodeConfig(&req, "request"); err != nil {
		t.Fatal(err)
	}
	cfg := fixtureConfig(t, fx)
	cp := cfg.VideoPatchDim()
	vs, _ := fx.F32(t, "in.video_sigmas")
	as, _ := fx.F32(t, "in.audio_sigmas")
	video, _ := fx.F32(t, "in.hidden_states")
	audio, _ := fx.F32(t, "in.audio_hidden_states")
	kv, ka := stepIndex(t, vs, req.TVideo), stepIndex(t, as, req.TAudio)
	skip := req.CondVideoRows * cp
	nextV := eulerStep(video[skip:], out.Video[skip:], req.TVideo, vs[kv], vs[kv+1])
	nextA := eulerStep(audio, out.Audio, req.TAudio, as[ka], as[ka+1])
	want, sh := fx.F32(t, "out.next_video_rows")
	testutil.AssertClose(t, "out.next_video_rows", nextV, want, sh, testutil.ParityTol(want))
	want, sh = fx.F32(t, "out.next_audio_rows")
	testutil.AssertClose(t, "out.next_audio_rows", nextA, want, sh, testutil.ParityTol(want))

	patch := [3]int{cfg.PatchSize[0], cfg.PatchSize[1], cfg.PatchSize[2]}
	lat, err := packing.UnpatchifyVideo(nextV, cfg.InChannels, req.LatentFrames, req.LatentH, req.LatentW, patch)
	if err != nil {
		t.Fatal(err)
	}
	want, sh = fx.F32(t, "out.next_video_latent")
	testutil.AssertClose(t, "out.next_video_latent", lat, want, sh, testutil.ParityTol(want))
	alat, err := packing.UnpackAudio(nextA, cfg.AudioInChannels, req.AudioLatents)
	if err != nil {
		t.Fatal(err)
	}
	want, sh = fx.F32(t, "out.next_audio_latent")
	testutil.AssertClose(t, "out.next_audio_latent", alat, want, sh, testutil.ParityTol(want))
}
