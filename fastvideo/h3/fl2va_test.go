package h3_test

import (
	"image"
	"image/color"
	"math"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/h3"
	"fastvideo/internal/testutil"
)

// keyframeImage is a smooth RGB picture with some structure, so that the resize, the vision tower
// and the encoder see more than a flat field.
func keyframeImage(w, h int, phase float64) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(255 * x / w), uint8(255 * y / h), uint8(128 + 100*math.Sin(float64(x+y)/5+phase)), 255})
		}
	}
	return img
}

// TestFL2VAKeyframes: first only, last only and both run on tiny-h3; the plan shows one frame of
// condition rows per keyframe with its vision tokens and extra cost; the latents are finite,
// repeatable, and differ from the text-only run and between the keyframe sets.
func TestFL2VAKeyframes(t *testing.T) {
	g := fvtest.Open(t, h3.TinyName)
	first, last := keyframeImage(120, 90, 0), keyframeImage(90, 120, 1)
	base := fastvideo.Request{Prompt: "a red fox runs", NumFrames: 5}
	text := fvtest.LatentsOnly(t, g, base)
	rowsPerFrame := text.Plan.Details.(*h3.PlanDetails).Rows.Video / text.Plan.VideoLatentFrames
	cases := []struct {
		name        string
		first, last image.Image
		anchors     []string
	}{
		{"first", first, nil, []string{"first"}},
		{"last", nil, last, []string{"last"}},
		{"both", first, last, []string{"first", "last"}},
	}
	seen := map[string][]float32{}
	for _, c := range cases {
		req := base
		req.Image, req.LastImage = c.first, c.last
		res := fvtest.LatentsOnly(t, g, req)
		d := res.Plan.Details.(*h3.PlanDetails)
		if d.Rows.ConditionVideo != len(c.anchors)*rowsPerFrame || len(d.Keyframes) != len(c.anchors) || d.KeyframeDiTTFLOPsTotal <= 0 {
			t.Fatalf("%s: plan rows %+v, keyframes %+v, extra %g TFLOP", c.name, d.Rows, d.Keyframes, d.KeyframeDiTTFLOPsTotal)
		}
		for i, k := range d.Keyframes {
			// 64x96 canvas: 4x6 patches of 16 merged 2x2 -> 6 vision tokens.
			if k.Anchor != c.anchors[i] || k.VisionTokens != 6 {
				t.Errorf("%s: keyframe %d %+v", c.name, i, k)
			}
		}
		// Labels and vision blocks lengthen the prompt rows.
		if d.Rows.Text <= text.Plan.Details.(*h3.PlanDetails).Rows.Text+len(c.anchors)*8 {
			t.Errorf("%s: %d text rows, text-only %d", c.name, d.Rows.Text, text.Plan.Details.(*h3.PlanDetails).Rows.Text)
		}
		x := res.Latents.Video
		for i, v := range x {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: latent %d is %v", c.name, i, v)
			}
		}
		if testutil.SameBits(x, text.Latents.Video) {
			t.Errorf("%s: the keyframes do not change the latents", c.name)
		}
		for other, y := range seen {
			if testutil.SameBits(x, y) {
				t.Errorf("%s and %s give the same latents", c.name, other)
			}
		}
		seen[c.name] = x
		if again := fvtest.LatentsOnly(t, g, req); !testutil.SameBits(again.Latents.Video, x) {
			t.Errorf("%s: two runs differ", c.name)
		}
	}
}
