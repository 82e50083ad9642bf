package h3_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/h3"
	"fastvideo/internal/hostmath"
	"fastvideo/internal/testutil"
)

// writeConfigsOnly writes tiny-h3's configs as a snapshot folder without a single weight file or
// tokenizer: what -random-weights needs of a folder.
func writeConfigsOnly(t *testing.T, dir string) {
	t.Helper()
	spec := h3.TinySpec()
	w := testutil.SnapshotWriter{T: t, Dir: dir}
	w.Config("transformer/config.json", "", spec.DiT)
	w.Config("vae/config.json", "", spec.VAE)
	w.Config("audio_vae/config.json", "", spec.AudioVAE)
	w.Config("text_encoder/config.json", "", h3.TinyTextEncoder())
	w.File("scheduler/scheduler_config.json", []byte(`{"_class_name": "MiniMaxH3Scheduler", "shift": 12.0}`))
	w.File("audio_scheduler/scheduler_config.json", []byte(`{"_class_name": "MiniMaxH3Scheduler", "shift": 3.0}`))
}

// TestRandomWeightsFolder runs the whole pipeline on a folder that holds configs only, with
// weights drawn from a seed: the same seed gives the same latents, another seed others, and
// without random weights the folder is refused for its missing weights.
func TestRandomWeightsFolder(t *testing.T) {
	dir := t.TempDir()
	writeConfigsOnly(t, dir)
	if err := fvtest.NewError(dir); err == nil || !strings.Contains(err.Error(), "transformer") {
		t.Fatalf("a folder without weights opened without random weights: %v", err)
	}
	req := fastvideo.Request{Prompt: "a red fox", Height: 64, Width: 96, NumFrames: 124, NumInferenceSteps: 1,
		Seed: fastvideo.Ptr[int64](7), SkipSave: true, ReturnLatents: true}
	run := func(seed int64, audio bool) *fastvideo.Result {
		r := req
		r.ReturnAudio = audio
		return fvtest.Generate(t, dir, r, fastvideo.WithRandomWeights(seed))
	}
	a, b, c := run(3, true), run(3, false), run(4, false)
	if len(a.Latents.Video) == 0 || len(a.Audio) == 0 {
		t.Fatalf("%d video latents, %d audio samples", len(a.Latents.Video), len(a.Audio))
	}
	for _, v := range append(append([]float32(nil), a.Latents.Video...), a.Audio[0]...) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("random weights gave a non-finite value")
		}
	}
	if !testutil.SameBits(a.Latents.Video, b.Latents.Video) || !testutil.SameBits(a.Latents.Audio, b.Latents.Audio) {
		t.Fatal("the same weights seed gave different outputs")
	}
	if testutil.SameBits(a.Latents.Video, c.Latents.Video) {
		t.Fatal("another weights seed gave the same latents")
	}
}

// TestFP8DType: WithDType(FP8) runs tiny-h3 for FastH3's 4 steps with its DiT's core linears in float8
// (the result and its plan say fp8, the plan sizing the converted weights) and its latents stay close
// to the dense run's; Wan refuses it before loading, and in a plan.
func TestFP8DType(t *testing.T) {
	req := fastvideo.Request{Prompt: "a red fox", Height: 64, Width: 96, NumFrames: 5, NumInferenceSteps: 4,
		Seed: fastvideo.Ptr[int64](7), SkipSave: true, ReturnLatents: true}
	run := func(dt fastvideo.DType) *fastvideo.Result {
		return fvtest.Generate(t, h3.TinyName, req, fastvideo.WithDType(dt))
	}
	dense, fp8 := run(fastvideo.F32), run(fastvideo.FP8)
	if fp8.DType != fastvideo.FP8 || testutil.SameBits(dense.Latents.Video, fp8.Latents.Video) {
		t.Fatalf("dtype %s; the FP8 run must report fp8 and differ from the dense one", fp8.DType)
	}
	if p := fp8.Plan; p.WeightsDType != fastvideo.FP8 || p.WeightsBytes >= dense.Plan.WeightsBytes {
		t.Errorf("FP8 run's plan: weights %d bytes in %s; the dense run's %d in %s", p.WeightsBytes, p.WeightsDType,
			dense.Plan.WeightsBytes, dense.Plan.WeightsDType)
	}
	if snr := hostmath.SNRdB(fp8.Latents.Video, dense.Latents.Video); snr < 20 {
		t.Errorf("FP8 latents %.1f dB from the dense ones (want >= 20 dB after four steps)", snr)
	} else {
		t.Logf("FP8 vs dense latents after four steps: %.1f dB", snr)
	}
	if _, err := fastvideo.New(context.Background(), "tiny-wan", fastvideo.WithBackend("go"), fastvideo.WithDType(fastvideo.FP8)); err == nil {
		t.Error("Wan accepted the FP8 dtype")
	}
	var re *fastvideo.RequestError
	if _, err := fastvideo.Plan("tiny-wan", fastvideo.Request{}, fastvideo.WithDType(fastvideo.FP8)); !errors.As(err, &re) || re.Field != "dtype" {
		t.Errorf("a Wan plan in FP8: %v; want a RequestError on dtype", err)
	}
}
