package familykit

import (
	"bytes"
	"context"
	"image/jpeg"
	"math"
	"slices"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/testutil"
	"fastvideo/vae/taehv"
)

// poolLatents averages k×k blocks per channel and frame and drops a remainder column.
func TestPoolLatents(t *testing.T) {
	// C=1, T=2, 2x5 -> k=2: 1x2 per frame.
	x := []float32{
		0, 1, 2, 3, 9,
		4, 5, 6, 7, 9,
		10, 10, 20, 20, 9,
		10, 10, 20, 20, 9,
	}
	got, shape := poolLatents(x, []int{1, 1, 2, 2, 5}, 2)
	if want := []float32{2.5, 4.5, 10, 20}; !slices.Equal(got, want) || !slices.Equal(shape, []int{1, 1, 2, 1, 2}) {
		t.Errorf("pooled %v %v, want %v [1 1 2 1 2]", got, shape, want)
	}
}

// TestPreviewPooled: a 320-px canvas previews from latents averaged 2×2 (160-px frames), and the
// preview reaches the step's event.
func TestPreviewPooled(t *testing.T) {
	dec, err := taehv.FromSource(testutil.Backend(t), taehv.Taew21(), taehv.FormulaSource(taehv.Taew21()), taehv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var events []api.Event
	s := family.NewSession(&family.Engine{}, api.Request{}, &api.Result{}, func(e api.Event) { events = append(events, e) }, func(string) {})
	err = s.DenoiseLoop(context.Background(), 1, func(k int) error {
		return Preview(context.Background(), s, dec, k+1, make([]float32, 16*40*40), []int{1, 16, 1, 40, 40})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Preview == nil {
		t.Fatalf("events %+v", events)
	}
	if p := events[0].Preview; p.Height != 160 || p.Width != 160 || p.Step != 1 || !slices.Equal(p.Frames, []int{0}) {
		t.Errorf("preview %dx%d step %d frames %v, want one 160x160 frame of step 1", p.Width, p.Height, p.Step, p.Frames)
	}
}

func TestPreviewPicks(t *testing.T) {
	for frames, want := range map[int][]int{1: {0}, 2: {0, 1}, 3: {0, 1, 2}, 81: {0, 40, 80}, 124: {0, 62, 123}} {
		if got := previewPicks(frames); !slices.Equal(got, want) {
			t.Errorf("previewPicks(%d) = %v, want %v", frames, got, want)
		}
	}
}

// EncodePreview lays the picked frames out left to right in the order given, one grey level each.
func TestEncodePreviewOrder(t *testing.T) {
	const h, w = 16, 8
	levels := []float32{0.1, 0.5, 0.9}
	pix := make([]float32, 3*len(levels)*h*w)
	for c := range 3 {
		for i, v := range levels {
			for p := range h * w {
				pix[(c*len(levels)+i)*h*w+p] = v
			}
		}
	}
	p, err := EncodePreview(pix, []int{0, 7, 13}, h, w)
	if err != nil {
		t.Fatal(err)
	}
	img, err := jpeg.Decode(bytes.NewReader(p.Data))
	if err != nil {
		t.Fatal(err)
	}
	if p.Width != 3*w || p.Height != h || !slices.Equal(p.Frames, []int{0, 7, 13}) {
		t.Fatalf("preview %dx%d frames %v", p.Width, p.Height, p.Frames)
	}
	for i, v := range levels {
		r, _, _, _ := img.At(i*w+w/2, h/2).RGBA()
		if got, want := float64(r>>8), float64(v)*255; math.Abs(got-want) > 4 {
			t.Errorf("panel %d: red %v, want about %v", i, got, want)
		}
	}
	if _, err := EncodePreview(pix[1:], []int{0, 7, 13}, h, w); err == nil {
		t.Error("a short pixel buffer must be refused")
	}
}
