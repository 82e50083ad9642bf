package imageops

import (
	"maps"
	"slices"
	"testing"

	"fastvideo/internal/testutil"
)

// frameResizeCase is one entry of a frame_resize fixture's "cases" (testdata/README.md).
type frameResizeCase struct {
	Input         string  `json:"input"`
	Width         int     `json:"width"`
	Height        int     `json:"height"`
	Interpolation string  `json:"interpolation"`
	Sharpen       float64 `json:"sharpen"`
	Output        string  `json:"output"`
}

// fixtureImage reads an HxWx3 uint8 tensor.
func fixtureImage(t *testing.T, fx *testutil.Fixture, name string) Image {
	t.Helper()
	info := fx.Info(t, name)
	if info.DType != "U8" || len(info.Shape) != 3 || info.Shape[2] != Channels {
		t.Fatalf("%s: %s %v, want U8 HxWx3", name, info.DType, info.Shape)
	}
	return Image{Width: info.Shape[1], Height: info.Shape[0], Pix: info.Data}
}

// TestFrameResizeParity runs every frame_resize fixture: cv2.resize (then the unsharp pass when
// sharpen > 0) against Resize and Unsharp. Nearest must be exact; every other kernel and the
// unsharp pass within 1 LSB on every pixel (OpenCV's vector paths may order and round a few sums
// differently; today only a few cubic values differ).
func TestFrameResizeParity(t *testing.T) {
	testutil.ForEachFixture(t, "frame_resize", func(t *testing.T, fx *testutil.Fixture) {
		var cases map[string]frameResizeCase
		if err := fx.DecodeConfig(&cases, "cases"); err != nil {
			t.Fatal(err)
		}
		if len(cases) == 0 {
			t.Fatal("fixture has no cases")
		}
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			c := cases[name]
			t.Run(name, func(t *testing.T) {
				got := runCase(t, fixtureImage(t, fx, c.Input), c)
				want := fixtureImage(t, fx, c.Output)
				tol := 1
				if c.Interpolation == "nearest" && c.Sharpen == 0 {
					tol = 0
				}
				checkPixels(t, got, want, tol)
			})
		}
	})
}

// runCase applies one fixture case: the resize unless "none", then the unsharp pass.
func runCase(t *testing.T, in Image, c frameResizeCase) Image {
	t.Helper()
	out := in
	if c.Interpolation != "none" {
		mode, err := ParseInterpolation(c.Interpolation)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = Resize(in, c.Width, c.Height, mode); err != nil {
			t.Fatal(err)
		}
	}
	out, err := Unsharp(out, c.Sharpen)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPixels fails unless every byte is within tol of the reference, logging the largest
// difference and how many bytes differ.
func checkPixels(t *testing.T, got, want Image, tol int) {
	t.Helper()
	if got.Width != want.Width || got.Height != want.Height {
		t.Fatalf("got %dx%d, want %dx%d", got.Width, got.Height, want.Width, want.Height)
	}
	maxDiff, differ, first := 0, 0, -1
	for i := range want.Pix {
		d := int(got.Pix[i]) - int(want.Pix[i])
		if d != 0 {
			differ++
			if first < 0 {
				first = i
			}
		}
		maxDiff = max(maxDiff, d, -d)
	}
	t.Logf("%dx%d: max |diff| %d LSB, %d of %d values differ", want.Width, want.Height, maxDiff, differ, len(want.Pix))
	if maxDiff > tol {
		p := first / Channels
		t.Errorf("max |diff| %d > %d LSB (first at x=%d y=%d c=%d: got %d, want %d)", maxDiff, tol,
			p%want.Width, p/want.Width, first%Channels, got.Pix[first], want.Pix[first])
	}
}

func TestGaussianKernelSigma1(t *testing.T) {
	k, err := GaussianKernelQ8(1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 14, 62, 102, 62, 14, 1}; !slices.Equal(k, want) {
		t.Errorf("kernel %v, want %v", k, want)
	}
}
