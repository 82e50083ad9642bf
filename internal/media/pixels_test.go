package media

import (
	"math"
	"reflect"
	"testing"
)

func TestQuantize(t *testing.T) {
	cases := []struct {
		in   float32
		want uint8
	}{
		{0, 0}, {1, 255}, {0.5, 127}, // 127.5 truncates (rounding would give 128)
		{math.Nextafter32(1, 0), 254}, {-0.25, 0}, {1.5, 255},
		{float32(math.Inf(1)), 255}, {float32(math.Inf(-1)), 0}, {float32(math.NaN()), 0},
	}
	for _, c := range cases {
		if got := Quantize(c.in); got != c.want {
			t.Errorf("Quantize(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestAppendRGB24(t *testing.T) {
	// Two pixels, planar R R G G B B -> interleaved R G B R G B after the existing prefix.
	got := AppendRGB24([]byte{9}, []float32{0, 1, 0.5, 0.25, 1, 0}, 2)
	if want := []byte{9, 0, 127, 255, 255, 63, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("AppendRGB24 = %v, want %v", got, want)
	}
	// A short planes slice leaves the missing channels 0 instead of panicking.
	got = AppendRGB24(nil, []float32{1, 1}, 2)
	if want := []byte{255, 0, 0, 255, 0, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("AppendRGB24 (short) = %v, want %v", got, want)
	}
}

func TestPlaceFrames(t *testing.T) {
	// Two channels, a 3-frame video of 2-pixel planes; place frames [1, 3).
	dst := make([]float32, 2*3*2)
	src := []float32{1, 2, 3, 4, 5, 6, 7, 8} // [2][2][2]
	if err := PlaceFrames(dst, 3, src, 1, 2, 2); err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 0, 1, 2, 3, 4, 0, 0, 5, 6, 7, 8}; !reflect.DeepEqual(dst, want) {
		t.Errorf("PlaceFrames = %v, want %v", dst, want)
	}
	if err := PlaceFrames(dst, 3, src, 2, 2, 2); err == nil {
		t.Error("PlaceFrames past the last frame succeeded; want an error")
	}
	if err := PlaceFrames(dst, 3, src[:7], 0, 2, 2); err == nil {
		t.Error("PlaceFrames with a ragged source succeeded; want an error")
	}
}
