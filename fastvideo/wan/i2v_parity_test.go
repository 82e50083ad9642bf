package wan

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"testing"

	"fastvideo/internal/imagefile"
	"fastvideo/internal/imageops"
	"fastvideo/internal/testutil"
)

// i2vFixture is wan_i2v's JSON (testdata/gen_i2v.py, FastVideo's own functions).
type i2vFixture struct {
	BestOutputSize [][7]*int `json:"best_output_size"`
	Preprocess     map[string]struct {
		Input, Window, Row0 string
		Width, Height       int
		SHA256              string `json:"sha256_f32"`
		WindowOrigin        [2]int `json:"window_origin"`
	} `json:"preprocess"`
	LoadImage map[string]struct {
		File, Output string
		Exact        bool
	} `json:"load_image"`
	Mask struct {
		LatentShape [4]int `json:"latent_shape"`
		Timesteps   []int  `json:"timesteps"`
	} `json:"mask"`
}

// TestI2VParity pins the image path to upstream's: best_output_size, the whole TI2V preprocessing
// (PIL decode, Lanczos, crop, [-1, 1]) bit for bit, load_image's conversions, and the denoising
// stage's bfloat16 blend and per-token timesteps.
func TestI2VParity(t *testing.T) {
	if paths, err := testutil.FixturePaths("testdata", "wan_i2v"); err != nil || len(paths) == 0 {
		t.Skip("testdata/wan_i2v.safetensors is absent: generate it with testdata/gen_i2v.py on the GPU machine")
	}
	testutil.ForEachFixture(t, "wan_i2v", func(t *testing.T, fx *testutil.Fixture) {
		var c i2vFixture
		if err := fx.DecodeConfig(&c); err != nil {
			t.Fatal(err)
		}
		checkBestOutputSize(t, c)
		checkPreprocess(t, fx, c)
		checkLoadImage(t, fx, c)
		checkMask(t, fx, c)
	})
}

func checkBestOutputSize(t *testing.T, c i2vFixture) {
	if len(c.BestOutputSize) == 0 {
		t.Fatal("no best_output_size cases")
	}
	for _, r := range c.BestOutputSize {
		ow, oh, ok := BestOutputSize(*r[0], *r[1], *r[2], *r[3], *r[4])
		switch {
		case r[5] == nil && ok:
			t.Errorf("best_output_size%v: got %dx%d, upstream fails", r[:5], ow, oh)
		case r[5] != nil && (!ok || ow != *r[5] || oh != *r[6]):
			t.Errorf("best_output_size(%d, %d, area %d) = %d, %d (%v), want %d, %d", *r[0], *r[1], *r[4], ow, oh, ok, *r[5], *r[6])
		}
	}
}

func u8Image(t *testing.T, fx *testutil.Fixture, name string) imageops.Image {
	info := fx.Info(t, name)
	if info.DType != "U8" || len(info.Shape) != 3 || info.Shape[2] != 3 {
		t.Fatalf("%s: %s %v, want U8 HxWx3", name, info.DType, info.Shape)
	}
	return imageops.Image{Width: info.Shape[1], Height: info.Shape[0], Pix: info.Data}
}

func checkPreprocess(t *testing.T, fx *testutil.Fixture, c i2vFixture) {
	for name, p := range c.Preprocess {
		img := u8Image(t, fx, p.Input)
		ow, oh, ok := BestOutputSize(img.Width, img.Height, 32, 32, releasedImageArea)
		if !ok || ow != p.Width || oh != p.Height {
			t.Errorf("%s: canvas %dx%d, want %dx%d", name, ow, oh, p.Width, p.Height)
			continue
		}
		got, err := Preprocess(img, ow, oh)
		if err != nil {
			t.Fatal(err)
		}
		win, _ := fx.F32(t, p.Window)
		y0, x0, plane := p.WindowOrigin[0], p.WindowOrigin[1], ow*oh
		for i, want := range win {
			c, y, x := i/256, i/16%16, i%16
			if v := got[c*plane+(y0+y)*ow+x0+x]; v != want {
				t.Fatalf("%s: channel %d pixel (%d, %d) = %v, want %v", name, c, y0+y, x0+x, v, want)
			}
		}
		row, _ := fx.F32(t, p.Row0)
		for i, want := range row {
			if v := got[i/ow*plane+i%ow]; v != want {
				t.Fatalf("%s: row 0, channel %d, x %d = %v, want %v", name, i/ow, i%ow, v, want)
			}
		}
		b := make([]byte, 4*len(got))
		for i, v := range got {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != p.SHA256 {
			t.Errorf("%s: the %dx%d tensor differs from upstream's (its window and first row match)", name, ow, oh)
		}
	}
}

// checkLoadImage: PNG modes and EXIF orientations exactly as load_image; a JPEG to the bound its
// one remaining difference leaves: image/jpeg's inverse DCT rounds a sample one level off
// libjpeg-turbo's jidctint.c now and then (chroma upsampling and color conversion are libjpeg's,
// see internal/imagefile/ycbcr.go). Measured on this fixture: max 2, mean 0.037 levels.
func checkLoadImage(t *testing.T, fx *testutil.Fixture, c i2vFixture) {
	for name, l := range c.LoadImage {
		got, err := imagefile.Decode(fx.Info(t, l.File).Data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := u8Image(t, fx, l.Output)
		if got.Width != want.Width || got.Height != want.Height {
			t.Fatalf("%s: %dx%d, want %dx%d", name, got.Width, got.Height, want.Width, want.Height)
		}
		worst, sum := 0, 0
		for i := range want.Pix {
			d := int(math.Abs(float64(got.Pix[i]) - float64(want.Pix[i])))
			worst, sum = max(worst, d), sum+d
		}
		mean := float64(sum) / float64(len(want.Pix))
		if (l.Exact && worst != 0) || worst > 2 || mean > 0.04 {
			t.Errorf("%s: max abs %d, mean %.2f levels from PIL (exact: %v)", name, worst, mean, l.Exact)
		}
	}
}

func checkMask(t *testing.T, fx *testutil.Fixture, c i2vFixture) {
	s := c.Mask.LatentShape
	x, _ := fx.F32(t, "in.mask.latents")
	z, _ := fx.F32(t, "in.mask.z")
	want, _ := fx.F32(t, "out.mask.blended")
	roundBF16(x)
	pinFirstFrame(x, z, s[0], s[1])
	testutil.AssertBitExact(t, "blended latents", x, want)
	tokens, first := s[1]*s[2]/2*s[3]/2, s[2]/2*s[3]/2
	for _, ts := range c.Mask.Timesteps {
		wantTs, _ := fx.F32(t, "out.mask.timesteps_"+strconv.Itoa(ts))
		got := tokenTimesteps(bf16(float32(ts)), first, tokens)
		testutil.AssertBitExact(t, "per-token timesteps at "+strconv.Itoa(ts), got, wantTs)
	}
}
