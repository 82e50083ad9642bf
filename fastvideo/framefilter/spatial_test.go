package framefilter

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/imageops"
)

// TestFastPixelKnobs: upstream's defaults (lanczos; sharpen 0.4 spatial, 0.6 temporal, 0.6 both),
// an explicit strength (0 included) wins, and knobs without their mode are request errors.
func TestFastPixelKnobs(t *testing.T) {
	zero, half := 0.0, 0.5
	for _, c := range []struct {
		req     api.Request
		mode    imageops.Interpolation
		sharpen float64
		field   string
	}{
		{req: api.Request{}},
		{req: api.Request{FastSpatial: true}, sharpen: SpatialSharpen},
		{req: api.Request{Fast: true}, sharpen: TemporalSharpen},
		{req: api.Request{Fast: true, FastSpatial: true}, sharpen: TemporalSharpen},
		{req: api.Request{FastSpatial: true, Upsample: "nearest", Sharpen: &zero}, mode: imageops.Nearest},
		{req: api.Request{Fast: true, FastSpatial: true, Sharpen: &half}, sharpen: 0.5},
		{req: api.Request{FastSpatial: true, Upsample: "Lanczos"}, field: "upsample"},
		{req: api.Request{Fast: true, Upsample: "cubic"}, field: "upsample"},
		{req: api.Request{Sharpen: &half}, field: "sharpen"},
	} {
		k, err := ResolveFastPixelKnobs(c.req)
		var re *api.RequestError
		switch {
		case c.field != "" && (!errors.As(err, &re) || re.Field != c.field):
			t.Errorf("%+v: error %v, want one naming %s", c.req, err, c.field)
		case c.field == "" && (err != nil || k.Upsample != c.mode || k.Sharpen != c.sharpen):
			t.Errorf("%+v: %+v, %v; want %s, sharpen %g", c.req, k, err, c.mode, c.sharpen)
		}
	}
}

// randomClip is n random frames of w x h.
func randomClip(n, w, h int) family.Frames {
	rng := rand.New(rand.NewPCG(3, 4))
	f := family.Frames{Width: w, Height: h, Count: n, RGB: make([]byte, n*w*h*3)}
	for i := range f.RGB {
		f.RGB[i] = byte(rng.IntN(256))
	}
	return f
}

// TestPixelFilter: the steps run in order on every frame, frames spread over goroutines give the
// frames one goroutine gives, and a clip of the wrong length is an error.
func TestPixelFilter(t *testing.T) {
	steps := PixelSteps{CropWidth: 40, CropHeight: 30, Width: 80, Height: 60, Interpolation: imageops.Lanczos, Sharpen: 0.4}
	in := randomClip(5, 48, 32)
	var outs []family.Frames
	for _, workers := range []int{1, 3} {
		f, err := NewPixelFilter(steps, workers)
		if err != nil {
			t.Fatal(err)
		}
		out, err := f.Filter(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	if outs[0].Width != 80 || outs[0].Height != 60 || outs[0].Count != 5 || !bytes.Equal(outs[0].RGB, outs[1].RGB) {
		t.Fatalf("%dx%d x %d frames; parallel equal: %v", outs[0].Width, outs[0].Height, outs[0].Count, bytes.Equal(outs[0].RGB, outs[1].RGB))
	}
	crop, _ := imageops.CenterCrop(imageops.Image{Width: 48, Height: 32, Pix: in.Frame(4)}, 40, 30)
	up, _ := imageops.Resize(crop, 80, 60, imageops.Lanczos)
	want, _ := imageops.Unsharp(up, 0.4)
	if !bytes.Equal(outs[0].Frame(4), want.Pix) {
		t.Error("frame 4 is not crop, resize, unsharp in that order")
	}
	f, _ := NewPixelFilter(steps, 0)
	if _, err := f.Filter(context.Background(), family.Frames{Width: 48, Height: 32, Count: 2, RGB: in.RGB[:100]}); err == nil {
		t.Error("a short clip was accepted")
	}
	if _, err := NewPixelFilter(PixelSteps{Width: 80}, 1); err == nil {
		t.Error("a resize to a width alone was accepted")
	}
}

// BenchmarkPixelFilter is the spatial fast mode's filter on a 24-frame clip at FastH3's default
// size (416x240 stage 1 to 832x480, lanczos, sharpen 0.4), on one goroutine and on every core.
func BenchmarkPixelFilter(b *testing.B) {
	clip := randomClip(24, 416, 240)
	for _, c := range []struct {
		name    string
		workers int
	}{{"1-worker", 1}, {"all-cores", 0}} {
		b.Run(c.name, func(b *testing.B) {
			f, err := NewPixelFilter(PixelSteps{Width: 832, Height: 480, Interpolation: imageops.Lanczos, Sharpen: SpatialSharpen}, c.workers)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := f.Filter(context.Background(), clip); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*clip.Count)/1e6, "ms/frame")
		})
	}
}
