package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/media"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

type planJSON struct {
	Family         string    `json:"family"`
	Height         int       `json:"height"`
	Width          int       `json:"width"`
	NumFrames      int       `json:"num_frames"`
	FPS            int       `json:"fps"`
	LatentShape    []int     `json:"latent_shape"`
	TokenGrid      []int     `json:"token_grid"`
	Tokens         int       `json:"tokens"`
	TextTokens     int       `json:"text_tokens"`
	Sampler        string    `json:"sampler"`
	CFG            bool      `json:"cfg"`
	VideoSigmas    []float32 `json:"video_sigmas"`
	VideoTimesteps []float32 `json:"video_timesteps"`
	DiTTFLOPs      float64   `json:"dit_tflops_per_step"`
	WeightsBytes   int64     `json:"weights_bytes"`
}

func plan(t *testing.T, args ...string) planJSON {
	t.Helper()
	code, out, errs := runArgs(append([]string{"-plan", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	return p
}

// TestPlanJSON: the Wan plan of the released 1.3B preset (wan.md §2, §6.2, §9.2) and of a warped
// FastWan2.2 run.
func TestPlanJSON(t *testing.T) {
	p := plan(t, "-model", "wan2.1-t2v-1.3b", "-height", "480", "-width", "832", "-frames", "81")
	if p.Family != "wan" || len(p.LatentShape) != 4 || p.LatentShape[1] != 21 || p.LatentShape[2] != 60 || p.LatentShape[3] != 104 ||
		p.Tokens != 32760 || p.TextTokens != 512 || p.Sampler != "unipc" || !p.CFG || len(p.VideoSigmas) != 51 ||
		len(p.VideoTimesteps) != 50 || p.VideoTimesteps[0] != 999 || p.VideoTimesteps[49] != 57 ||
		math.Abs(p.DiTTFLOPs-566.0) > 0.1 || p.WeightsBytes <= 0 {
		t.Fatalf("plan %+v", p)
	}
	w := plan(t, "-model", "fastwan2.2-ti2v-5b", "-warp-denoising-steps")
	if w.Sampler != "dmd" || w.CFG || len(w.VideoTimesteps) != 3 || math.Abs(float64(w.VideoTimesteps[1])-939.6724) > 1e-3 {
		t.Fatalf("warped plan %+v", w)
	}
	var sb strings.Builder
	code, out, _ := runArgs("-plan")
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
	for _, c := range []struct {
		args string
		code int
		msg  string
	}{
		{"-plan -height 40 -width 64", 2, "invalid height 40"},
		{"-plan -frames 12", 2, "invalid num_frames 12"},
		{"-plan -fps 500", 2, "invalid fps 500"},
		{"-plan -steps 4", 2, "num_inference_steps"},
		{"-plan -guidance-scale 3", 2, "guidance_scale"},
		{"-plan -negative-prompt blurry", 2, "negative_prompt"},
		{"-plan -preset tiny_wan_t2v -warp-denoising-steps", 2, "warp_denoising_steps"},
		{"-plan -model wan", 2, `invalid model "wan"`},
		{"-plan -preset nope", 2, "preset"},
		{"-plan -dtype f8", 2, "invalid dtype"},
		{"-no-such-flag", 2, "not defined"},
		{"-plan extra", 2, "unexpected argument"},
		{"-out " + out, 2, "invalid prompt"},
		{"-prompt hi -height 40 -width 64 -out " + out, 2, "invalid height"},
		{"-prompt hi -model wan2.1-t2v-1.3b -out " + out, 2, "snapshot folder"},
		{"-prompt hi -backend tpu -out " + out, 2, "invalid backend"},
		{"-prompt hi -memory lots -out " + out, 2, "invalid memory"},
		{"-prompt hi -model " + broken + " -out " + out, 1, filepath.Join("transformer", "config.json")},
	} {
		code, _, errs := runArgs(strings.Fields(c.args)...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.msg)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s (%v)", out, err)
	}
}

// TestGenerate is the README's command on the default model: an H.264 MP4 at the planned size,
// frame count and rate, without an audio stream.
func TestGenerate(t *testing.T) {
	p := plan(t)
	out := filepath.Join(t.TempDir(), "fox.mp4")
	code, stdout, errs := runArgs("-prompt", "a red fox", "-out", out, "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		OutputPath string `json:"output_path"`
		NumFrames  int    `json:"num_frames"`
		Timings    struct {
			Total float64 `json:"total"`
		} `json:"timings"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v in:\n%s", err, stdout)
	}
	if res.OutputPath != out || res.NumFrames != p.NumFrames || res.Timings.Total <= 0 {
		t.Fatalf("result %+v", res)
	}
	info, err := media.Probe(out)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.Video; v == nil || v.Codec != "h264" || v.Width != p.Width || v.Height != p.Height || v.Frames != p.NumFrames ||
		v.FPS != float64(p.FPS) || info.Audio != nil {
		t.Fatalf("probe %+v %+v, want h264 %dx%d, %d frames at %d fps, no audio", info.Video, info.Audio, p.Width, p.Height, p.NumFrames, p.FPS)
	}
	t.Logf("%+v in %.2fs", *info.Video, res.Timings.Total)
	// The base-style preset with CFG, and never overwriting: the new file gets a suffix.
	code, stdout, errs = runArgs("-prompt", "a red fox", "-out", out, "-preset", "tiny_wan_t2v", "-steps", "2")
	if code != 0 || !strings.Contains(errs, "fox_1.mp4") {
		t.Fatalf("second run: exit %d\n%s%s", code, stdout, errs)
	}
}
