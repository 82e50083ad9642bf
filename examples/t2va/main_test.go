package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestPlanJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(strings.Fields("-plan -json -model fasth3 -height 480 -width 832 -frames 124 -fps 24 -steps 4"), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var p struct {
		CanvasHeight      int       `json:"canvas_height"`
		CanvasWidth       int       `json:"canvas_width"`
		NumFrames         int       `json:"num_frames"`
		VideoLatentFrames int       `json:"video_latent_frames"`
		AudioLatentFrames int       `json:"audio_latent_frames"`
		LatentHeight      int       `json:"latent_height"`
		LatentWidth       int       `json:"latent_width"`
		VideoSigmas       []float32 `json:"video_sigmas"`
		AudioSigmas       []float32 `json:"audio_sigmas"`
		DiTTFLOPs         float64   `json:"dit_tflops_per_step"`
		WeightsBytes      int64     `json:"weights_bytes"`
		Rows              struct {
			Text, Audio, Video, Total int
		} `json:"rows"`
	}
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("%v in:\n%s", err, out.String())
	}
	if p.CanvasHeight != 480 || p.CanvasWidth != 832 || p.NumFrames != 124 || p.VideoLatentFrames != 37 ||
		p.AudioLatentFrames != 207 || p.LatentHeight != 30 || p.LatentWidth != 52 || p.Rows.Audio != 414 ||
		p.Rows.Video != 14430 || p.Rows.Total != 14844 || len(p.VideoSigmas) != 5 || len(p.AudioSigmas) != 5 ||
		p.DiTTFLOPs <= 0 || p.WeightsBytes <= 0 {
		t.Fatalf("plan %+v", p)
	}
}

func TestPlanTable(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-plan", "-model", "h3", "-prompt", "A cat plays the piano."}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, s := range []string{"768x1344", "minimax_h3_t2va", "video sigmas", "TFLOP per step"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		args string
		code int
		msg  string
	}{
		{"-plan -height 481 -width 832", 2, "invalid height 481"},
		{"-plan -frames 400", 2, "invalid num_frames 400"},
		{"-plan -model wan", 2, `invalid model "wan"`},
		{"-plan -fps 30", 2, "invalid fps 30"},
		{"-plan -steps -2", 2, "num_inference_steps"},
		{"-plan -negative-prompt blurry", 2, "negative_prompt"},
		{"-plan -model fasth3 -preset nope", 2, "preset"},
		{"-no-such-flag", 2, "not defined"},
		{"-plan extra", 2, "unexpected argument"},
		{"-prompt hi -height 481 -width 832", 2, "invalid height"},
		{"-model fasth3", 2, "invalid prompt"},
		{"-prompt hi", 1, "generation is not implemented yet; use -plan"},
		{"-json -prompt hi", 2, "-json only applies to -plan"},
	} {
		var out, errb bytes.Buffer
		code := run(strings.Fields(c.args), &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}
