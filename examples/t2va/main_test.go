package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/examples/internal/clitest"
	"fastvideo/fastvideo/h3"
	"fastvideo/internal/testutil"
)

func TestPlanJSON(t *testing.T) {
	var d h3.PlanDetails
	p := clitest.RunPlan(t, run, &d, strings.Fields("-model fasth3 -height 480 -width 832 -frames 124 -fps 24 -steps 4")...)
	if p.CanvasHeight != 480 || p.CanvasWidth != 832 || p.NumFrames != 124 || p.VideoLatentFrames != 37 ||
		d.AudioLatentFrames != 207 || p.LatentHeight != 30 || p.LatentWidth != 52 || d.Rows.Audio != 414 ||
		d.Rows.Video != 14430 || d.Rows.Total != 14844 || len(p.VideoSigmas) != 5 || len(d.AudioSigmas) != 5 ||
		p.DiTTFLOPsPerStep <= 0 || p.WeightsBytes <= 0 {
		t.Fatalf("plan %+v %+v", p, d)
	}
	// Each component's bytes and where the memory policy keeps it on this machine (the go backend's
	// device is the host): the DiT first, at the plan's weight bytes.
	names := map[string]bool{}
	for _, m := range p.Memory {
		names[m.Name] = m.Residency != "" && m.Bytes > 0
	}
	if len(p.Memory) == 0 || p.Memory[0].Name != "dit" || p.Memory[0].Bytes != p.WeightsBytes ||
		!names["dit"] || !names["video_vae"] || !names["audio_vae"] || !names["text_encoder"] {
		t.Errorf("plan memory %+v, want the DiT (%d bytes), the VAEs and the text encoder, each with a residency", p.Memory, p.WeightsBytes)
	}
}

// TestVSAFlags: FastH3 plans dense attention by default (this build has no block-sparse kernel), -vsa
// plans the trained VSA, -vsa-sparsity changes its top-k, -dense-attention drops it.
func TestVSAFlags(t *testing.T) {
	for _, c := range []struct {
		args string
		topK int // 0: dense
	}{{"", 0}, {"-vsa", 28}, {"-vsa-sparsity 0.5", 140}, {"-vsa -vsa-sparsity 0.5", 140}, {"-dense-attention", 0}} {
		var d h3.PlanDetails
		clitest.RunPlan(t, run, &d, strings.Fields("-model fasth3 "+c.args)...)
		switch {
		case c.topK == 0 && d.VSA != nil:
			t.Errorf("%q: plan has VSA %+v, want dense", c.args, *d.VSA)
		case c.topK > 0 && (d.VSA == nil || d.VSA.TopK != c.topK):
			t.Errorf("%q: plan VSA %+v, want top-%d", c.args, d.VSA, c.topK)
		}
	}
}

func TestPlanTable(t *testing.T) {
	code, out, errs := clitest.Run(run, "-plan", "-model", "h3", "-prompt", "A cat plays the piano.")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"768x1344", "minimax_h3_t2va", "video sigmas", "TFLOP per step"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	// The default model is tiny-h3.
	if code, out, errs := clitest.Run(run, "-plan"); code != 0 || !strings.Contains(out, "tiny-h3 (preset tiny_t2va)") {
		t.Errorf("default -plan: exit %d\n%s%s", code, out, errs)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-model")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-model")
	clitest.CheckExitCodes(t, run, []clitest.ExitCase{
		{"-plan -height 481 -width 832", 2, "invalid -height 481"},
		{"-plan -frames 400", 2, "invalid -frames 400"},
		{"-plan -fps 30", 2, "invalid -fps 30"},
		{"-plan -steps -2", 2, "invalid -steps -2"},
		{"-plan -model fasth3 -preset nope", 2, "invalid -preset"},
		{"-prompt hi -height 481 -width 832", 2, "invalid -height"},
		{"-model fasth3", 2, "invalid -prompt"},
		{"-prompt hi -model fasth3", 2, "snapshot folder"},
		{"-prompt hi -backend tpu", 2, "invalid -backend"},
		{"-prompt hi -memory lots", 2, "invalid -memory"},
		{"-plan -gpus 0", 2, "invalid -gpus 0"},
		{"-prompt hi -gpus 2 -backend go:ops_sequential", 2, "invalid -gpus 2"},
		{"-prompt hi -fast-factor 3", 2, "invalid -fast-factor 3"},
		{"-prompt hi -out " + filepath.Join(dir, "clip.txt"), 2, "invalid -out"},
		{"-prompt hi -model " + empty, 2, "invalid -model"},
		{"-prompt hi -model " + missing, 2, "invalid -model"},
		{"-plan -model h3 -frames 9223372036854775807", 2, "invalid -frames 9223372036854775807"},
		{"-plan -height 128 -width 192 -fast-spatial -upsample area", 2, `invalid -upsample "area"`},
		{"-plan -height 128 -width 192 -fast-spatial -sharpen -1", 2, "invalid -sharpen -1"},
		{"-plan -upsample cubic", 2, "invalid -upsample"},
		{"-plan -sharpen 0.5", 2, "invalid -sharpen"},
		{"-plan -spatial-scale 3", 2, "invalid -spatial-scale"},
		{"-plan -fast-spatial -spatial-scale 1", 2, "invalid -spatial-scale 1"},
		{"-plan -model fasth3 -vsa-sparsity 1.5", 2, `invalid -vsa-sparsity "1.5"`},
		{"-plan -model fasth3 -vsa-sparsity NaN", 2, `invalid -vsa-sparsity "NaN"`},
		{"-plan -vsa-sparsity 0.5", 2, "invalid -vsa-sparsity"}, // tiny-h3 carries no VSA gates
	})
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Errorf("failed runs left files: %v", names)
	}
}

