package wan

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/familykit"
)

// windowRequest is a request with the attention window of tokens and sink.
func windowRequest(req api.Request, tokens, sink int, vsa *VSA) api.Request {
	req.Options = &Options{AttentionWindow: &AttentionWindow{Tokens: tokens, Sink: sink}, VSA: vsa}
	return req
}

// The plan names the window in its attention row, in tokens and latent frames of the plan's own
// token grid (the released 1.3B at 480×832×81: 1,560 tokens a frame, ±3 frames is ±4,680 tokens); on
// a VSA-trained checkpoint the window runs instead of VSA; a window of the whole sequence is dense.
func TestPlanWindow(t *testing.T) {
	req := api.Request{Height: 480, Width: 832, NumFrames: 81}
	_, d := mustPlan(t, "wan2.1-t2v-1.3b", req, api.DTypeAuto)
	frame := d.TokenGrid[1] * d.TokenGrid[2]
	p, dw := mustPlan(t, "wan2.1-t2v-1.3b", windowRequest(req, 6*frame, 7, nil), api.DTypeAuto)
	want := fmt.Sprintf("windowed: ±%d tokens (≈ ±3 frames), sink 7; off-default research knob, dense-trained checkpoints drift; key tiles %s",
		3*frame, familykit.WindowFineStage(api.DTypeAuto))
	if dw.Attention != want {
		t.Errorf("attention %q, want %q", dw.Attention, want)
	}
	checkTable(t, p, want)

	_, df := mustPlan(t, "fastwan2.1-t2v-1.3b", windowRequest(req, 3*frame, 0, &VSA{Off: true}), api.DTypeAuto)
	if df.VSA != nil || !strings.Contains(df.Attention, "±1.5 frames") || !strings.Contains(df.Attention, "instead of the checkpoint's Video Sparse Attention") {
		t.Errorf("FastWan with a window: VSA %+v, attention %q; want the window instead of VSA", df.VSA, df.Attention)
	}

	for _, tokens := range []int{d.Tokens, 2 * d.Tokens} {
		res, err := builtin(t, "wan2.1-t2v-1.3b").Resolve(windowRequest(req, tokens, d.Tokens, nil), false)
		if err != nil {
			t.Fatal(err)
		}
		if r := res.(*resolved); r.window != nil || !strings.HasPrefix(r.attentionWhy, "dense: the attention window") {
			t.Errorf("window %d over %d tokens: runs %+v (%q), want dense", tokens, d.Tokens, r.window, r.attentionWhy)
		}
	}
	res, err := builtin(t, "wan2.1-t2v-1.3b").Resolve(windowRequest(req, 4, 1, nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if w := res.(*resolved).window; w == nil || *w != (attention.Window{Tokens: 4, Sink: 1}) {
		t.Errorf("a window of 4 tokens, sink 1 resolves to %+v", w)
	}
}

// A bad window is a RequestError on its field before anything loads: negative tokens, a sink without
// a window, a negative sink, a sink beyond the smallest forward's tokens (refine's stage 1), and a
// window with VSA asked for.
func TestWindowRequestErrors(t *testing.T) {
	req := api.Request{Height: 480, Width: 832, NumFrames: 81}
	_, d := mustPlan(t, "wan2.1-t2v-1.3b", req, api.DTypeAuto)
	refine := api.Request{Height: 480, Width: 832, NumFrames: 81, Refine: true}
	_, dr := mustPlan(t, "fastwan2.1-t2v-1.3b", refine, api.DTypeAuto)
	stage1 := dr.Refine.Stage1Tokens
	if stage1 >= dr.Tokens {
		t.Fatalf("refine's stage 1 has %d tokens, stage 2 %d: the case tests nothing", stage1, dr.Tokens)
	}
	for _, c := range []struct {
		name, model string
		req         api.Request
		field       string
	}{
		{"negative_window", "wan2.1-t2v-1.3b", windowRequest(req, -1, 0, nil), "attention_window"},
		{"sink_without_window", "wan2.1-t2v-1.3b", windowRequest(req, 0, 5, nil), "attention_window_sink"},
		{"negative_sink", "wan2.1-t2v-1.3b", windowRequest(req, 64, -1, nil), "attention_window_sink"},
		{"sink_past_tokens", "wan2.1-t2v-1.3b", windowRequest(req, 64, d.Tokens+1, nil), "attention_window_sink"},
		{"sink_past_refine_stage1", "fastwan2.1-t2v-1.3b", windowRequest(refine, 64, stage1+1, nil), "attention_window_sink"},
		{"with_vsa", "fastwan2.1-t2v-1.3b", windowRequest(req, 64, 0, &VSA{}), "attention_window"},
		{"with_vsa_sparsity", "fastwan2.1-t2v-1.3b", windowRequest(req, 64, 0, &VSA{Sparsity: api.Ptr(0.5)}), "attention_window"},
	} {
		_, _, err := plan(t, builtin(t, c.model), c.req, api.DTypeAuto)
		var re *api.RequestError
		if !errors.As(err, &re) || re.Field != c.field || re.Allowed == "" {
			t.Errorf("%s: error %v, want a request error on %s", c.name, err, c.field)
		}
	}
	// The edges are fine: the whole sequence as sink, a window of 0 with VSA (off), a window with VSA off.
	for _, ok := range []api.Request{
		windowRequest(req, 64, d.Tokens, nil), windowRequest(req, 0, 0, &VSA{}), windowRequest(req, 64, 0, &VSA{Off: true}),
	} {
		if _, _, err := plan(t, builtin(t, "fastwan2.1-t2v-1.3b"), ok, api.DTypeAuto); err != nil {
			t.Errorf("%+v: %v", ok.Options, err)
		}
	}
	if w := familykit.WindowWarning(attention.Window{Tokens: 10, Sink: 2}); !strings.Contains(w, "±5 tokens, sink 2") || !strings.Contains(w, "dense") {
		t.Errorf("warning %q", w)
	}
}
