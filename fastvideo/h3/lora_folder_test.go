package h3_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/h3"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

// TestLoRAOnQuantizedFolder: a snapshot whose transformer/ was converted to MLX INT8 refuses an adapter in
// New, Plan and Validate with invalid input for "lora" that says to load the dense release; the same
// folder with its released transformer takes the adapter and merges it as tiny-h3 does.
func TestLoRAOnQuantizedFolder(t *testing.T) {
	dir := t.TempDir()
	writeTinyFolder(t, dir)
	adapter := testutil.WriteLoRA(t, t.TempDir(), "a.safetensors", 1,
		testutil.LoRAModule{Module: "transformer_blocks.0.attn.to_q", In: 128, Out: 128, Rank: 4, PEFT: true})
	opts := []fastvideo.Option{fastvideo.WithBackend(testutil.BackendSpec()), fastvideo.WithLoRA(adapter, 1)}
	if p, err := fastvideo.Plan(dir, fastvideo.Request{}, opts...); err != nil || len(p.LoRA) != 1 || p.LoRA[0].Tensors != 1 {
		t.Fatalf("the released folder: plan adapters %+v, %v", p, err)
	}
	// Through the checkpoint path (headers planned, tensors merged as they bind) the folder denoises to
	// the latents of tiny-h3 with the same adapter.
	req := fastvideo.Request{Prompt: "a red fox", Height: 64, Width: 96, NumFrames: 124, NumInferenceSteps: 1, Seed: fastvideo.Ptr[int64](7)}
	latents := func(model string) *fastvideo.Latents {
		g, err := fastvideo.New(t.Context(), model, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		return fvtest.LatentsOnly(t, g, req).Latents
	}
	got, want := latents(dir), latents(h3.TinyName)
	if !testutil.SameBits(got.Video, want.Video) || !testutil.SameBits(got.Audio, want.Audio) {
		t.Error("the folder model with the adapter differs from tiny-h3 with it")
	}
	tdir := filepath.Join(dir, "transformer")
	config, err := os.ReadFile(filepath.Join(tdir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := h3.NewTinyWeights(h3.TinySpec())
	if err != nil {
		t.Fatal(err)
	}
	ts, man, err := h3dit.Convert(tw.DiT, config, h3dit.ConvertOptions{Scheme: quant.Scheme{Bits: 8, GroupSize: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(tdir); err != nil {
		t.Fatal(err)
	}
	if err := h3dit.WriteConverted(tdir, ts, man); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		var re *fastvideo.RequestError
		if !errors.As(err, &re) || re.Field != "lora" || !strings.Contains(err.Error(), "converted MLX checkpoint") {
			t.Errorf("%s: %v, want a lora RequestError about the converted checkpoint", what, err)
		}
	}
	g, err := fastvideo.New(t.Context(), dir, opts...)
	if err == nil {
		g.Close()
	}
	check("New", err)
	_, err = fastvideo.Plan(dir, fastvideo.Request{}, opts...)
	check("Plan", err)
	check("Validate", fastvideo.Validate(dir, fastvideo.Request{Prompt: "a fox", SkipSave: true, ReturnLatents: true}, opts...))
}
