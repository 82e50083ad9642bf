package h3_test

import (
	"context"
	"image"
	"image/color"
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/familykit"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/h3"
	"fastvideo/internal/imagefile"
	"fastvideo/internal/testutil"
	"fastvideo/vae/h3video"
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

// tinyKeyframeLatents are the normalized latents of canvas-sized keyframes by tiny-h3's VAE
// encoder, computed outside the pipeline as the latent preparation does it: pixels/255, encoded,
// the posterior sampled from the fixed seed (restarted per keyframe), rounded through float16,
// normalized. It also returns tiny-h3's float32 video VAE to decode them with.
func tinyKeyframeLatents(t *testing.T, images ...image.Image) ([][]float32, *h3video.Decoder) {
	t.Helper()
	spec := h3.TinySpec()
	tw, err := h3.NewTinyWeights(spec)
	if err != nil {
		t.Fatal(err)
	}
	opts := h3video.Options{DType: dtypes.Float32}
	enc := testutil.Open(t, func() (*h3video.Encoder, error) {
		return h3video.EncoderFromSource(testutil.Backend(t), spec.VAE, tw.VideoEncoder, opts)
	})
	var out [][]float32
	for _, img := range images {
		rgb, err := imagefile.ToRGB(img)
		if err != nil {
			t.Fatal(err)
		}
		pixels, err := packing.KeyframePixels(rgb.Pix, rgb.Width, rgb.Height)
		if err != nil {
			t.Fatal(err)
		}
		post, err := enc.EncodeKeyframe(context.Background(), pixels, []int{1, 3, 1, rgb.Height, rgb.Width})
		if err != nil {
			t.Fatal(err)
		}
		z, err := post.Sample(familykit.GaussianNoise(packing.KeyframeEncodeSeed, familykit.KeyframeSampleNoise, len(post.Mean)))
		if err != nil {
			t.Fatal(err)
		}
		h3video.RoundTripF16(z)
		if z, err = spec.VAE.NormalizeLatents(z, post.Shape); err != nil {
			t.Fatal(err)
		}
		out = append(out, z)
	}
	dec := testutil.Open(t, func() (*h3video.Decoder, error) {
		return h3video.FromSource(testutil.Backend(t), spec.VAE, tw.VideoVAE, opts)
	})
	return out, dec
}

// conditionFrame is keyframe k's [C][1][Hl][Wl] latent out of [C][K][Hl][Wl] condition latents.
func conditionFrame(cond []float32, shape []int, k int) []float32 {
	c, frames, plane := shape[0], shape[1], shape[2]*shape[3]
	out := make([]float32, 0, c*plane)
	for ch := 0; ch < c; ch++ {
		out = append(out, cond[(ch*frames+k)*plane:][:plane]...)
	}
	return out
}

// decodeFirstFrame decodes one latent frame [C][1][Hl][Wl] into its RGB8 frame.
func decodeFirstFrame(t *testing.T, dec *h3video.Decoder, z []float32, shape []int) []byte {
	t.Helper()
	var first []byte
	if err := dec.Decode(context.Background(), z, []int{1, shape[0], 1, shape[2], shape[3]}, func(f h3video.Frames) error {
		if first == nil {
			first = f.RGB24(nil)[:3*f.Width*f.Height]
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return first
}

// maxLevelDiff is the largest per-byte difference of two RGB8 frames.
func maxLevelDiff(t *testing.T, a, b []byte) int {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("frames of %d and %d bytes", len(a), len(b))
	}
	worst := 0
	for i := range a {
		worst = max(worst, int(math.Abs(float64(a[i])-float64(b[i]))))
	}
	return worst
}

// TestFL2VAConditionFixed: first only, last only and both on tiny-h3: after sampling, the condition
// latents are bit for bit the keyframes' VAE latents (encoded outside the pipeline) mixed at 0.999
// with the request seed's keyframe noise, so sampling never touched them; and each decodes, through
// tiny-h3's video VAE, to the frame of decode(encode(keyframe)) computed directly, up to the 0.1%
// noise in the mix.
func TestFL2VAConditionFixed(t *testing.T) {
	g := fvtest.Open(t, h3.TinyName)
	first, last := keyframeImage(96, 64, 0), keyframeImage(96, 64, 2) // the canvas size: no resampling
	z, dec := tinyKeyframeLatents(t, first, last)
	const seed = 11
	cases := []struct {
		name        string
		first, last image.Image
		latents     [][]float32
	}{
		{"first", first, nil, z[:1]},
		{"last", nil, last, z[1:]},
		{"both", first, last, z},
	}
	for _, c := range cases {
		res := fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox runs", NumFrames: 5, Height: 64, Width: 96,
			Seed: api.Ptr[int64](seed), Image: c.first, LastImage: c.last})
		cond, shape := res.Latents.Condition, res.Latents.ConditionShape
		if len(shape) != 4 || shape[1] != len(c.latents) || len(cond) != shape[0]*shape[1]*shape[2]*shape[3] {
			t.Fatalf("%s: condition latents of %d values, shape %v", c.name, len(cond), shape)
		}
		noise := familykit.NewGaussianStream(seed, familykit.KeyframeNoise)
		for k, zk := range c.latents {
			nk := make([]float32, len(zk))
			noise.Fill(nk)
			want, err := packing.ScaleNoise(zk, nk, float32(packing.KeyframeNoiseAug))
			if err != nil {
				t.Fatal(err)
			}
			got := conditionFrame(cond, shape, k)
			if !testutil.SameBits(got, want) {
				t.Fatalf("%s: keyframe %d's condition latent changed (max abs diff %g from the encoded keyframe's)", c.name, k+1,
					testutil.MaxAbsDiff(got, want))
			}
			// Measured on the CPU backend: 1 level from the clean latent's decode (the 0.1%
			// noise of the mix). The decoded frame is 255 levels from the keyframe itself: with
			// random weights decode(encode(x)) is no picture of x, so the round trip is checked
			// against its direct computation, not against the image.
			if d := maxLevelDiff(t, decodeFirstFrame(t, dec, got, shape), decodeFirstFrame(t, dec, zk, shape)); d > 1 {
				t.Errorf("%s: keyframe %d decodes %d levels away from decode(encode(keyframe))", c.name, k+1, d)
			}
		}
	}
}
