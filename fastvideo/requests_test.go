package fastvideo

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/h3"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/testutil"
)

// TestModelLookup: unknown names and folders no family recognizes are invalid input naming what
// each family accepts; another family's options are invalid input too.
func TestModelLookup(t *testing.T) {
	var re *RequestError
	if _, err := LookupModel("wan-9000"); !errors.As(err, &re) || re.Field != "model" ||
		!strings.Contains(err.Error(), "fasth3, h3, tiny-h3 (minimax_h3)") || !strings.Contains(err.Error(), "tiny-wan") {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := New(context.Background(), "fastwan2.1-t2v-1.3b"); !errors.As(err, &re) || re.Field != "model" ||
		!strings.Contains(err.Error(), "FastVideo/FastWan2.1-T2V-1.3B-Diffusers") {
		t.Errorf("New(fastwan2.1-t2v-1.3b): %v", err)
	}
	for _, c := range []struct {
		model string
		opts  interface{ FamilyName() string }
	}{
		{"fasth3", &wan.Options{WarpDenoisingSteps: Ptr(false)}},
		{"h3", &wan.Options{RenoiseNoise: []float32{}}},
		{"wan2.1-t2v-1.3b", &h3.Options{}},
	} {
		if _, err := Plan(c.model, Request{Options: c.opts}); !errors.As(err, &re) || re.Field != "options" ||
			!strings.Contains(err.Error(), "family's options") {
			t.Errorf("%s with %T: %v", c.model, c.opts, err)
		}
	}

	// An empty folder is no model: the message names what each family's snapshot holds.
	empty := t.TempDir()
	checkModelError := func(label, dir string, want ...string) {
		t.Helper()
		_, planErr := Plan(dir, Request{})
		_, newErr := New(context.Background(), dir, WithBackend(testutil.BackendSpec()))
		for _, err := range []error{planErr, newErr} {
			if !errors.As(err, &re) || re.Field != "model" {
				t.Errorf("%s: %v, want a model RequestError", label, err)
				continue
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q does not name %q", label, err, w)
				}
			}
		}
	}
	checkModelError("empty folder", empty, "model_index.json", "audio_vae/config.json", "transformer/config.json")
	checkModelError("missing folder", filepath.Join(empty, "nothing-here"), "a model folder")
	// A folder shaped like an H3 snapshot but without its transformer config names that file.
	h3ish := t.TempDir()
	for _, d := range []string{"audio_vae", "transformer"} {
		if err := os.Mkdir(filepath.Join(h3ish, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	checkModelError("H3 folder without transformer/config.json", h3ish, filepath.Join("transformer", "config.json"))
}

// TestHugeValuesFailFast: sizes and frame counts far beyond any model's bounds are invalid input,
// reported at once (no arithmetic or allocation proportional to them).
func TestHugeValuesFailFast(t *testing.T) {
	for _, c := range []struct {
		model string
		req   Request
		field string
	}{
		{"tiny-h3", Request{Height: 4096, Width: 96}, "height"},
		{"h3", Request{Height: 320000, Width: 832}, "height"},
		{"h3", Request{NumFrames: math.MaxInt}, "num_frames"},
		{"h3", Request{Height: math.MaxInt - 31, Width: 32}, "height"},
		{"wan2.1-t2v-1.3b", Request{NumFrames: math.MaxInt}, "num_frames"},
		{"wan2.1-t2v-1.3b", Request{Height: math.MaxInt - 31, Width: 32}, "height"},
		{"tiny-wan", Request{Height: 4096, Width: 64}, "height"},
		// Prompts: a megabyte is refused before any tokenizer runs; H3 refuses more tokens than
		// its text length (1,024) by the estimate, which never exceeds the real count.
		{"tiny-h3", Request{Prompt: strings.Repeat("fox ", 1<<18)}, "prompt"},
		{"tiny-wan", Request{Prompt: "fox", NegativePrompt: strings.Repeat("x", family.MaxPromptBytes+1)}, "negative_prompt"},
		{"fasth3", Request{Prompt: strings.Repeat("fox ", 1100)}, "prompt"},
	} {
		err := planWithin(t, 5*time.Second, c.model, c.req)
		var re *RequestError
		if !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("%s %+v: %v, want a %s RequestError", c.model, c.req, err, c.field)
		}
	}
}

// planWithin runs Plan, failing the test if it does not return within limit.
func planWithin(t testing.TB, limit time.Duration, model string, req Request) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- errors.New("panic: " + strings.TrimSpace(strings.Split(fmtAny(r), "\n")[0]))
			}
		}()
		_, err := Plan(model, req)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && strings.HasPrefix(err.Error(), "panic: ") {
			t.Fatalf("Plan(%s, %+v) panicked: %v", model, req, err)
		}
		return err
	case <-time.After(limit):
		t.Fatalf("Plan(%s, %+v) did not return within %v", model, req, limit)
		return nil
	}
}

