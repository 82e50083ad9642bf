package fastvideo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTinyWanFolder writes tiny-wan as a diffusers-style Wan snapshot (model_index.json naming
// pipelineClass, transformer/, vae/, text_encoder/, tokenizer/, scheduler/), the layout of
// Wan-AI/Wan2.1-T2V-1.3B-Diffusers at toy size.
func writeTinyWanFolder(t *testing.T, dir, pipelineClass string) {
	t.Helper()
	tc := newTinyWanComponents(tinyWanSpec())
	tc.sources()
	ws := tc.spec.Wan
	w := folderWriter{t, dir}
	w.file("model_index.json", []byte(`{"_class_name": "`+pipelineClass+`", "_diffusers_version": "0.33.0"}`))
	w.config("transformer/config.json", "WanTransformer3DModel", ws.DiT)
	w.weights("transformer/diffusion_pytorch_model.safetensors", tc.dit)
	w.config("vae/config.json", "AutoencoderKLWan", ws.VAE)
	w.weights("vae/diffusion_pytorch_model.safetensors", tc.vae)
	w.config("text_encoder/config.json", "UMT5EncoderModel", ws.TextEncoder)
	w.weights("text_encoder/model.safetensors", tc.te)
	w.file("tokenizer/tokenizer.json", tc.tokenizerJSON)
	w.file("scheduler/scheduler_config.json", []byte(`{"_class_name": "UniPCMultistepScheduler", "flow_shift": 3.0}`))
}

// TestWanModelFolder loads tiny-wan written as a Wan snapshot through the real-checkpoint path
// (configs, safetensors, tokenizer.json, streamed UMT5) and checks that it denoises to the very
// latents of the in-memory model, for a base (WanPipeline) and a DMD (WanDMDPipeline) snapshot.
func TestWanModelFolder(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		class, variant, preset, tinyPreset string
	}{
		{"WanPipeline", "wan2.1-t2v-1.3b", "wan_t2v_1_3b", "tiny_wan_t2v"},
		{"WanDMDPipeline", "fastwan2.1-t2v-1.3b", "fast_wan_t2v_480p", "tiny_wan_dmd"},
	} {
		t.Run(c.class, func(t *testing.T) {
			dir := t.TempDir()
			writeTinyWanFolder(t, dir, c.class)
			g, err := New(ctx, dir, WithBackend(testBackend()))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m := g.Model()
			if m.Family != FamilyWan || m.Variant != c.variant || m.DefaultPreset != c.preset || m.Wan.DiT.HiddenSize() != 64 ||
				len(m.Notes) != 1 || !strings.Contains(m.Notes[0], "neither 1.3B") {
				t.Fatalf("folder spec %+v, notes %q", m, m.Notes)
			}
			// The folder keeps its variant's presets (480p); the toy size is requested explicitly.
			req := Request{Prompt: "a red fox", Height: 48, Width: 64, NumFrames: 9}
			if c.class == "WanPipeline" {
				req.NumInferenceSteps, req.GuidanceScale = 4, 5
			}
			got := latentsOnly(t, g, req).Latents.Video
			tiny := req
			tiny.Preset = c.tinyPreset
			want := latentsOnly(t, tinyWanGenerator(t), tiny).Latents.Video
			if !sameBits(got, want) {
				t.Fatal("the folder model's latents differ from tiny-wan's")
			}
		})
	}

	// New names what is missing or inconsistent before loading anything.
	dir := t.TempDir()
	writeTinyWanFolder(t, dir, "WanPipeline")
	checkNewNamesMissing(t, dir, []struct{ remove, want string }{
		{"text_encoder/model.safetensors", "text_encoder"},
		{"tokenizer/tokenizer.json", "tokenizer"},
		{"vae/config.json", filepath.Join("vae", "config.json")},
	})
	te := filepath.Join(dir, "text_encoder", "config.json")
	orig, _ := os.ReadFile(te)
	if err := os.WriteFile(te, []byte(strings.Replace(string(orig), `"d_model":32`, `"d_model":48`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, dir); err == nil || !strings.Contains(err.Error(), "text_dim 32") {
		t.Errorf("a 48-wide text encoder: %v", err)
	}
	if err := os.WriteFile(te, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "transformer_2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, dir); err == nil || !strings.Contains(err.Error(), "A14B") {
		t.Errorf("a two-expert snapshot: %v", err)
	}
}
