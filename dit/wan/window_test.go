package wan

import (
	"strings"
	"testing"

	"fastvideo/attention"
	"fastvideo/internal/testutil"
)

// windowForward runs the fixture's weights on vsaInputs' ragged 150-token grid with the window w on
// the attention path of opts.
func windowForward(t *testing.T, fx *testutil.Fixture, opts Options, w *attention.Window) []float32 {
	t.Helper()
	return gridForward(t, fx, fx.Weights(), opts, func(in *ForwardInputs) { in.Window = w })
}

// A window of the sequence or wider is the dense forward bit for bit; a narrow one (the block path on
// the automatic path) equals the masked oracle of PathExact within the f32 parity tolerance, and is
// not the dense forward.
func TestWindowForward(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		in := vsaInputs(t, fx, cfg)
		nt, nh, nw, err := cfg.Tokens(in.Frames, in.Height, in.Width)
		if err != nil {
			t.Fatal(err)
		}
		l, frame := nt*nh*nw, nh*nw
		if l <= attention.WindowTile {
			t.Fatalf("%d tokens fit one tile: the block path would not be exercised", l)
		}
		dense := windowForward(t, fx, Options{}, nil)
		for _, w := range []attention.Window{{Tokens: l}, {Tokens: 2 * l, Sink: l}} {
			testutil.AssertBitExact(t, "covering window", windowForward(t, fx, Options{}, &w), dense)
		}
		// ±1 latent frame and the first frame's tokens as sinks.
		w := &attention.Window{Tokens: 2 * frame, Sink: frame}
		block := windowForward(t, fx, Options{}, w)
		exact := windowForward(t, fx, Options{Attention: attention.Options{Path: attention.PathExact}}, w)
		diff, tol := testutil.MaxAbsDiff(block, exact), testutil.ParityTol(exact)
		t.Logf("%d tokens, window %d, sink %d: block path vs masked oracle %.3g (tolerance %.3g)", l, w.Tokens, w.Sink, diff, tol)
		if diff > tol {
			t.Errorf("block path differs from the masked oracle by %.3g (> %.3g)", diff, tol)
		}
		if d := testutil.MaxAbsDiff(block, dense); d <= tol {
			t.Errorf("the window equals the dense forward (%.3g): it did nothing", d)
		}
	})
}

// A window with VSA, of no tokens or with a sink past the sequence is an error naming the field.
func TestWindowRejectsBadForwards(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		cfg := fixtureConfig(t, fx)
		in := vsaInputs(t, fx, cfg)
		nt, nh, nw, err := cfg.Tokens(in.Frames, in.Height, in.Width)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := FromSource(testutil.Backend(t), cfg, fx.Weights(), Options{Attention: attention.Options{Window: &attention.Window{Tokens: 8}}}); err == nil ||
			!strings.Contains(err.Error(), "ForwardInputs.Window") {
			t.Errorf("a model-wide window: %v, want an error pointing at ForwardInputs.Window", err)
		}
		for _, c := range []struct {
			w    attention.Window
			vsa  *VSA
			want string
		}{
			{attention.Window{Tokens: 8}, &VSA{}, "both set"},
			{attention.Window{}, nil, "window of 0 tokens"},
			{attention.Window{Tokens: 8, Sink: nt*nh*nw + 1}, nil, "exceeds the sequence"},
		} {
			in.Window, in.VSA = &c.w, c.vsa
			if _, err := m.Forward(in); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Window") {
				t.Errorf("%+v with VSA %v: %v, want an error naming ForwardInputs.Window and %q", c.w, c.vsa, err, c.want)
			}
		}
	})
}
