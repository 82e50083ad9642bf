package fastvideo

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// writeTinyWanFolder writes tiny-wan as a diffusers-style Wan snapshot (model_index.json naming
// pipelineClass, transformer/, vae/, text_encoder/, tokenizer/, scheduler/), the layout of
// Wan-AI/Wan2.1-T2V-1.3B-Diffusers at toy size.
func writeTinyWanFolder(t *testing.T, dir, pipelineClass string) {
	t.Helper()
	tc := newTinyWanComponents(tinyWanSpec())
	tc.sources()
	ws := tc.spec.Wan
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
	writeJSON := func(rel, class string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		m["_class_name"] = class
		data, _ = json.Marshal(m)
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
	write("model_index.json", []byte(`{"_class_name": "`+pipelineClass+`", "_diffusers_version": "0.33.0"}`))
	writeJSON("transformer/config.json", "WanTransformer3DModel", ws.DiT)
	writeWeights("transformer/diffusion_pytorch_model.safetensors", tc.dit)
	writeJSON("vae/config.json", "AutoencoderKLWan", ws.VAE)
	writeWeights("vae/diffusion_pytorch_model.safetensors", tc.vae)
	writeJSON("text_encoder/config.json", "UMT5EncoderModel", ws.TextEncoder)
	writeWeights("text_encoder/model.safetensors", tc.te)
	write("tokenizer/tokenizer.json", tc.tokenizerJSON)
	write("scheduler/scheduler_config.json", []byte(`{"_class_name": "UniPCMultistepScheduler", "flow_shift": 3.0}`))
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
	for _, c := range []struct{ remove, want string }{
		{"text_encoder/model.safetensors", "text_encoder"},
		{"tokenizer/tokenizer.json", "tokenizer"},
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
