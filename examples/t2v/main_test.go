package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/examples/internal/clitest"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/wan"
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
