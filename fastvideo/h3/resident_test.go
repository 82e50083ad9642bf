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

// TestResidentBytesFP8: with FP8 the DiT counts as dit/h3 holds it converted, 50 x 385,107,968 bytes
// (17.93 GiB) less than in bf16 for the released geometry, so AutoMemory keeps everything resident
// where the FP8 model fits; FastH3's VSA gates count too.
func TestResidentBytesFP8(t *testing.T) {
	m, err := lookup(t, "fasth3")
	if err != nil {
		t.Fatal(err)
	}
	spec := m.(*Spec)
	resident := func(fp8 bool) int64 {
		e := &family.Engine{DType: dtypes.BFloat16, FP8: fp8}
		return (&components{Opened: family.Opened[source]{Engine: e}, spec: spec, textCfg: qwen3vl.Q32B()}).ResidentBytes()
	}
	if got := resident(false) - resident(true); got != 50*385107968 {
		t.Errorf("FP8 saves %d resident bytes, want %d", got, 50*385107968)
	}
	gates := *spec
	gates.VSAGates = false
	noGates := (&components{Opened: family.Opened[source]{Engine: &family.Engine{DType: dtypes.BFloat16}}, spec: &gates, textCfg: qwen3vl.Q32B()}).ResidentBytes()
	if got := resident(false) - noGates; got != 2*50*5376*7168 {
		t.Errorf("the VSA gates add %d resident bytes, want %d", got, 2*50*5376*7168)
	}
}