// TestGenerate is the README's command on the default model: a real MP4 with audio.
func TestGenerate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "clip.mp4")
	clitest.Generate(t, run, out, 22)
	info := clitest.Probe(t, out)
	if v, a := info.Video, info.Audio; v == nil || a == nil || v.Width != 96 || v.Height != 64 || v.Frames != 22 ||
		a.Channels != 2 || a.SampleRate != 32000 {
		t.Fatalf("probe %+v %+v", info.Video, info.Audio)
	}
	// Running it again never overwrites: the new file gets a suffix.
	clitest.CheckNoOverwrite(t, run, out, "clip_1.mp4", "-steps", "1")
}

// TestGenerateFastModes runs the fast modes end to end on tiny-h3: the DiT and VAEs run on the
// reduced canvas and frame count, the filters (RIFE at the reduced size, the resize, one unsharp
// pass) bring the frames back to the request, and the MP4 has the plan's frame count, size and
// duration. 39 frames is the shortest clip the temporal mode shortens (22 source frames).
func TestGenerateFastModes(t *testing.T) {
	clitest.CheckFastModes(t, run, &h3.PlanDetails{}, []clitest.FastCase{
		{"-fast -frames 39 -height 64 -width 64 -steps 1", "64x64", []string{"RIFE 4.25 22 -> 39 frames", "sharpen 0.6"}},
		{"-height 128 -width 192 -fast-spatial -upsample cubic -sharpen 0.5 -steps 1", "64x96", []string{"cubic to 128x192, sharpen 0.5"}},
		{"-fast -fast-spatial -frames 39 -height 128 -width 128 -steps 1", "64x64",
			[]string{"RIFE 4.25 22 -> 39 frames", "lanczos to 128x128, sharpen 0.6"}},
	})
}

// TestGenerateRandomWeights is -random-weights on the CPU: tiny-h3's geometry with weights drawn
// from the seed runs every stage into an MP4 with audio (on the GPU machine, the same flag runs
// fasth3 at release size).
func TestGenerateRandomWeights(t *testing.T) {
	out := filepath.Join(t.TempDir(), "clip.mp4")
	var res clitest.Generated
	clitest.RunJSON(t, run, &res, "-prompt", "a red fox", "-out", out, "-json", "-random-weights", "-weights-seed", "5", "-steps", "1")
	info := clitest.Probe(t, out)
	if v, a := info.Video, info.Audio; v == nil || a == nil || v.Frames != 22 || res.NumFrames != 22 || a.Channels != 2 {
		t.Fatalf("probe %+v %+v, result %+v", info.Video, info.Audio, res)
	}
}

// TestImageFlagsRejected: a keyframe that is not an image is invalid input (exit 2) naming its flag.
func TestImageFlagsRejected(t *testing.T) {
	clitest.CheckExitCodes(t, run, []clitest.ExitCase{
		{"-plan -image a.png", 2, "invalid -image"},
		{"-plan -last-image b.png", 2, "invalid -last-image"},
	})
}

// TestKeyframesToMP4: t2va -image a.png -last-image b.png runs FL2VA on tiny-h3 into an MP4 with
// audio, with one frame of condition rows per keyframe in the plan.
func TestKeyframesToMP4(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.png"), filepath.Join(dir, "b.png")
	writePNG(t, a, 120, 90)
	writePNG(t, b, 90, 120)
	out := filepath.Join(dir, "clip.mp4")
	var res clitest.Generated
	clitest.RunJSON(t, run, &res, "-prompt", "a red fox", "-out", out, "-json", "-image", a, "-last-image", b, "-frames", "5")
	if v := clitest.Probe(t, out); v.Video == nil || v.Audio == nil || v.Video.Frames != 5 || v.Video.Width != 96 {
		t.Fatalf("probe %+v %+v", v.Video, v.Audio)
	}
}

