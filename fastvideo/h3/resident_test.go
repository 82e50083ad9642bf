package h3

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/safetensors"
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
		with := &components{Opened: familykit.Opened[source]{Engine: engine}, spec: spec, textCfg: qwen3vl.Q32B()}
		plain := *spec
		plain.setKeyframes(nil, nil)
		without := &components{Opened: familykit.Opened[source]{Engine: engine}, spec: &plain, textCfg: qwen3vl.Q32B()}
		vision, err := qwen3vl.VisionParams(*spec.Vision)
		if err != nil {
			t.Fatal(err)
		}
		encoder, err := h3video.EncoderParams(spec.VAE)
		if err != nil {
			t.Fatal(err)
		}
		extra := 4 * (vision.Count() + encoder.Count())
		if got := totalBytes(with) - totalBytes(without); extra <= 0 || got != extra {
			t.Errorf("%s: keyframes add %d resident bytes, want %d (vision tower and VAE encoder in float32)", name, got, extra)
		}
	}
}

// TestResidentBytesFP8: with FP8 the DiT counts as dit/h3 holds it converted, 50 x 385,107,968 bytes
// (17.93 GiB) less than in bf16 for the released geometry, so AutoMemory keeps the DiT resident
// where the FP8 model fits; FastH3's VSA gates count too.
func TestResidentBytesFP8(t *testing.T) {
	m, err := lookup(t, "fasth3")
	if err != nil {
		t.Fatal(err)
	}
	spec := m.(*Spec)
	resident := func(fp8 bool) int64 {
		e := &family.Engine{DType: dtypes.BFloat16, FP8: fp8}
		return totalBytes(&components{Opened: familykit.Opened[source]{Engine: e}, spec: spec, textCfg: qwen3vl.Q32B()})
	}
	if got := resident(false) - resident(true); got != 50*385107968 {
		t.Errorf("FP8 saves %d resident bytes, want %d", got, 50*385107968)
	}
	gates := *spec
	gates.VSAGates = false
	noGates := totalBytes(&components{Opened: familykit.Opened[source]{Engine: &family.Engine{DType: dtypes.BFloat16}}, spec: &gates, textCfg: qwen3vl.Q32B()})
	if got := resident(false) - noGates; got != 2*50*5376*7168 {
		t.Errorf("the VSA gates add %d resident bytes, want %d", got, 2*50*5376*7168)
	}
}

// totalBytes sums a model's component sizes.
func totalBytes(c *components) int64 {
	var n int64
	for _, s := range c.ComponentSizes() {
		n += s.Bytes
	}
	return n
}

