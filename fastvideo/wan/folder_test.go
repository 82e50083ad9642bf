package wan_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
)

// tinyWanFolder writes tiny-wan as a diffusers-style Wan snapshot (model_index.json naming
// pipelineClass, transformer/, vae/, text_encoder/, tokenizer/, scheduler/), the layout of
// Wan-AI/Wan2.1-T2V-1.3B-Diffusers at toy size, in a fresh temporary folder, and returns the folder.
func tinyWanFolder(t *testing.T, pipelineClass string) string {
	t.Helper()
	tw, err := wan.NewTinyWeights(wan.TinySpec())
	if err != nil {
		t.Fatal(err)
	}
	dir := tinyWanConfigs(t, pipelineClass)
	w := testutil.SnapshotWriter{T: t, Dir: dir}
	w.Weights("transformer/diffusion_pytorch_model.safetensors", tw.DiT)
	w.Weights("vae/diffusion_pytorch_model.safetensors", tw.VAE)
	w.Weights("text_encoder/model.safetensors", tw.TextEncoder)
	w.File("tokenizer/tokenizer.json", tw.TokenizerJSON)
	return dir
}

// tinyWanConfigs writes the configs of tiny-wan's snapshot folder without a weight file or
// tokenizer (what -random-weights needs of a folder) in a fresh temporary folder, and returns it.
func tinyWanConfigs(t *testing.T, pipelineClass string) string {
	t.Helper()
	dir := t.TempDir()
	spec := wan.TinySpec()
	w := testutil.SnapshotWriter{T: t, Dir: dir}
	w.File("model_index.json", []byte(`{"_class_name": "`+pipelineClass+`", "_diffusers_version": "0.33.0"}`))
	w.Config("transformer/config.json", "WanTransformer3DModel", spec.DiT)
	w.Config("vae/config.json", "AutoencoderKLWan", spec.VAE)
	w.Config("text_encoder/config.json", "UMT5EncoderModel", spec.TextEncoder)
	w.File("scheduler/scheduler_config.json", []byte(`{"_class_name": "UniPCMultistepScheduler", "flow_shift": 3.0}`))
	return dir
}

// TestWanModelFolder loads tiny-wan written as a Wan snapshot through the real-checkpoint path
// (configs, safetensors, tokenizer.json, streamed UMT5) and checks that it denoises to the very
// latents of the in-memory model, for a base (WanPipeline) and a DMD (WanDMDPipeline) snapshot.
func TestWanModelFolder(t *testing.T) {
	for _, c := range []struct {
		class, variant, preset, tinyPreset string
	}{
		{"WanPipeline", "wan2.1-t2v-1.3b", "wan_t2v_1_3b", "tiny_wan_t2v"},
		{"WanDMDPipeline", "fastwan2.1-t2v-1.3b", "fast_wan_t2v_480p", "tiny_wan_dmd"},
	} {
		t.Run(c.class, func(t *testing.T) {
			dir := tinyWanFolder(t, c.class)
			g := fvtest.Open(t, dir)
			m := g.Model()
			if m.Family != wan.FamilyName || m.Variant != c.variant || m.DefaultPreset != c.preset ||
				len(m.Notes) != 1 || !strings.Contains(m.Notes[0], "neither 1.3B") {
				t.Fatalf("folder model %+v, notes %q", m, m.Notes)
			}
			if spec := lookup(t, dir); spec.DiT.HiddenSize() != 64 {
				t.Fatalf("folder DiT width %d, want tiny-wan's 64", spec.DiT.HiddenSize())
			}
			// The folder keeps its variant's presets (480p); the toy size is requested explicitly.
			req := fastvideo.Request{Prompt: "a red fox", Height: 48, Width: 64, NumFrames: 9}
			if c.class == "WanPipeline" {
				req.NumInferenceSteps, req.GuidanceScale = 4, 5
			}
			got := fvtest.LatentsOnly(t, g, req).Latents.Video
			tiny := req
			tiny.Preset = c.tinyPreset
			want := fvtest.LatentsOnly(t, fvtest.Open(t, wan.TinyName), tiny).Latents.Video
			if !testutil.SameBits(got, want) {
				t.Fatal("the folder model's latents differ from tiny-wan's")
			}
		})
	}
}

// TestWanModelFolderErrors: New names what is missing or inconsistent in a Wan snapshot before
// loading anything.
func TestWanModelFolderErrors(t *testing.T) {
	dir := tinyWanFolder(t, "WanPipeline")
	// A missing config or tokenizer is invalid input for the model field; missing weights are an
	// error naming the component folder.
	testutil.CheckEachMissing(t, dir, []testutil.MissingFile{
		{Remove: "text_encoder/model.safetensors", Named: filepath.Join(dir, "text_encoder"), Invalid: false},
		{Remove: "tokenizer/tokenizer.json", Named: filepath.Join(dir, "tokenizer", "tokenizer.json"), Invalid: true},
		{Remove: "vae/config.json", Named: filepath.Join(dir, "vae", "config.json"), Invalid: true},
	}, func() error { return fvtest.NewError(dir) }, fvtest.IsModelError)

	te := filepath.Join(dir, "text_encoder", "config.json")
	orig, err := os.ReadFile(te)
	if err != nil {
		t.Fatal(err)
	}
	wide := strings.Replace(string(orig), `"d_model":32`, `"d_model":48`, 1)
	if wide == string(orig) {
		t.Fatalf("no d_model 32 in %s", orig)
	}
	if err := os.WriteFile(te, []byte(wide), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fvtest.NewError(dir); err == nil || !strings.Contains(err.Error(), "d_model 48") || !strings.Contains(err.Error(), "text_dim 32") {
		t.Errorf("a 48-wide text encoder: %v", err)
	}
	if err := os.WriteFile(te, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "transformer_2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fvtest.NewError(dir); err == nil || !strings.Contains(err.Error(), "transformer_2") || !strings.Contains(err.Error(), "A14B") {
		t.Errorf("a two-expert snapshot: %v", err)
	}
}

// lookup is the Wan model fastvideo reads from a folder.
func lookup(t *testing.T, dir string) *wan.Spec {
	t.Helper()
	m, err := fastvideo.LookupModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := m.(*wan.Spec)
	if !ok {
		t.Fatalf("%s reads as a %T", dir, m)
	}
	return spec
}
