package h3_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/h3"
	"fastvideo/internal/testutil"
	"fastvideo/internal/tokenizer/qwen3data"
)

// writeTinyFolder writes tiny-h3 as a diffusers-style snapshot: the same configs and weights a
// real MiniMax H3 folder holds (MiniMaxAI/MiniMax-H3's layout), at toy size.
func writeTinyFolder(t *testing.T, dir string) {
	t.Helper()
	tw, err := h3.NewTinyWeights(h3.TinySpec())
	if err != nil {
		t.Fatal(err)
	}
	writeConfigsOnly(t, dir)
	w := testutil.SnapshotWriter{T: t, Dir: dir}
	w.Weights("transformer/diffusion_pytorch_model.safetensors", tw.DiT)
	w.Weights("vae/diffusion_pytorch_model.safetensors", tw.VideoVAE)
	w.Weights("audio_vae/diffusion_pytorch_model.safetensors", tw.AudioVAE)
	w.Weights("text_encoder/model.safetensors", tw.TextEncoder)
	w.File("tokenizer/tokenizer.json.gz", qwen3data.Gzip())
}

// TestModelFolder loads tiny-h3 written as a snapshot folder through the real-checkpoint path
// (configs, safetensors, tokenizer folder, streamed text encoder) and checks that it denoises to the
// very latents of the in-memory model; New names each missing file before loading anything.
func TestModelFolder(t *testing.T) {
	dir := t.TempDir()
	writeTinyFolder(t, dir)
	g := fvtest.Open(t, dir)
	if m := g.Model(); m.Dir != dir || m.Family != h3.FamilyName || m.Variant != "h3" || m.DefaultPreset != "minimax_h3_t2va" ||
		m.Presets[0].NumFrames != 124 {
		t.Fatalf("folder model %+v", m)
	}
	// Planning and loading read one config: the folder's DiT is what the DiT package loads.
	m, err := fastvideo.LookupModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec := m.(*h3.Spec)
	if c, err := h3dit.ReadConfig(filepath.Join(dir, "transformer")); err != nil || spec.DiT.HiddenSize != 128 || !reflect.DeepEqual(c, spec.DiT) {
		t.Fatalf("folder DiT %+v, h3.ReadConfig %+v (%v)", spec.DiT, c, err)
	}
	// A folder model keeps the released 5-15 s window: 124 frames.
	req := fastvideo.Request{Prompt: "a red fox", Height: 64, Width: 96, NumFrames: 124, NumInferenceSteps: 1, Seed: fastvideo.Ptr[int64](7)}
	res := fvtest.LatentsOnly(t, g, req)
	got := res.Latents
	want := fvtest.LatentsOnly(t, fvtest.Open(t, h3.TinyName), req).Latents
	t.Logf("folder model: %+v", res.Timings)
	if len(want.Video) == 0 || len(want.Audio) == 0 {
		t.Fatalf("tiny-h3 returned %d video and %d audio latents", len(want.Video), len(want.Audio))
	}
	if !testutil.SameBits(got.Video, want.Video) || !testutil.SameBits(got.Audio, want.Audio) {
		t.Fatal("the folder model's latents differ from tiny-h3's")
	}

	// A missing config or tokenizer is invalid input for the model field; missing weights are an
	// error naming the component folder.
	testutil.CheckEachMissing(t, dir, []testutil.MissingFile{
		{Remove: "audio_vae/diffusion_pytorch_model.safetensors", Named: filepath.Join(dir, "audio_vae"), Invalid: false},
		{Remove: "tokenizer/tokenizer.json.gz", Named: filepath.Join(dir, "tokenizer", "tokenizer.json"), Invalid: true},
		{Remove: "vae/config.json", Named: filepath.Join(dir, "vae", "config.json"), Invalid: true},
	}, func() error { return fvtest.NewError(dir) }, fvtest.IsModelError)
}

// TestHostileConfigsFailInNew: a folder whose DiT config claims what its weights do not hold (a
// billion layers, or one layer more than the checkpoint has, or other widths) fails in New, from
// configs and headers alone, instead of exhausting memory or failing halfway through a load.
func TestHostileConfigsFailInNew(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(cfg *h3dit.Config)
		want string
	}{
		{"a billion layers", func(cfg *h3dit.Config) { cfg.NumLayers = 1e9 }, "num_layers = 1000000000, must be in 1..1024"},
		{"one layer more than the weights", func(cfg *h3dit.Config) { cfg.NumLayers++ }, "transformer_blocks.2."},
		{"other widths", func(cfg *h3dit.Config) { cfg.FFNDim *= 2 }, "the config says"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTinyFolder(t, dir)
			cfg := h3.TinySpec().DiT
			c.edit(&cfg)
			testutil.SnapshotWriter{T: t, Dir: dir}.Config("transformer/config.json", "", cfg)
			done := make(chan error, 1)
			go func() {
				g, err := fastvideo.New(context.Background(), dir, fastvideo.WithBackend(testutil.BackendSpec()))
				if err == nil {
					g.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("New: %v, want an error mentioning %q", err, c.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("New did not return")
			}
		})
	}
}
