package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/examples/internal/clitest"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

func plan(t *testing.T, args ...string) (*fastvideo.GenerationPlan, *wan.PlanDetails) {
	t.Helper()
	var d wan.PlanDetails
	return clitest.RunPlan(t, run, &d, args...), &d
}

// TestPlanJSON: the Wan plan of the released 1.3B preset (81 frames at 480x832: a 21x60x104
// latent, 32760 tokens, 50 UniPC steps with CFG) and of a warped FastWan2.2 run.
func TestPlanJSON(t *testing.T) {
	p, d := plan(t, "-model", "wan2.1-t2v-1.3b", "-height", "480", "-width", "832", "-frames", "81")
	if p.Family != "wan" || len(p.LatentShape) != 4 || p.LatentShape[1] != 21 || p.LatentShape[2] != 60 || p.LatentShape[3] != 104 ||
		d.Tokens != 32760 || d.TextTokens != 512 || d.Sampler != "unipc" || !p.CFG || len(p.VideoSigmas) != 51 ||
		len(p.VideoTimesteps) != 50 || p.VideoTimesteps[0] != 999 || p.VideoTimesteps[49] != 57 ||
		math.Abs(p.DiTTFLOPsPerStep-566.0) > 0.1 || p.WeightsBytes <= 0 {
		t.Fatalf("plan %+v %+v", p, d)
	}
	w, wd := plan(t, "-model", "fastwan2.2-ti2v-5b", "-warp-denoising-steps")
	if wd.Sampler != "dmd" || w.CFG || len(w.VideoTimesteps) != 3 || math.Abs(float64(w.VideoTimesteps[1])-939.6724) > 1e-3 {
		t.Fatalf("warped plan %+v %+v", w, wd)
	}
	var sb strings.Builder
	code, out, _ := clitest.Run(run, "-plan")
	sb.WriteString(out)
	if code != 0 || !strings.Contains(out, "tiny-wan (preset tiny_wan_dmd)") || !strings.Contains(out, "DMD, rungs [1000 757 522]") {
		t.Errorf("default -plan: exit %d\n%s", code, out)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "never.mp4")
	broken := filepath.Join(dir, "broken-model")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "model_index.json"), []byte(`{"_class_name": "WanPipeline"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty-model")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	clitest.CheckExitCodes(t, run, []clitest.ExitCase{
		{"-plan -height 40 -width 64", 2, "invalid -height 40"},
		{"-plan -frames 12", 2, "invalid -frames 12"},
		{"-plan -fps 500", 2, "invalid -fps 500"},
		{"-plan -steps 4", 2, "invalid -steps 4"},
		{"-plan -guidance-scale 3", 2, "invalid -guidance-scale 3"},
		{"-plan -preset tiny_wan_t2v -warp-denoising-steps", 2, "invalid -warp-denoising-steps"},
		{"-plan -preset nope", 2, "invalid -preset"},
		{"-out " + out, 2, "invalid -prompt"},
		{"-prompt hi -height 40 -width 64 -out " + out, 2, "invalid -height"},
		{"-prompt hi -model wan2.1-t2v-1.3b -out " + out, 2, "snapshot folder"},
		{"-prompt hi -backend tpu -out " + out, 2, "invalid -backend"},
		{"-prompt hi -memory lots -out " + out, 2, "invalid -memory"},
		// A folder that claims to be Wan but lacks a component is invalid input naming the file.
		{"-prompt hi -model " + broken + " -out " + out, 2, filepath.Join("transformer", "config.json")},
		{"-prompt hi -out " + filepath.Join(dir, "clip.txt"), 2, "invalid -out"},
		{"-prompt hi -model " + empty + " -out " + out, 2, "invalid -model"},
		{"-prompt hi -model " + filepath.Join(dir, "no-such-model") + " -out " + out, 2, "invalid -model"},
		{"-plan -model wan2.1-t2v-1.3b -frames 9223372036854775807", 2, "invalid -frames 9223372036854775807"},
	})
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s (%v)", out, err)
	}
}

// TestGenerate is the README's command on the default model: an H.264 MP4 at the planned size,
// frame count and rate, without an audio stream.
func TestGenerate(t *testing.T) {
	p, _ := plan(t)
	out := filepath.Join(t.TempDir(), "fox.mp4")
	res := clitest.Generate(t, run, out, p.NumFrames)
	info := clitest.Probe(t, out)
	if v := info.Video; v == nil || v.Codec != "h264" || v.Width != p.Width || v.Height != p.Height || v.Frames != p.NumFrames ||
		v.FPS != float64(p.FPS) || info.Audio != nil {
		t.Fatalf("probe %+v %+v, want h264 %dx%d, %d frames at %d fps, no audio", info.Video, info.Audio, p.Width, p.Height, p.NumFrames, p.FPS)
	}
	t.Logf("%+v in %.2fs", *info.Video, res.Timings.Total)
	// The base-style preset with CFG, and never overwriting: the new file gets a suffix.
	clitest.CheckNoOverwrite(t, run, out, "fox_1.mp4", "-preset", "tiny_wan_t2v", "-steps", "2")
}

// TestGenerateFastModes runs Wan's fast modes end to end on tiny-wan: 9 frames from a 5-frame
// source (RIFE 2x, cut to 9), a 64x96 clip denoised and decoded at 32x48, and both; the MP4 has
// the plan's frame count, size and duration.
func TestGenerateFastModes(t *testing.T) {
	clitest.CheckFastModes(t, run, &wan.PlanDetails{}, []clitest.FastCase{
		{"-fast", "48x64", []string{"RIFE 4.25 5 -> 9 frames", "sharpen 0.6"}},
		{"-fast-spatial -height 64 -width 96", "32x48", []string{"lanczos to 64x96, sharpen 0.4"}},
		{"-fast -fast-spatial -height 64 -width 96 -frames 11 -fast-factor 3 -upsample nearest", "32x48",
			[]string{"RIFE 4.25 5 -> 11 frames", "nearest to 64x96, sharpen 0.6"}},
	})
}

// badImages writes the bad condition images the issue names: a text file, a truncated PNG, a
// PNG header of 0x0 and one of 100000x100000 pixels; and a good one.
func badImages(t *testing.T, dir string) (good string, bad map[string]string) {
	t.Helper()
	var b bytes.Buffer
	img := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	header := func(w, h uint32) []byte {
		var out bytes.Buffer
		out.WriteString("\x89PNG\r\n\x1a\n")
		ihdr := make([]byte, 13)
		binary.BigEndian.PutUint32(ihdr, w)
		binary.BigEndian.PutUint32(ihdr[4:], h)
		ihdr[8], ihdr[9] = 8, 2
		binary.Write(&out, binary.BigEndian, uint32(13))
		body := append([]byte("IHDR"), ihdr...)
		out.Write(body)
		binary.Write(&out, binary.BigEndian, crc32.ChecksumIEEE(body))
		return out.Bytes()
	}
	files := map[string][]byte{
		"cat.png": b.Bytes(), "notes.txt": []byte("a red fox\n"), "truncated.png": b.Bytes()[:b.Len()/2],
		"zero.png": header(0, 0), "huge.png": header(100000, 100000),
	}
	bad = map[string]string{}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		bad[name] = path
	}
	good = bad["cat.png"]
	delete(bad, "cat.png")
	return good, bad
}

// TestImageFlag: -image on tiny-wan2.2 writes an MP4 at the size the image picks (4:3 -> 96x64);
// bad images are invalid input (exit 2) before anything loads, and so is an image for a text-only
// model.
func TestImageFlag(t *testing.T) {
	dir := t.TempDir()
	good, bad := badImages(t, dir)
	out := filepath.Join(dir, "never.mp4")
	var cases []clitest.ExitCase
	for name, path := range bad {
		want := map[string]string{"notes.txt": "not a PNG or JPEG", "truncated.png": "damaged png", "zero.png": "invalid -image",
			"huge.png": "over the limit"}[name]
		cases = append(cases, clitest.ExitCase{Args: "-prompt hi -model tiny-wan2.2 -image " + path + " -out " + out, Code: 2, Msg: want})
	}
	cases = append(cases, clitest.ExitCase{Args: "-prompt hi -image " + good + " -out " + out, Code: 2, Msg: "takes no first-frame image"},
		clitest.ExitCase{Args: "-plan -model tiny-wan2.2 -image " + good + " -height 64 -width 96", Code: 2, Msg: "invalid -height"})
	clitest.CheckExitCodes(t, run, cases)
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s (%v)", out, err)
	}
	p, d := plan(t, "-model", "tiny-wan2.2", "-image", good)
	if p.Width != 96 || p.Height != 64 || d.Image == nil || d.Image.Source != good {
		t.Fatalf("plan %dx%d %+v", p.Width, p.Height, d.Image)
	}
	mp4 := filepath.Join(dir, "cat.mp4")
	var res clitest.Generated
	clitest.RunJSON(t, run, &res, "-model", "tiny-wan2.2", "-image", good, "-prompt", "a cat", "-out", mp4, "-json")
	info := clitest.Probe(t, mp4)
	if v := info.Video; v == nil || v.Width != 96 || v.Height != 64 || v.Frames != p.NumFrames {
		t.Fatalf("probe %+v", info.Video)
	}
}

// TestVSAFlags: FastWan plans dense attention by default (this build has no block-sparse kernel), -vsa
// the trained VSA (0.8 for 1.3B), -vsa-sparsity changes its top-k, -dense-attention drops it, a model
// without VSA gates refuses a sparsity and -vsa with -dense-attention is refused.
func TestVSAFlags(t *testing.T) {
	for _, c := range []struct {
		args string
		topK int // 0: dense
	}{{"", 0}, {"-vsa", 73}, {"-vsa-sparsity 0.5", 182}, {"-dense-attention", 0}} {
		_, d := plan(t, strings.Fields("-model fastwan2.1-t2v-1.3b "+c.args)...)
		switch {
		case c.topK == 0 && d.VSA != nil:
			t.Errorf("%q: plan has VSA %+v, want dense", c.args, *d.VSA)
		case c.topK > 0 && (d.VSA == nil || d.VSA.TopK != c.topK):
			t.Errorf("%q: plan VSA %+v, want top-%d", c.args, d.VSA, c.topK)
		}
	}
	clitest.CheckExitCodes(t, run, []clitest.ExitCase{
		{"-plan -model wan2.1-t2v-1.3b -vsa-sparsity 0.5", 2, "invalid -vsa-sparsity"},
		{"-plan -model fastwan2.1-t2v-1.3b -vsa -dense-attention", 2, "one of -dense-attention or -vsa"},
		{"-plan -model fastwan2.1-t2v-1.3b -vsa-sparsity -0.1", 2, "invalid -vsa-sparsity"},
		{"-plan -model fastwan2.1-t2v-1.3b -vsa-sparsity NaN", 2, "invalid -vsa-sparsity"},
	})
}

// TestAttentionWindowFlags: -attention-window and -attention-window-sink map onto the request (the
// plan's attention row names the window in tokens and in latent frames of the plan's own grid; on
// FastWan it runs instead of VSA), 0 is off, and bad values or a window with another attention choice
// exit 2 naming the flag.
func TestAttentionWindowFlags(t *testing.T) {
	_, d := plan(t, "-model", "wan2.1-t2v-1.3b")
	frame := d.TokenGrid[1] * d.TokenGrid[2]
	_, dw := plan(t, "-model", "wan2.1-t2v-1.3b", "-attention-window", fmt.Sprint(4*frame), "-attention-window-sink", "3")
	if want := fmt.Sprintf("windowed: ±%d tokens (≈ ±2 frames), sink 3", 2*frame); !strings.HasPrefix(dw.Attention, want) {
		t.Errorf("attention %q, want %q...", dw.Attention, want)
	}
	_, df := plan(t, "-model", "fastwan2.1-t2v-1.3b", "-attention-window", "64")
	if df.VSA != nil || !strings.Contains(df.Attention, "instead of the checkpoint's Video Sparse Attention") {
		t.Errorf("FastWan with a window: VSA %+v, attention %q", df.VSA, df.Attention)
	}
	if _, d0 := plan(t, "-model", "wan2.1-t2v-1.3b", "-attention-window", "0"); d0.Attention != "" {
		t.Errorf("-attention-window 0: attention %q, want none", d0.Attention)
	}
	clitest.CheckExitCodes(t, run, []clitest.ExitCase{
		{"-plan -attention-window -4", 2, "invalid -attention-window -4"},
		{"-plan -attention-window-sink 5", 2, "invalid -attention-window-sink 5"},
		{"-plan -attention-window 64 -attention-window-sink -1", 2, "invalid -attention-window-sink -1"},
		{fmt.Sprintf("-plan -model wan2.1-t2v-1.3b -attention-window 64 -attention-window-sink %d", d.Tokens+1), 2, "invalid -attention-window-sink"},
		{"-plan -model fastwan2.1-t2v-1.3b -attention-window 64 -vsa", 2, "invalid -attention-window 64"},
		{"-plan -model fastwan2.1-t2v-1.3b -attention-window 64 -vsa-sparsity 0.5", 2, "invalid -attention-window 64"},
		{"-plan -model fastwan2.1-t2v-1.3b -attention-window 64 -dense-attention", 2, "invalid -attention-window 64"},
		{"-plan -attention-window 1.5", 2, "-attention-window"},
	})
}

// TestRefineFlags: the refine flags map onto the request (plan: both stages, the given grid, sigma,
// noise switch and mode), and bad values exit 2 naming the flag.
func TestRefineFlags(t *testing.T) {
	_, d := plan(t, strings.Fields("-model fastwan2.1-t2v-1.3b -refine")...)
	if rf := d.Refine; rf == nil || rf.Scale != 2 || fmt.Sprint(rf.Stage2Steps) != "[757 522]" || !rf.AddNoise || rf.Upsample != "bilinear" {
		t.Fatalf("-refine: %+v", d.Refine)
	}
	_, d = plan(t, strings.Fields("-height 96 -width 96 -refine -refine-scale 3 -refine-steps 522 -refine-sigma 0.5 -refine-add-noise=false -refine-upsample nearest")...)
	if rf := d.Refine; rf == nil || rf.Scale != 3 || fmt.Sprint(rf.Stage2Steps) != "[522]" || rf.Sigma != 0.5 || rf.AddNoise || rf.Upsample != "nearest" {
		t.Fatalf("every refine flag: %+v", d.Refine)
	}
	clitest.CheckExitCodes(t, run, []clitest.ExitCase{
		{"-plan -refine", 2, "invalid -refine-scale 2: allowed a scale dividing the size onto the VAE and patch grid (Refine stage1 latent grid 3x4"},
		{"-plan -model wan2.1-t2v-1.3b -refine", 2, "invalid -refine true"},
		{"-plan -height 64 -width 64 -refine -refine-steps 757,x", 2, "invalid -refine-steps"},
		{"-plan -height 64 -width 64 -refine -refine-sigma 1", 2, "invalid -refine-sigma 1"},
		{"-plan -refine-upsample nearest", 2, "invalid -refine-upsample"},
		{"-plan -model fasth3 -refine", 2, "no MiniMax H3 variant"},
	})
}

// TestFastSpatialHintWorks: -fast-spatial on the default tiny model's size is refused with a size the
// spatial fast mode divides, and that request plans.
func TestFastSpatialHintWorks(t *testing.T) {
	code, _, stderr := clitest.Run(run, "-fast-spatial", "-plan")
	i := strings.Index(stderr, "(height ")
	if code != 2 || i < 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var h, w int
	if _, err := fmt.Sscanf(stderr[i:], "(height %d, width %d)", &h, &w); err != nil {
		t.Fatalf("%q: %v", stderr[i:], err)
	}
	if code, _, stderr := clitest.Run(run, "-fast-spatial", "-plan", "-height", fmt.Sprint(h), "-width", fmt.Sprint(w)); code != 0 {
		t.Errorf("the suggested %dx%d: exit %d: %s", h, w, code, stderr)
	}
}

// TestReadmeListsEveryFlag: the README's flag table of t2v is complete.
func TestReadmeListsEveryFlag(t *testing.T) {
	_, _, help := clitest.Run(run, "-h")
	clitest.CheckReadmeFlags(t, "t2v", help)
}

// TestLoRAFlag: -lora adapters (repeatable, PATH[:STRENGTH]) appear in the plan with what they change;
// every bad adapter exits 2 under -lora before anything loads, generation included.
func TestLoRAFlag(t *testing.T) {
	dir := t.TempDir()
	mods := []testutil.LoRAModule{
		{Module: "blocks.0.self_attn.q", In: 64, Out: 64, Rank: 4},
		{Module: "blocks.1.ffn.0", In: 64, Out: 128, Rank: 4},
	}
	good := testutil.WriteLoRA(t, dir, "good.safetensors", 1, mods...)
	colon := filepath.Join(dir, "v1:beta")
	if err := os.MkdirAll(colon, 0o755); err != nil {
		t.Fatal(err)
	}
	odd := testutil.WriteLoRA(t, colon, "odd.safetensors", 2, mods[0])
	p, _ := plan(t, "-lora", good+":0.5", "-lora", odd)
	if len(p.LoRA) != 2 || p.LoRA[0].Path != good || p.LoRA[0].Strength != 0.5 || p.LoRA[0].Modules != 2 || p.LoRA[0].Tensors != 2 ||
		p.LoRA[1].Path != odd || p.LoRA[1].Strength != 1 {
		t.Fatalf("plan adapters %+v", p.LoRA)
	}
	if p, _ := plan(t, "-random-weights", "-lora", good); len(p.LoRA) != 1 || p.LoRA[0].Tensors != 2 { // merged as drawn
		t.Fatalf("random weights: plan adapters %+v", p.LoRA)
	}
	h3 := testutil.WriteLoRA(t, dir, "h3.safetensors", 1, testutil.LoRAModule{Module: "transformer_blocks.0.attn.to_q", In: 64, Out: 64, Rank: 4, PEFT: true})
	rank := testutil.WriteLoRA(t, dir, "rank.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.self_attn.q", In: 64, Out: 64, Rank: 4, RankB: 2})
	nan := testutil.WriteLoRA(t, dir, "nan.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.self_attn.q", In: 64, Out: 64, Rank: 4, NaN: true})
	notLoRA := testutil.WriteSafetensors(t, dir, "ckpt.safetensors", []safetensors.Tensor{
		{Name: "blocks.0.self_attn.q.weight", DType: safetensors.F32, Shape: []int{1}, Data: safetensors.F32Bytes([]float32{1})}}, nil)
	out := filepath.Join(dir, "never.mp4")
	clitest.CheckExitCases(t, run, []clitest.ExitCase{
		{"-plan -lora " + filepath.Join(dir, "absent.safetensors"), 2, "invalid -lora"},
		{"-plan -lora " + notLoRA, 2, "is not a LoRA tensor"},
		{"-plan -lora " + h3, 2, "MiniMax H3 adapter"},
		{"-plan -lora " + rank, 2, "rank mismatch"},
		{"-plan -lora " + nan, 2, "NaN"},
		{"-plan -lora " + good + ":nan", 2, "finite strength"},
		{"-prompt fox -out " + out + " -lora " + h3, 2, "MiniMax H3 adapter"},
	})
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused adapter left an output file")
	}
}

// TestTinyDecoder: -decoder tiny, -preview and -tiny-decoder on the default model.
func TestTinyDecoder(t *testing.T) {
	clitest.CheckTinyDecoder(t, run, "taew2_1", 9)
}
