package h3

import (
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/fastvideo/family"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/vae/h3video"
)

// TestResidentBytesKeyframes: a model that takes keyframes counts the vision tower and the video
// VAE's encoder (float32, as they load) on top of what the same model without keyframes counts.
func TestResidentBytesKeyframes(t *testing.T) {
	for _, name := range []string{TinyName, "fasth3"} {
		m, err := lookup(t, name)
		if err != nil {
			t.Fatal(err)
		}
		spec := m.(*Spec)
		if !spec.FirstImage || !spec.LastImage {
			t.Fatalf("%s takes no keyframes", name)
		}
		engine := &family.Engine{DType: dtypes.BFloat16}
		with := &components{Opened: family.Opened[source]{Engine: engine}, spec: spec, textCfg: qwen3vl.Q32B()}
		plain := *spec
		plain.setKeyframes(nil, nil)
		without := &components{Opened: family.Opened[source]{Engine: engine}, spec: &plain, textCfg: qwen3vl.Q32B()}
		vision, err := qwen3vl.VisionParams(*spec.Vision)
		if err != nil {
			t.Fatal(err)
		}
		encoder, err := h3video.EncoderParams(spec.VAE)
		if err != nil {
			t.Fatal(err)
		}
		extra := 4 * (vision.Count() + encoder.Count())
		if got := with.ResidentBytes() - without.ResidentBytes(); extra <= 0 || got != extra {
			t.Errorf("%s: keyframes add %d resident bytes, want %d (vision tower and VAE encoder in float32)", name, got, extra)
		}
	}
}
