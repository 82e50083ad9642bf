package fastvideo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"fastvideo/fastvideo/family"
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
	g, err := newTiny(WithPromptCache("/proc/pc"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
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
