package fastvideo

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/framefilter"
	"fastvideo/internal/imageops"
)

// invertFilter inverts every colour and takes a little time, so that its share shows.
type invertFilter struct{}

func (invertFilter) Name() string { return "invert" }
func (invertFilter) Filter(_ context.Context, in Frames) (Frames, error) {
	time.Sleep(time.Millisecond)
	out := in
	out.RGB = make([]byte, len(in.RGB))
	for i, v := range in.RGB {
		out.RGB[i] = 255 - v
	}
	return out, nil
}
func (invertFilter) Flush(context.Context) (Frames, error) { return Frames{}, nil }

// TestFrameFilters: the identity filter gives tiny-h3's frames bit for bit, an inverting filter
// inverts them, and its time is the filter stage's.
func TestFrameFilters(t *testing.T) {
	req := Request{Prompt: "a red fox", Seed: Ptr[int64](7), NumInferenceSteps: 1, SkipSave: true, ReturnFrames: true}
	frames := func(g *VideoGenerator) *Result {
		t.Helper()
		res, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	ref := frames(tinyGenerator(t))
	if len(ref.Frames) != 22 {
		t.Fatalf("%d frames", len(ref.Frames))
	}
	for _, c := range []struct {
		filter FrameFilter
		want   func(byte) byte
	}{
		{family.Identity{}, func(v byte) byte { return v }},
		{invertFilter{}, func(v byte) byte { return 255 - v }},
	} {
		g, err := newTiny(WithFrameFilter(c.filter))
		if err != nil {
			t.Fatal(err)
		}
		res := frames(g)
		g.Close()
		if len(res.Frames) != len(ref.Frames) {
			t.Fatalf("%s: %d frames, want %d", c.filter.Name(), len(res.Frames), len(ref.Frames))
		}
		for i, f := range ref.Frames {
			want := make([]byte, len(f))
			for j, v := range f {
				want[j] = c.want(v)
			}
			if !bytes.Equal(res.Frames[i], want) {
				t.Fatalf("%s: frame %d differs from the expected", c.filter.Name(), i)
			}
		}
		if !(res.Timings.Of(StageFilter) > 0) {
			t.Errorf("%s: filter time %v", c.filter.Name(), res.Timings.Of(StageFilter))
		}
	}
	if _, err := newTiny(WithFrameFilter(nil)); err == nil {
		t.Error("a nil filter was accepted")
	}
}

// TestPromptCacheWarning: a prompt cache that cannot be written does not stop New or Generate;
// the first run reports it once, as an event and in the result, and the next run does not.
func TestPromptCacheWarning(t *testing.T) {
	g := openGenerator(t, newTiny, WithPromptCache("/proc/pc"))
	req := Request{Prompt: "a red fox", NumInferenceSteps: 1, SkipSave: true, ReturnLatents: true}
	run := func() (*Result, []string) {
		t.Helper()
		var warnings []string
		r := req
		r.Progress = func(e Event) {
			if e.Kind == Warning {
				warnings = append(warnings, e.Message)
			}
		}
		res, err := g.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return res, warnings
	}
	res, warnings := run()
	if len(warnings) != 1 || !strings.Contains(warnings[0], "/proc/pc") || len(res.Warnings) != 1 || res.Warnings[0] != warnings[0] {
		t.Errorf("first run: events %q, result %q", warnings, res.Warnings)
	}
	res, warnings = run()
	if len(warnings) != 0 || len(res.Warnings) != 0 {
		t.Errorf("second run repeats: events %q, result %q", warnings, res.Warnings)
	}
}

// sizeFilter records the size of the frames it is given and passes them on.
type sizeFilter struct{ sizes map[[2]int]int }

func (sizeFilter) Name() string { return "size" }
func (s sizeFilter) Filter(_ context.Context, in Frames) (Frames, error) {
	s.sizes[[2]int{in.Width, in.Height}] += in.Count
	return in, nil
}
func (sizeFilter) Flush(context.Context) (Frames, error) { return Frames{}, nil }

// TestGenerateFastSpatial runs the spatial fast mode through the API: tiny-h3 at 128x192 denoises
// and decodes its 64x96 canvas (tiny-h3's default size, so the same seed gives the same decoded
// frames as a plain run there), the plan's filter resizes and sharpens them before the caller's
// filter sees them, and the MP4 has the plan's frame count, size and duration.
func TestGenerateFastSpatial(t *testing.T) {
	req := Request{Prompt: "a red fox", Seed: Ptr[int64](7), NumInferenceSteps: 1, Height: 128, Width: 192,
		FastSpatial: true, Upsample: "bilinear", ReturnFrames: true, OutputPath: t.TempDir()}
	plan, err := tinyGenerator(t).Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	if plan.CanvasHeight != 64 || plan.CanvasWidth != 96 || fmt.Sprint(plan.FrameFilters) != "[bilinear to 128x192, sharpen 0.4]" {
		t.Fatalf("plan canvas %dx%d, filters %q", plan.CanvasHeight, plan.CanvasWidth, plan.FrameFilters)
	}
	sizes := sizeFilter{sizes: map[[2]int]int{}}
	g := openGenerator(t, newTiny, WithFrameFilter(sizes))
	res, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes.sizes) != 1 || sizes.sizes[[2]int{192, 128}] != plan.NumFrames {
		t.Errorf("the caller's filter saw %v, want %d frames of 192x128", sizes.sizes, plan.NumFrames)
	}
	info, err := probe(res.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.Video; v == nil || v.Width != 192 || v.Height != 128 || v.Frames != plan.NumFrames ||
		math.Abs(v.Duration-plan.DurationSeconds) > 0.5/float64(plan.FPS) {
		t.Fatalf("video stream %+v, plan %d frames lasting %.3f s", info.Video, plan.NumFrames, plan.DurationSeconds)
	}
	checkUpsampledFrames(t, res.Frames, req)
}

// checkUpsampledFrames compares fast-spatial frames with a plain run at the canvas size passed
// through the same pixel steps.
func checkUpsampledFrames(t *testing.T, got [][]byte, req Request) {
	t.Helper()
	plain := Request{Prompt: req.Prompt, Seed: req.Seed, NumInferenceSteps: req.NumInferenceSteps, SkipSave: true, ReturnFrames: true}
	ref, err := tinyGenerator(t).Generate(context.Background(), plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ref.Frames) {
		t.Fatalf("%d frames, the plain run %d", len(got), len(ref.Frames))
	}
	f, err := framefilter.NewPixelFilter(framefilter.PixelSteps{Width: 192, Height: 128, Interpolation: imageops.Bilinear,
		Sharpen: framefilter.SpatialSharpen}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, frame := range ref.Frames {
		want, err := f.Filter(context.Background(), Frames{Width: 96, Height: 64, Count: 1, RGB: frame})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[i], want.RGB) {
			t.Fatalf("frame %d differs from the plain run's frame resized and sharpened", i)
		}
	}
}
