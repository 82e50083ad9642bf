package fastvideo

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"fastvideo/dit/h3"
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
	w := folderWriter{t, dir}
	w.config("transformer/config.json", "", tinyDiT())
	w.weights("transformer/diffusion_pytorch_model.safetensors", tc.dit)
	w.config("vae/config.json", "", tinyVideoVAE())
	w.weights("vae/diffusion_pytorch_model.safetensors", tc.video)
	w.config("audio_vae/config.json", "", tinyAudioVAE())
	w.weights("audio_vae/diffusion_pytorch_model.safetensors", tc.audio)
	w.config("text_encoder/config.json", "", tinyTextEncoder())
	w.weights("text_encoder/model.safetensors", tc.te)
	w.file("tokenizer/tokenizer.json.gz", qwen3data.Gzip())
	w.file("scheduler/scheduler_config.json", []byte(`{"_class_name": "MiniMaxH3Scheduler", "shift": 12.0}`))
	w.file("audio_scheduler/scheduler_config.json", []byte(`{"_class_name": "MiniMaxH3Scheduler", "shift": 3.0}`))
}

// folderWriter writes the files of a test snapshot folder, either family's.
type folderWriter struct {
	t   *testing.T
	dir string
}

func (w folderWriter) file(rel string, data []byte) {
	w.t.Helper()
	p := filepath.Join(w.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// config writes v as a JSON config; a non-empty class is added as its diffusers "_class_name".
func (w folderWriter) config(rel, class string, v any) {
	w.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		w.t.Fatal(err)
	}
	if class != "" {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			w.t.Fatal(err)
		}
		m["_class_name"] = class
		data, _ = json.Marshal(m)
	}
	w.file(rel, data)
}

func (w folderWriter) weights(rel string, src *weights.Synthetic) {
	w.t.Helper()
	var ts []safetensors.Tensor
	for _, n := range src.Names() {
		info, _ := src.Tensor(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	p := filepath.Join(w.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := safetensors.WriteFile(p, ts, nil); err != nil {
		w.t.Fatal(err)
	}
}

// checkNewNamesMissing moves each file of a snapshot away in turn and checks that New fails
// with an error naming it, before loading anything.
func checkNewNamesMissing(t *testing.T, dir string, cases []struct{ remove, want string }) {
	t.Helper()
	for _, c := range cases {
		p := filepath.Join(dir, c.remove)
		if err := os.Rename(p, p+".away"); err != nil {
			t.Fatal(err)
		}
		if _, err := New(context.Background(), dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("without %s: New error %v, want one naming %q", c.remove, err, c.want)
		}
		if err := os.Rename(p+".away", p); err != nil {
			t.Fatal(err)
		}
	}
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
	// Planning and loading read one config: the spec's DiT is what the DiT package loads.
	if c, err := h3.ReadConfig(filepath.Join(dir, dirTransformer)); err != nil || !reflect.DeepEqual(c, g.Model().DiT) {
		t.Fatalf("spec DiT %+v, h3.ReadConfig %+v (%v)", g.Model().DiT, c, err)
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

	checkNewNamesMissing(t, dir, []struct{ remove, want string }{
		{"audio_vae/diffusion_pytorch_model.safetensors", "audio_vae"},
		{"tokenizer/tokenizer.json.gz", "tokenizer"},
		{"vae/config.json", filepath.Join("vae", "config.json")},
	})
}
