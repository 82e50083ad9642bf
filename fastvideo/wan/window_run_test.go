package wan_test

import (
	"strings"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
)

// TestWanWindowRun: on tiny-wan a window of a latent frame's tokens changes the latents and the run
// reports the drift warning once, in Result.Warnings and as a Warning event; a window of the whole
// sequence is the dense run bit for bit, without a warning. The token grid is the plan's.
func TestWanWindowRun(t *testing.T) {
	g := fvtest.Open(t, wan.TinyName)
	base := fastvideo.Request{Prompt: "a red fox"}
	p, err := g.Plan(base)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Details.(*wan.PlanDetails)
	frame := d.TokenGrid[1] * d.TokenGrid[2]
	if d.Tokens <= frame {
		t.Fatalf("tiny-wan's %d tokens are one frame: a window of a frame tests nothing", d.Tokens)
	}
	dense := fvtest.LatentsOnly(t, g, base)
	run := func(tokens, sink int) (*fastvideo.Result, []string) {
		req := base
		req.Options = &wan.Options{AttentionWindow: &wan.AttentionWindow{Tokens: tokens, Sink: sink}}
		var events []string
		req.Progress = func(e fastvideo.Event) {
			if e.Kind == fastvideo.Warning && strings.Contains(e.Message, "windowed self-attention") {
				events = append(events, e.Message)
			}
		}
		return fvtest.LatentsOnly(t, g, req), events
	}
	covering, events := run(d.Tokens, 0)
	testutil.AssertBitExact(t, "covering window", covering.Latents.Video, dense.Latents.Video)
	if len(events) != 0 || len(covering.Warnings) != 0 {
		t.Errorf("a covering window warned: %q %q", events, covering.Warnings)
	}
	windowed, events := run(frame, 1)
	if diff := testutil.MaxAbsDiff(windowed.Latents.Video, dense.Latents.Video); diff == 0 {
		t.Error("a window of one frame's tokens left the latents as dense attention makes them")
	}
	var warned []string
	for _, w := range windowed.Warnings {
		if strings.Contains(w, "windowed self-attention") {
			warned = append(warned, w)
		}
	}
	if len(warned) != 1 || len(events) != 1 || events[0] != warned[0] {
		t.Errorf("warnings %q, events %q; want the window's warning once in each", windowed.Warnings, events)
	}
}