func writePNG(t *testing.T, path string, w, h int) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(255 * x / w), uint8(255 * y / h), 90, 255})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

// TestFastHintWorks: -fast on the default tiny model's short clip is refused with a frame count that
// the temporal fast mode does shorten, and that request plans.
func TestFastHintWorks(t *testing.T) {
	code, _, stderr := clitest.Run(run, "-fast", "-plan")
	i := strings.Index(stderr, "num_frames ")
	if code != 2 || i < 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	frames := strings.Fields(stderr[i+len("num_frames "):])[0]
	if code, _, stderr := clitest.Run(run, "-fast", "-plan", "-frames", frames); code != 0 {
		t.Errorf("the suggested -frames %s: exit %d: %s", frames, code, stderr)
	}
}

// TestInvalidRequestLeavesNoFolder: a request refused after its output path was checked (here an
// unreadable -rife folder, refused when the model opens) leaves no output folder behind.
func TestInvalidRequestLeavesNoFolder(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "new", "sub") + string(filepath.Separator)
	code, _, stderr := clitest.Run(run, "-prompt", "a fox", "-out", out, "-rife", filepath.Join(dir, "no-such-rife"))
	if code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("the refused request left %s (%v)", filepath.Join(dir, "new"), err)
	}
}

// TestPlanShowsGPUs: -plan with -gpus shows the layout a generation over that many devices would
// run (it was ignored), and refuses a count the model cannot split over, as a generation would.
func TestPlanShowsGPUs(t *testing.T) {
	var d h3.PlanDetails
	p := clitest.RunPlan(t, run, &d, "-model", "fasth3", "-gpus", "2")
	if p.Devices == nil || p.Devices.Devices != 2 || p.Devices.LocalHeads != 28 || p.Devices.PerDeviceBytes <= p.Devices.DiTShardBytes {
		t.Errorf("plan devices %+v", p.Devices)
	}
	if code, _, stderr := clitest.Run(run, "-plan", "-model", "fasth3", "-gpus", "3"); code != 2 || !strings.Contains(stderr, "invalid -gpus 3") {
		t.Errorf("-gpus 3: exit %d: %s", code, stderr)
	}
}

// TestReadmeListsEveryFlag: the README's flag table of t2va is complete.
func TestReadmeListsEveryFlag(t *testing.T) {
	_, _, help := clitest.Run(run, "-h")
	clitest.CheckReadmeFlags(t, "t2va", help)
}

// TestLoRAFlag: H3 adapters in diffusers names and in ComfyUI names (fused qkv_proj, split onto
// to_q/to_k/to_v) are planned on tiny-h3, with its weights or random ones; a Wan adapter exits 2.
func TestLoRAFlag(t *testing.T) {
	dir := t.TempDir()
	good := testutil.WriteLoRA(t, dir, "h3.safetensors", 1,
		testutil.LoRAModule{Module: "transformer_blocks.0.attn.to_q", In: 128, Out: 128, Rank: 4, PEFT: true},
		testutil.LoRAModule{Module: "transformer_blocks.1.attn.to_out.0", In: 128, Out: 128, Rank: 4, PEFT: true})
	var d h3.PlanDetails
	p := clitest.RunPlan(t, run, &d, "-lora", good+":0.7")
	if len(p.LoRA) != 1 || p.LoRA[0].Strength != 0.7 || p.LoRA[0].Modules != 2 || p.LoRA[0].Tensors != 2 {
		t.Fatalf("plan adapters %+v", p.LoRA)
	}
	if p := clitest.RunPlan(t, run, &d, "-random-weights", "-lora", good); len(p.LoRA) != 1 || p.LoRA[0].Tensors != 2 { // merged as drawn
		t.Fatalf("random weights: plan adapters %+v", p.LoRA)
	}
	comfy := testutil.WriteLoRA(t, dir, "comfy.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.attn.qkv_proj", In: 128, Out: 384, Rank: 4})
	p = clitest.RunPlan(t, run, &d, "-lora", comfy)
	if len(p.LoRA) != 1 || p.LoRA[0].Modules != 1 || p.LoRA[0].Tensors != 3 {
		t.Fatalf("plan ComfyUI-named adapter %+v", p.LoRA)
	}
	wan := testutil.WriteLoRA(t, dir, "wan.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.self_attn.q", In: 128, Out: 128, Rank: 4})
	clitest.CheckExitCases(t, run, []clitest.ExitCase{
		{"-plan -lora " + wan, 2, "Wan adapter"},
	})
}

// TestTinyDecoder: -decoder tiny, -preview and -tiny-decoder on the default model.
func TestTinyDecoder(t *testing.T) {
	clitest.CheckTinyDecoder(t, run, "taeh3", 22, "-steps", "2")
}
