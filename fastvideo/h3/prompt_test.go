package h3

import (
	"errors"
	"fmt"
	"image"
	"strings"
	"testing"

	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
)

// TestMultimodalPromptLength: with keyframes the prompt's length counts the picture labels and
// vision tokens, so a prompt whose vision blocks overflow Qwen3-VL's positions is a RequestError
// at Resolve (before anything loads); the same request without keyframes, or with the released
// processor bounds, resolves.
func TestMultimodalPromptLength(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 96, 64))
	req := api.Request{Prompt: "a red fox runs", NumFrames: 5, Height: 64, Width: 96, Image: img, LastImage: img}
	spec := tinySpec()
	if _, err := spec.Resolve(req, true); err != nil {
		t.Fatalf("a tiny keyframe request: %v", err)
	}
	// A processor/ that enlarges every keyframe to 2^30 pixels: about 2^20 vision tokens each.
	pc := *spec.Processor
	pc.MinPixels, pc.MaxPixels = 1<<30, 1<<31
	spec.Processor = &pc
	_, err := spec.Resolve(req, true)
	var re *api.RequestError
	if !errors.As(err, &re) || re.Field != "prompt" || !strings.Contains(fmt.Sprint(re.Value), "vision tokens") {
		t.Fatalf("vision blocks beyond %d tokens: %v", packing.MaxTextTokens, err)
	}
	req.Image, req.LastImage = nil, nil
	if _, err := spec.Resolve(req, true); err != nil {
		t.Errorf("the same prompt without keyframes: %v", err)
	}
}

// TestCheckPromptTokens: the prompt's own tokens and the whole multimodal sequence have their own
// limits.
func TestCheckPromptTokens(t *testing.T) {
	for _, c := range []struct {
		text, rows int
		ok         bool
	}{
		{MaxPromptTokens, MaxPromptTokens, true},
		{MaxPromptTokens + 1, MaxPromptTokens + 1, false},
		{10, packing.MaxTextTokens, true},
		{10, packing.MaxTextTokens + 1, false},
	} {
		err := checkPromptTokens(c.text, c.rows, "p")
		var re *api.RequestError
		if c.ok != (err == nil) || (err != nil && !errors.As(err, &re)) {
			t.Errorf("checkPromptTokens(%d, %d) = %v", c.text, c.rows, err)
		}
	}
}
