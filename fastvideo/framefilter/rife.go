package framefilter

import (
	"context"
	"fmt"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/rife"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// RIFEBatch bounds the frame pairs one interpolator call takes on an accelerator: enough to fill a
// GPU at 832x480, few enough that the activations (about 0.1 GB a pair in f32 at that size) stay
// small. The pure-Go backend gains nothing from batching and takes one pair a call.
const RIFEBatch = 8

// RIFEBatches splits n pairs into calls of at most max pairs, each call's size a power of two (the
// last padded up by repeating its last pair): every size is one compiled executable, so a stream
// of clips with varying counts compiles at most log2(max)+1 of them. sizes are the calls' sizes,
// used how many of each call's pairs are real.
func RIFEBatches(n, max int) (sizes, used []int) {
	for n > 0 {
		k := min(n, max)
		size := 1
		for size < k {
			size *= 2
		}
		sizes, used = append(sizes, size), append(used, k)
		n -= k
	}
	return sizes, used
}

// BuiltinInterpolator is a model that carries its own interpolator weights (the tiny models' small
// random RIFE), used when the generator is given none.
type BuiltinInterpolator interface {
	InterpolatorWeights() weights.Source
}

// TinyRIFE is the tiny models' RIFE: rife.Tiny() widths, seeded random weights in memory.
func TinyRIFE(seed int64) (weights.Source, error) { return syntheticRIFE(rife.Tiny(), seed) }

// ReleaseRIFE is a random-weight RIFE at the released 4.25 size (widths 192/128/96/64/32, a few
// million values made on the host), for models run with random weights: the interpolation work
// is the real one's.
func ReleaseRIFE(seed int64) (weights.Source, error) { return syntheticRIFE(rife.Release(), seed) }

func syntheticRIFE(cfg rife.Config, seed int64) (weights.Source, error) {
	shapes, err := rife.Params(cfg, rife.PyTorch)
	if err != nil {
		return nil, err
	}
	return weights.NewSynthetic(seed, shapes.Map(), nil), nil
}

// RIFEFolder checks a RIFE 4.25 checkpoint (mlx-community/RIFE-4.25's model.safetensors, or
// Practical-RIFE's flownet converted to safetensors: a file, or a folder of them) from its headers
// and returns its opener. A bad path or checkpoint is a *family.RequestError for field.
func RIFEFolder(field, path string) (familykit.WeightOpener, error) {
	ck, err := safetensors.OpenCheckpoint(path)
	if err != nil {
		return nil, &api.RequestError{Field: field, Value: path, Allowed: fmt.Sprintf(
			"a RIFE 4.25 checkpoint: mlx-community/RIFE-4.25 (model.safetensors) or Practical-RIFE's flownet.pkl saved as safetensors (%v)", err)}
	}
	defer ck.Close()
	if err := rife.Check(ck); err != nil {
		return nil, &api.RequestError{Field: field, Value: path, Allowed: err.Error()}
	}
	return func() (weights.Source, func() error, error) {
		ck, err := safetensors.OpenCheckpoint(path)
		if err != nil {
			return nil, nil, err
		}
		return ck, ck.Close, nil
	}, nil
}

// LoadRIFE loads the interpolator from open on e's backend, in e's compute dtype.
func LoadRIFE(e *family.Engine, open familykit.WeightOpener) (Interpolator, error) {
	src, closeSrc, err := open()
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	m, err := rife.Load(e.Backend, src, e.DType)
	if err != nil {
		return nil, err
	}
	batch := 1
	if e.Accelerated {
		batch = RIFEBatch
	}
	return &rifeInterpolator{m: m, batch: batch}, nil
}

// RIFESize sizes the interpolator RIFE weights open would load, for the memory policy: small (tens
// of MB), but costly to bring back, since its programs compile for every batch size of a stream.
func RIFESize(e *family.Engine, open familykit.WeightOpener) (api.ComponentSize, error) {
	src, closeSrc, err := open()
	if err != nil {
		return api.ComponentSize{}, err
	}
	defer closeSrc()
	cfg, layout, err := rife.Detect(src)
	if err != nil {
		return api.ComponentSize{}, err
	}
	return api.ComponentSize{Name: family.CompRIFE, Bytes: familykit.ParamBytes(rife.Params(cfg, layout))(int64(e.DType.Size()))}, nil
}

// rifeInterpolator runs the pairs in RIFEBatches of at most batch on the device.
type rifeInterpolator struct {
	m     *rife.Model
	batch int
}

func (r *rifeInterpolator) Interpolate(ctx context.Context, a, b family.Frames, t []float64) (family.Frames, error) {
	w, h := a.Width, a.Height
	if b.Width != w || b.Height != h || a.Count != len(t) || b.Count != len(t) {
		return family.Frames{}, fmt.Errorf("rife: %d and %d frames (%dx%d, %dx%d) for %d fractions", a.Count, b.Count, w, h, b.Width, b.Height, len(t))
	}
	out := family.Frames{Width: w, Height: h, Count: len(t), RGB: make([]byte, 0, len(t)*w*h*3)}
	n := w * h * 3
	sizes, used := RIFEBatches(len(t), r.batch)
	i := 0
	for c, size := range sizes {
		if err := ctx.Err(); err != nil {
			return family.Frames{}, err
		}
		k := used[c]
		pa, pb, pt := a.RGB[i*n:(i+k)*n], b.RGB[i*n:(i+k)*n], t[i:i+k]
		for range size - k { // padding: the last real pair again, its result dropped
			pa, pb, pt = append(pa[:len(pa):len(pa)], pa[len(pa)-n:]...), append(pb[:len(pb):len(pb)], pb[len(pb)-n:]...), append(pt[:len(pt):len(pt)], pt[len(pt)-1])
		}
		mid, err := r.m.Interpolate(pa, pb, size, h, w, pt)
		if err != nil {
			return family.Frames{}, err
		}
		out.RGB = append(out.RGB, mid[:k*n]...)
		i += k
	}
	return out, nil
}

func (r *rifeInterpolator) Close() error { return r.m.Close() }
