package imagefile

import (
	"maps"
	"slices"
	"testing"

	"fastvideo/internal/testutil"
)

// jpegCase is one file of jpeg_pil's JSON (testdata/gen_jpeg.py).
type jpegCase struct {
	File, Output, Encoding, Sampling string
	Exact                            bool
}

// TestPILJPEG decodes JPEG files of every subsampling (odd sizes, progressive, grayscale, Adobe
// RGB) and compares with what FastVideo's load_image (PIL, libjpeg-turbo) made of them. Files of
// constant 8x8 blocks, which both inverse DCTs reconstruct exactly, must match bit for bit; the
// others differ only where image/jpeg's inverse DCT rounds a sample one level off jidctint.c's,
// which color conversion turns into at most 3 levels (B = Y + 1.772·Cb).
func TestPILJPEG(t *testing.T) {
	testutil.ForEachPendingFixture(t, "jpeg_pil", "testdata/gen_jpeg.py", func(t *testing.T, fx *testutil.Fixture) {
		var c struct {
			Cases   map[string]jpegCase
			Skipped []string
		}
		if err := fx.DecodeConfig(&c); err != nil || len(c.Cases) == 0 {
			t.Fatalf("no cases in the fixture's JSON (%v)", err)
		}
		if len(c.Skipped) > 0 {
			t.Logf("the generator left out the encodings %v", c.Skipped)
		}
		worst, sum, samples := 0, 0, 0
		for _, name := range slices.Sorted(maps.Keys(c.Cases)) {
			jc := c.Cases[name]
			caseWorst, caseSum := compareJPEG(t, fx, name, jc)
			if jc.Exact && caseWorst != 0 || caseWorst > 3 {
				t.Errorf("%s (%s, sampling %s): max abs %d levels from PIL (exact: %v)", name, jc.Encoding, jc.Sampling, caseWorst, jc.Exact)
			}
			if !jc.Exact {
				worst, sum, samples = max(worst, caseWorst), sum+caseSum, samples+len(fx.Info(t, jc.Output).Data)
			}
		}
		mean := float64(sum) / float64(max(samples, 1))
		t.Logf("files with texture: max abs %d, mean %.4f levels from PIL", worst, mean)
		if mean > 0.05 {
			t.Errorf("files with texture: mean %.4f levels from PIL, over 0.05", mean)
		}
	})
}

// compareJPEG decodes one case and returns its largest and summed absolute differences.
func compareJPEG(t *testing.T, fx *testutil.Fixture, name string, jc jpegCase) (worst, sum int) {
	got, err := Decode(fx.Info(t, jc.File).Data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	want := fx.Info(t, jc.Output)
	if len(want.Shape) != 3 || got.Height != want.Shape[0] || got.Width != want.Shape[1] || len(got.Pix) != len(want.Data) {
		t.Fatalf("%s: %dx%d, want %v", name, got.Width, got.Height, want.Shape)
	}
	for i, w := range want.Data {
		d := int(got.Pix[i]) - int(w)
		d = max(d, -d)
		worst, sum = max(worst, d), sum+d
	}
	return worst, sum
}
