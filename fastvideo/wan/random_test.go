package wan_test

import (
	"math"
	"strings"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/internal/testutil"
)

// TestRandomWeightsFolder runs a DMD Wan folder holding configs only with weights drawn from a
// seed: the same seed gives the same latents, another seed others, and without random weights the
// folder is refused for its missing weights.
func TestRandomWeightsFolder(t *testing.T) {
	dir := tinyWanConfigs(t, "WanDMDPipeline")
	if err := fvtest.NewError(dir); err == nil || !strings.Contains(err.Error(), "transformer") {
		t.Fatalf("a folder without weights opened without random weights: %v", err)
	}
	req := fastvideo.Request{Prompt: "a red fox", Height: 48, Width: 64, NumFrames: 9,
		Seed: fastvideo.Ptr[int64](7), SkipSave: true, ReturnLatents: true}
	run := func(seed int64) []float32 {
		return fvtest.Generate(t, dir, req, fastvideo.WithRandomWeights(seed)).Latents.Video
	}
	a, b, c := run(3), run(3), run(4)
	for _, v := range a {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("random weights gave a non-finite latent")
		}
	}
	if len(a) == 0 || !testutil.SameBits(a, b) || testutil.SameBits(a, c) {
		t.Fatalf("%d latents; the same seed must repeat them and another must not", len(a))
	}
}