func fmtAny(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return "non-string panic value"
}

// FuzzPlan: whatever the request's numbers, Plan returns (no panic, no hang) and every rejection
// is a *RequestError.
func FuzzPlan(f *testing.F) {
	f.Add(uint8(0), 0, 0, 0, 0, 0, 0.0, false, false, 0, 0, 0)
	f.Add(uint8(1), 480, 832, 124, 4, 24, 1.0, true, true, 2, 2, 93)
	f.Add(uint8(2), 48, 64, 9, 3, 16, 5.0, false, false, 0, 0, 0)
	f.Add(uint8(3), -480, 832, -5, -1, -1, -2.0, true, false, 1, 1, -3)
	f.Add(uint8(0), 4096, 96, 400, 1001, 30, math.Inf(1), false, true, 0, 1, 0)
	f.Add(uint8(1), math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, math.NaN(), true, true, math.MaxInt, math.MaxInt, math.MaxInt)
	f.Add(uint8(3), math.MinInt, 32, math.MinInt, math.MinInt, math.MinInt, -math.MaxFloat64, false, false, math.MinInt, math.MinInt, math.MinInt)
	f.Add(uint8(1), 1920, 1920, 345, 1000, 24, 1.0, true, true, 8, 8, 100000)
	models := []string{"tiny-h3", "fasth3", "tiny-wan", "wan2.1-t2v-1.3b"}
	f.Fuzz(func(t *testing.T, model uint8, h, w, frames, steps, fps int, guidance float64, fast, fastSpatial bool, factor, scale, tokens int) {
		req := Request{Height: h, Width: w, NumFrames: frames, NumInferenceSteps: steps, FPS: fps, GuidanceScale: guidance,
			Fast: fast, FastSpatial: fastSpatial, FastFactor: factor, FastSpatialScale: scale, PromptTokens: tokens}
		name := models[int(model)%len(models)]
		err := planWithin(t, 20*time.Second, name, req)
		var re *RequestError
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("Plan(%s, %+v): %v is not a *RequestError", name, req, err)
		}
	})
}

// A prompt whose estimate passes but whose real token count exceeds H3's text length is refused
// after tokenization, before the text encoder loads.
func TestPromptTokenLimitAfterTokenizing(t *testing.T) {
	g := tinyGenerator(t)
	prompt := strings.Repeat("🦊", 1200) // one symbol run to the estimator, thousands of tokens
	var loads []string
	g.loadHook = func(c string) { loads = append(loads, c) }
	defer func() { g.loadHook = nil }()
	_, err := g.Generate(context.Background(), Request{Prompt: prompt, SkipSave: true, ReturnLatents: true})
	var re *RequestError
	if !errors.As(err, &re) || re.Field != "prompt" {
		t.Fatalf("err %v, want a prompt RequestError", err)
	}
	for _, c := range loads {
		if c != "tokenizer" {
			t.Fatalf("loaded %v before refusing the prompt", loads)
		}
	}
}
