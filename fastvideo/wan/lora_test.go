package wan_test

import (
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
)

// TestLoRAFolder: tiny-wan written as a snapshot folder takes an adapter through the checkpoint path
// (planned against the headers, merged as each tensor binds, the checkpoint closed after the load) and
// denoises to the very latents of the in-memory model with the same adapter.
func TestLoRAFolder(t *testing.T) {
	dir := tinyWanFolder(t, "WanDMDPipeline")
	adapter := testutil.WriteLoRA(t, t.TempDir(), "a.safetensors", 9,
		testutil.LoRAModule{Module: "blocks.0.self_attn.v", In: 64, Out: 64, Rank: 4, Scale: 0.3},
		testutil.LoRAModule{Module: "blocks.1.cross_attn.k", In: 64, Out: 64, Rank: 4, Scale: 0.3})
	req := fastvideo.Request{Prompt: "a red fox", Height: 48, Width: 64, NumFrames: 9}
	open := func(model string, opts ...fastvideo.Option) *fastvideo.VideoGenerator {
		g, err := fastvideo.New(t.Context(), model, append([]fastvideo.Option{fastvideo.WithBackend(testutil.BackendSpec())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	got := fvtest.LatentsOnly(t, open(dir, fastvideo.WithLoRA(adapter, 0.9)), req).Latents.Video
	tiny := req
	tiny.Preset = "tiny_wan_dmd"
	want := fvtest.LatentsOnly(t, open(wan.TinyName, fastvideo.WithLoRA(adapter, 0.9)), tiny).Latents.Video
	base := fvtest.LatentsOnly(t, open(dir), req).Latents.Video
	if !testutil.SameBits(got, want) {
		t.Error("the folder model with the adapter differs from tiny-wan with it")
	}
	if testutil.SameBits(got, base) {
		t.Error("the adapter changed nothing")
	}
}