// TestResidencyByDevice: AutoMemory's choice for the released FastH3 on devices of 139.8, 80 and 48
// GiB (XLA's default cap of 0.92 of each, less 0.5 GiB in use; the generator's 24 GiB of activation
// headroom), with bf16, FP8 and converted 8-bit (INT8) DiT weights. 139.8 GiB keeps the DiT and both VAEs (and in FP8 the
// text stack too); on 80 GiB the bf16 DiT cannot run at all (flagged) and constrains nothing, while
// the FP8 DiT runs but leaves no room for the video VAE beside it, so both load per call; on 48 GiB
// neither DiT runs and the decoders stay. INT8 sizes like FP8 (its scales and biases a little more).
func TestResidencyByDevice(t *testing.T) {
	const gib = int64(1) << 30
	m, err := lookup(t, "fasth3")
	if err != nil {
		t.Fatal(err)
	}
	spec := *m.(*Spec)
	spec.setKeyframes(nil, nil) // a text-to-video run's components
	// The MLX 8-bit conversion (group 64) of the six core linears of every joint block, the rest in bf16,
	// as a converted checkpoint stores (and loads) it.
	int8Spec := spec
	bf16, err := ditWeightBytes(spec.DiT, spec.VSAGates, api.BF16)
	if err != nil {
		t.Fatal(err)
	}
	H, I, F := int64(spec.DiT.HiddenSize), int64(spec.DiT.InnerDim()), int64(spec.DiT.FFNDim)
	var saved int64
	for _, l := range [][2]int64{{I, H}, {I, H}, {I, H}, {H, I}, {2 * F, H}, {H, F}} { // Q, K, V, out, SwiGLU in, out
		out, in := l[0], l[1]
		saved += 2*out*in - (out*in + out*(in/64)*2*2)
	}
	int8Spec.DiTStoredBytes = bf16 - int64(spec.DiT.NumLayers)*saved
	for _, c := range []struct {
		deviceGiB float64
		fp8       bool
		int8      bool
		want      map[string]api.Residency
		ditFits   bool
	}{
		{139.8, false, false, map[string]api.Residency{"dit": api.Kept, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Streamed}, true},
		{139.8, true, false, map[string]api.Residency{"dit": api.Kept, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Kept}, true},
		{80, false, false, map[string]api.Residency{"dit": api.PerCall, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Kept}, false},
		{80, true, false, map[string]api.Residency{"dit": api.PerCall, "video_vae": api.PerCall, "audio_vae": api.Kept, "text_encoder": api.Streamed}, true},
		{48, false, false, map[string]api.Residency{"dit": api.PerCall, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Streamed}, false},
		{48, true, false, map[string]api.Residency{"dit": api.PerCall, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Streamed}, false},
		{139.8, false, true, map[string]api.Residency{"dit": api.Kept, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Kept}, true},
		{80, false, true, map[string]api.Residency{"dit": api.PerCall, "video_vae": api.PerCall, "audio_vae": api.Kept, "text_encoder": api.Streamed}, true},
		{48, false, true, map[string]api.Residency{"dit": api.PerCall, "video_vae": api.Kept, "audio_vae": api.Kept, "text_encoder": api.Streamed}, false},
	} {
		c.want[family.CompTinyDecoder] = api.Kept // ~20 MiB: kept everywhere, changing no other decision
		e := &family.Engine{DType: dtypes.BFloat16, FP8: c.fp8}
		sp := &spec
		if c.int8 {
			sp = &int8Spec
		}
		sizes := (&components{Opened: familykit.Opened[source]{Engine: e}, spec: sp, textCfg: qwen3vl.Q32B()}).ComponentSizes()
		free := int64(c.deviceGiB*0.92*float64(gib)) - gib/2
		got := family.ChooseResidency(free, 24*gib, sizes)
		for _, r := range got {
			if r.Residency != c.want[r.Name] {
				t.Errorf("%.1f GiB, fp8 %v: %s is %s, want %s (%s)", c.deviceGiB, c.fp8, r.Name, r.Residency, c.want[r.Name], describe(got))
			}
			if r.Name == "dit" && r.Fits != c.ditFits {
				t.Errorf("%.1f GiB, fp8 %v: the DiT fits %v, want %v", c.deviceGiB, c.fp8, r.Fits, c.ditFits)
			}
		}
	}
}

// TestConvertedDiTBytes: a converted transformer/ is sized by its stored tensors (it loads as
// stored), and a folder without weights sizes 0 (the config decides).
func TestConvertedDiTBytes(t *testing.T) {
	dir := t.TempDir()
	ts := []safetensors.Tensor{{Name: "a", DType: safetensors.U32, Shape: []int{4, 8}, Data: make([]byte, 128)},
		{Name: "b", DType: safetensors.BF16, Shape: []int{3}, Data: make([]byte, 6)}}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	if got := storedBytes(dir); got != 134 {
		t.Errorf("stored bytes %d, want 134", got)
	}
	if got := storedBytes(t.TempDir()); got != 0 {
		t.Errorf("no weights: %d bytes, want 0", got)
	}
	m, err := lookup(t, "fasth3")
	if err != nil {
		t.Fatal(err)
	}
	spec := *m.(*Spec)
	spec.DiTStoredBytes = 12345
	sizes := componentSizes(&spec, qwen3vl.Q32B(), dtypes.BFloat16, api.BF16)
	if sizes[0].Name != family.CompDiT || sizes[0].Bytes != 12345 {
		t.Errorf("converted DiT sized %+v, want 12345 bytes", sizes[0])
	}
}

// describe is one line of decisions for messages: "dit resident 65.32 GiB, ...".
func describe(rs []api.ComponentResidency) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s %s %.2f GiB", r.Name, r.Residency, float64(r.Bytes)/(1<<30))
	}
	return strings.Join(parts, ", ")
}
