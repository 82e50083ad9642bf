package wan_test

import (
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/fastvideo/wan"
	"fastvideo/internal/imagefile"
	"fastvideo/internal/testutil"
	wanvae "fastvideo/vae/wan"
)

// testImage is a smooth 4:3 RGB picture with some structure, so a resize or an encoder sees more
// than a flat field.
func testImage(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(255 * x / w), uint8(255 * y / h), uint8(128 + 100*math.Sin(float64(x+y)/5)), 255})
		}
	}
	return img
}

// tinyEncoded is the normalized image latent of tiny-wan2.2's VAE for img at the canvas w x h,
// computed outside the pipeline, and the VAE (with its encoder) to decode with.
func tinyEncoded(t *testing.T, img image.Image, w, h int) ([]float32, *wanvae.Decoder) {
	t.Helper()
	spec := wan.Tiny22Spec()
	tw, err := wan.NewTinyWeights(spec)
	if err != nil {
		t.Fatal(err)
	}
	vae := testutil.Open(t, func() (*wanvae.Decoder, error) {
		return wanvae.FromSource(testutil.Backend(t), spec.VAE, tw.VAE, wanvae.Options{DType: dtypes.Float32, Encoder: true})
	})
	rgb, err := imagefile.ToRGB(img)
	if err != nil {
		t.Fatal(err)
	}
	pixels, err := wan.Preprocess(rgb, w, h)
	if err != nil {
		t.Fatal(err)
	}
	mean, _, shape, err := vae.Encode(context.Background(), pixels, []int{1, 3, 1, h, w})
	if err != nil {
		t.Fatal(err)
	}
	z, err := spec.VAE.NormalizeLatents(mean, shape)
	if err != nil {
		t.Fatal(err)
	}
	return z, vae
}

// TestImageToVideoPinsFirstFrame: with an image, both samplers end with the image's latent in the
// first latent frame bit for bit, the other frames differ from a text-only run, and the plan shows
// the condition. The canvas follows the image (4:3 -> 96x64 at tiny-wan2.2's 64x96 area).
func TestImageToVideoPinsFirstFrame(t *testing.T) {
	g := fvtest.Open(t, wan.Tiny22Name)
	img := testImage(160, 120)
	z, _ := tinyEncoded(t, img, 96, 64)
	for _, preset := range []string{"tiny_wan22_ti2v", "tiny_wan22_dmd"} {
		res := fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox", Preset: preset, Image: img})
		p := res.Plan
		d := p.Details.(*wan.PlanDetails)
		if p.Width != 96 || p.Height != 64 || d.Image == nil || d.Image.ConditionedTokens != 6 || d.Image.ImageWidth != 160 ||
			d.Image.ScaledWidth != 96 || d.Image.ScaledHeight != 72 {
			t.Fatalf("%s: plan %dx%d %+v", preset, p.Width, p.Height, d.Image)
		}
		x, shape := res.Latents.Video, res.Latents.VideoShape
		c, frames, plane := shape[0], shape[1], shape[2]*shape[3]
		for ch := 0; ch < c; ch++ {
			got := x[ch*frames*plane : ch*frames*plane+plane]
			if !testutil.SameBits(got, z[ch*plane:(ch+1)*plane]) {
				t.Fatalf("%s: channel %d of the first latent frame is not the image's latent", preset, ch)
			}
		}
		text := fvtest.LatentsOnly(t, g, fastvideo.Request{Prompt: "a red fox", Preset: preset, Height: 64, Width: 96})
		if testutil.SameBits(text.Latents.Video[plane:frames*plane], x[plane:frames*plane]) {
			t.Errorf("%s: the image does not change the later frames", preset)
		}
	}
}

// TestImageToVideoFirstFrame: the first decoded frame of an image-to-video run is the VAE round
// trip of the image (the causal decoder's first frame sees only the first latent frame).
func TestImageToVideoFirstFrame(t *testing.T) {
	g := fvtest.Open(t, wan.Tiny22Name)
	img := testImage(120, 90)
	z, vae := tinyEncoded(t, img, 96, 64)
	res, err := g.Generate(context.Background(), fastvideo.Request{Prompt: "a cat", Preset: "tiny_wan22_dmd", Image: img,
		SkipSave: true, ReturnFrames: true})
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	if err := vae.Decode(context.Background(), z, []int{1, 48, 1, 4, 6}, func(f wanvae.Frames) error {
		first = f.RGB24(nil)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := res.Frames[0]
	if len(got) != len(first) {
		t.Fatalf("first frame of %d bytes, the round trip has %d", len(got), len(first))
	}
	worst := 0
	for i := range first {
		worst = max(worst, int(math.Abs(float64(first[i])-float64(got[i]))))
	}
	// Measured 0: the same graphs on the same latent frame.
	if worst > 1 {
		t.Errorf("the first frame differs from the image's VAE round trip by up to %d levels", worst)
	}
}

// TestImageRequestErrors: bad images and misuse are RequestErrors from Plan, before anything loads.
func TestImageRequestErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "a.png")
	f, err := os.Create(png)
	if err != nil {
		t.Fatal(err)
	}
	if err := encodePNG(f, testImage(40, 30)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, _ := os.ReadFile(png)
	truncated := filepath.Join(dir, "truncated.png")
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, model string
		req         api.Request
		field, want string
	}{
		{"text file", wan.Tiny22Name, api.Request{ImagePath: text}, "image_path", "not a PNG or JPEG"},
		{"truncated", wan.Tiny22Name, api.Request{ImagePath: truncated}, "image_path", "damaged png"},
		{"missing", wan.Tiny22Name, api.Request{ImagePath: filepath.Join(dir, "none.png")}, "image_path", "no such file"},
		{"both", wan.Tiny22Name, api.Request{ImagePath: png, Image: testImage(8, 8)}, "image_path", "one image per keyframe"},
		{"text-only model", wan.TinyName, api.Request{ImagePath: png}, "image_path", "takes no first-frame image"},
		{"last image", wan.Tiny22Name, api.Request{LastImagePath: png}, "last_image_path", "takes no last-frame image"},
		{"size with image", wan.Tiny22Name, api.Request{ImagePath: png, Height: 64, Width: 96}, "height", "unset with an image"},
		{"too narrow", wan.Tiny22Name, api.Request{Image: testImage(400, 2)}, "image", "too narrow"},
		{"empty image", wan.Tiny22Name, api.Request{Image: image.NewNRGBA(image.Rect(0, 0, 0, 0))}, "image", "empty"},
		{"wan2.1", "wan2.1-t2v-1.3b", api.Request{ImagePath: png}, "image_path", "Wan2.2 TI2V"},
	} {
		_, err := fastvideo.Plan(c.model, c.req)
		var re *api.RequestError
		if !errors.As(err, &re) || re.Field != c.field || !strings.Contains(re.Error(), c.want) {
			t.Errorf("%s: got %v, want a RequestError on %s containing %q", c.name, err, c.field, c.want)
		}
	}
	p, err := fastvideo.Plan("wan2.2-ti2v-5b", api.Request{ImagePath: png})
	if err != nil {
		t.Fatal(err)
	}
	// 4:3 at 480x832's area: best_output_size(40, 30, 32, 32, 399360) = (704, 544).
	if d := p.Details.(*wan.PlanDetails); p.Width != 704 || p.Height != 544 || d.Image == nil || d.Image.Source != png {
		t.Errorf("released TI2V plan: %dx%d %+v", p.Width, p.Height, d.Image)
	}
}

func encodePNG(w io.Writer, img image.Image) error { return png.Encode(w, img) }
