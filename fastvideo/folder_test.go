package fastvideo

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/tokenizer/qwen3data"
	"fastvideo/internal/weights"
)

// writeTinyFolder writes tiny-h3 as a diffusers-style snapshot: the same configs and weights a
// real MiniMax H3 folder holds, at toy size.
func writeTinyFolder(t *testing.T, dir string) {
	t.Helper()
	tc := newTinyComponents(registry["tiny-h3"]())
	tc.sources()
	write := func(rel string, data []byte) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON := func(rel string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		write(rel, data)
	}
	writeWeights := func(rel string, src *weights.Synthetic) {
		t.Helper()
		var ts []safetensors.Tensor
		for _, n := range src.Names() {
			info, _ := src.Tensor(n)
			ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(filepath.Join(dir, rel), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON("transformer/config.json", h3Config(tinyDiT()))
	writeWeights("transformer/diffusion_pytorch_model.safetensors", tc.dit)
	writeJSON("vae/config.json", tinyVideoVAE())
	writeWeights("vae/diffusion_pytorch_model.safetensors", tc.video)
	writeJSON("audio_vae/config.json", tinyAudioVAE())
	writeWeights("audio_vae/diffusion_pytorch_model.safetensors", tc.audio)
	writeJSON("text_encoder/config.json", tinyTextEncoder())
	writeWeights("text_encoder/model.safetensors", tc.te)
	write("tokenizer/tokenizer.json.gz", qwen3data.Gzip())
	write("scheduler/scheduler_config.json", []byte(`{"_class_name": "MiniMaxH3Scheduler", "shift": 12.0}`))
	write("audio_scheduler/scheduler_config.json", []byte(`{"_class_name": "MiniMaxH3Scheduler", "shift": 3.0}`))
}

// TestModelFolder loads tiny-h3 written as a snapshot folder through the real-checkpoint path
// (configs, safetensors, tokenizer folder, streamed text encoder) and checks that it denoises to the
// very latents of the in-memory model.
func TestModelFolder(t *testing.T) {
	dir := t.TempDir()
	writeTinyFolder(t, dir)
	ctx := context.Background()
	g, err := New(ctx, dir, WithBackend(testBackend()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if m := g.Model(); m.Dir != dir || m.Variant != "h3" || m.DiT.HiddenSize != 128 || m.Presets[m.DefaultPreset].NumFrames != 124 {
		t.Fatalf("folder spec %+v", m)
	}
	// A folder model keeps the released 5-15 s window: 124 frames.
	req := Request{Prompt: "a red fox", Height: 64, Width: 96, NumFrames: 124, NumInferenceSteps: 1, Seed: Ptr[int64](7)}
	res := latentsOnly(t, g, req)
	got := res.Latents
	want := latentsOnly(t, tinyGenerator(t), req).Latents
	t.Logf("folder model: %+v", res.Timings)
	if !sameBits(got.Video, want.Video) || !sameBits(got.Audio, want.Audio) {
		t.Fatal("the folder model's latents differ from tiny-h3's")
	}

	// New names what is missing before loading anything.
	for _, c := range []struct{ remove, want string }{
		{"audio_vae/diffusion_pytorch_model.safetensors", "audio_vae"},
		{"tokenizer/tokenizer.json.gz", "tokenizer"},
		{"vae/config.json", filepath.Join("vae", "config.json")},
	} {
		p := filepath.Join(dir, c.remove)
		if err := os.Rename(p, p+".away"); err != nil {
			t.Fatal(err)
		}
		if _, err := New(ctx, dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("without %s: New error %v, want one naming %q", c.remove, err, c.want)
		}
		if err := os.Rename(p+".away", p); err != nil {
			t.Fatal(err)
		}
	}
}
