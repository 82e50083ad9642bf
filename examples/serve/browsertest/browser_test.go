// Package browsertest checks the server's page in a real headless Chromium. It runs only when
// FASTVIDEO_BROWSERTEST=1 (Debian: apt-get install chromium; CHROMIUM names another binary):
//
//	FASTVIDEO_BROWSERTEST=1 go test -v ./examples/serve/browsertest
//
// The page is driven as a person would: type a prompt, press Generate, watch the progress bar,
// play the video. FASTVIDEO_BROWSERTEST_SCREENSHOT=file.png saves what the page shows at the end.
package browsertest

import (
	"context"
	"encoding/base64"
	"math"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"fastvideo/examples/serve/server"
	"fastvideo/fastvideo"
)

// pageState is what the test reads off the page.
type pageState struct {
	Progress float64 `json:"progress"`
	Status   string  `json:"status"`
	Duration float64 `json:"duration"` // NaN (sent as null) until the video's metadata loaded
	Hidden   bool    `json:"hidden"`
	Options  int     `json:"options"`
	// PreviewStep is the step of the preview image shown (0: none); PreviewWidth its decoded width.
	PreviewStep  int `json:"previewStep"`
	PreviewWidth int `json:"previewWidth"`
}

const readState = `(() => { const v = document.getElementById("video"), p = document.getElementById("preview");
  if (!v) return { status: "loading" };
  return { progress: document.getElementById("progress").value, status: document.getElementById("status").textContent,
    duration: isFinite(v.duration) ? v.duration : 0, hidden: v.hidden,
    options: document.getElementById("size").options.length,
    previewStep: p && !p.hidden ? Number(p.dataset.step || 0) : 0,
    previewWidth: p && !p.hidden && p.complete ? p.naturalWidth : 0 }; })()`

// openPage serves tiny-h3 and opens its page in a headless Chromium.
func openPage(t *testing.T) (*browser, string) {
	t.Helper()
	if os.Getenv("FASTVIDEO_BROWSERTEST") != "1" {
		t.Skip("set FASTVIDEO_BROWSERTEST=1 to run the page in headless Chromium")
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	gen, err := fastvideo.New(context.Background(), "tiny-h3", fastvideo.WithBackend("go:ops_sequential"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gen.Close() })
	srv, err := server.New(server.Config{Generator: gen, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(0) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	b, err := launch(chromium, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	tab, err := b.open(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	return b, tab
}

// TestPageShowsPreviews: with "Live preview" ticked and the tiny decoder chosen, the page shows the
// denoising steps' previews (a decoded JPEG, its step rising) while the job runs, then the video.
func TestPageShowsPreviews(t *testing.T) {
	b, tab := openPage(t)
	poll(t, b, tab, "the model's choices", func(s pageState) bool { return s.Options > 0 })
	if err := b.eval(tab, `document.getElementById("prompt").value = "a red fox in the snow";
		document.getElementById("preview-on").checked = true; document.getElementById("decoder").value = "tiny";
		document.getElementById("submit").click(); true`, nil); err != nil {
		t.Fatal(err)
	}
	steps := map[int]bool{}
	running := false
	st := poll(t, b, tab, "the video", func(s pageState) bool {
		if s.PreviewStep > 0 && s.PreviewWidth > 0 {
			steps[s.PreviewStep] = true
			running = running || (s.Duration == 0 && s.Progress < 100)
		}
		return s.Duration > 0
	})
	t.Logf("preview steps seen: %v; final %+v", steps, st)
	if !running || len(steps) == 0 {
		t.Errorf("no preview image while the job ran (steps seen %v)", steps)
	}
}

func TestPageGeneratesAndPlays(t *testing.T) {
	b, tab := openPage(t)
	st := poll(t, b, tab, "the model's choices", func(s pageState) bool { return s.Options > 0 })
	if err := b.eval(tab, `document.getElementById("prompt").value = "a red fox in the snow";
		document.getElementById("submit").click(); true`, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[float64]bool{}
	st = poll(t, b, tab, "the video", func(s pageState) bool {
		seen[s.Progress] = true
		return s.Duration > 0
	})
	t.Logf("progress values seen: %v; final status %q; video duration %.3f s", keys(seen), st.Status, st.Duration)
	if st.Progress != 100 || st.Hidden || math.Abs(st.Duration-22.0/24) > 0.1 {
		t.Errorf("final page: %+v, want progress 100 and a visible 22-frame (0.92 s) video", st)
	}
	if len(seen) < 3 {
		t.Errorf("the progress bar took only the values %v", keys(seen))
	}
	if path := os.Getenv("FASTVIDEO_BROWSERTEST_SCREENSHOT"); path != "" {
		screenshot(t, b, tab, path)
	}
}

// poll reads the page every 100 ms until ok (at most a minute).
func poll(t *testing.T, b *browser, tab, what string, ok func(pageState) bool) pageState {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var s pageState
	for time.Now().Before(deadline) {
		if err := b.eval(tab, readState, &s); err != nil {
			t.Fatal(err)
		}
		if ok(s) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; the page shows %+v", what, s)
	return s
}

func keys(m map[float64]bool) []float64 {
	var out []float64
	for k := range m {
		out = append(out, k)
	}
	return out
}

func screenshot(t *testing.T, b *browser, tab, path string) {
	var shot struct{ Data string }
	if err := b.call(tab, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err == nil {
		err = os.WriteFile(path, png, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}
