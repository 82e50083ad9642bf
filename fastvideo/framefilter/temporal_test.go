package framefilter

import (
	"context"
	"math"
	"testing"

	"fastvideo/fastvideo/family"
	"fastvideo/internal/hostmath"
)

// linear is a stand-in interpolator: each byte is a*(1-t) + b*t, rounded.
type linear struct{ calls int }

func (l *linear) Interpolate(_ context.Context, a, b family.Frames, t []float64) (family.Frames, error) {
	l.calls++
	out := family.Frames{Width: a.Width, Height: a.Height, Count: a.Count, RGB: make([]byte, len(a.RGB))}
	n := a.Width * a.Height * 3
	for i := range out.RGB {
		f := t[i/n]
		out.RGB[i] = byte(math.Round(float64(a.RGB[i])*(1-f) + float64(b.RGB[i])*f))
	}
	return out, nil
}

func (l *linear) Close() error { return nil }

// TestPositionSourcesAsMLX: the MLX FastH3 runtime's temporal mode, sources 0,100,200 to 6 frames
// with a linear stand-in: 0,40,80,120,160,200; first and last frames are copies.
func TestPositionSourcesAsMLX(t *testing.T) {
	src := []float64{0, 100, 200}
	want := []float64{0, 40, 80, 120, 160, 200}
	ss := PositionSources(hostmath.Linspace(0, 2, 6), 3)
	for j, s := range ss {
		v := src[s.Left]
		if s.Frac > 0 {
			v = src[s.Left]*(1-s.Frac) + src[s.Left+1]*s.Frac
		}
		if math.Abs(v-want[j]) > 1e-9 {
			t.Errorf("frame %d = %v, want %v", j, v, want[j])
		}
	}
	if ss[0].Frac != 0 || ss[5] != (FrameSource{Left: 2}) {
		t.Errorf("first/last = %+v, %+v: want copies", ss[0], ss[5])
	}
	// H3's 124 <- 73: every output lands on a copy or a pair, positions never go back.
	ss = PositionSources(hostmath.Linspace(0, 72, 124), 73)
	if _, err := NewTemporalFilter(ss, 73); err != nil {
		t.Fatal(err)
	}
}

func TestFactorSourcesAsWanMLX(t *testing.T) {
	// rife_interp.interpolate with factor 2 on 41 frames gives 81: keyframes at even outputs.
	ss, err := FactorSources(41, 81, 2)
	if err != nil || len(ss) != 81 || ss[80] != (FrameSource{Left: 40}) || ss[1] != (FrameSource{Left: 0, Frac: 0.5}) {
		t.Fatalf("FactorSources(41, 81, 2) = %v..., %v", ss[:2], err)
	}
	// 61 <- 33 at factor 2: 65 frames made, the first 61 kept.
	if ss, err = FactorSources(33, 61, 2); err != nil || ss[60] != (FrameSource{Left: 30}) {
		t.Fatalf("FactorSources(33, 61, 2): %v", err)
	}
	if _, err := FactorSources(3, 6, 2); err == nil {
		t.Error("3 frames at factor 2 cannot make 6")
	}
	// aligned_keyframe_count(target, factor, 4): 81 -> 41, 61 -> 33, 9 -> 5, 10 at factor 3 -> 5.
	for _, c := range [][4]int{{81, 2, 4, 41}, {61, 2, 4, 33}, {9, 2, 4, 5}, {10, 3, 4, 5}, {121, 4, 4, 33}, {2, 2, 4, 5}} {
		if got := AlignedKeyframeCount(c[0], c[1], c[2]); got != c[3] {
			t.Errorf("AlignedKeyframeCount(%d, %d, %d) = %d, want %d", c[0], c[1], c[2], got, c[3])
		}
	}
}

// TestTemporalFilterStreams feeds the source in uneven clips and checks every output frame against
// the schedule with the stand-in, and that a short stream fails at Flush.
func TestTemporalFilterStreams(t *testing.T) {
	const w, h, source, target = 2, 1, 7, 16
	ss := PositionSources(hostmath.Linspace(0, source-1, target), source)
	f, err := NewTemporalFilter(ss, source)
	if err != nil {
		t.Fatal(err)
	}
	interp := &linear{}
	f.UseInterpolator(func() (Interpolator, error) { return interp, nil })
	frame := func(i int) []byte { return []byte{byte(30 * i), byte(30*i + 1), 0, byte(255 - 30*i), 7, 9} }
	var got []byte
	for _, clip := range [][2]int{{0, 1}, {1, 4}, {4, 7}} {
		var in family.Frames
		in.Width, in.Height, in.Count = w, h, clip[1]-clip[0]
		for i := clip[0]; i < clip[1]; i++ {
			in.RGB = append(in.RGB, frame(i)...)
		}
		out, err := f.Filter(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.RGB...)
	}
	if _, err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != target*w*h*3 {
		t.Fatalf("%d bytes, want %d frames", len(got), target)
	}
	for j, s := range ss {
		want := frame(s.Left)
		if s.Frac > 0 {
			b := frame(s.Left + 1)
			want = append([]byte(nil), want...)
			for i := range want {
				want[i] = byte(math.Round(float64(want[i])*(1-s.Frac) + float64(b[i])*s.Frac))
			}
		}
		if string(got[j*6:(j+1)*6]) != string(want) {
			t.Errorf("output %d = %v, want %v (%+v)", j, got[j*6:(j+1)*6], want, s)
		}
	}
	short, _ := NewTemporalFilter(ss, source)
	short.UseInterpolator(func() (Interpolator, error) { return interp, nil })
	if _, err := short.Filter(context.Background(), family.Frames{Width: w, Height: h, Count: 1, RGB: frame(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := short.Flush(context.Background()); err == nil {
		t.Error("a stream that ends early must fail at Flush")
	}
}
