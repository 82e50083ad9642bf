package family

import (
	"context"
	"fmt"

	"fastvideo/internal/rife"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// RIFEBatch bounds the frame pairs one interpolator call takes: enough to fill a GPU at 832x480,
// few enough that the activations (about 0.1 GB a pair in f32 at that size) stay small.
const RIFEBatch = 8

// BuiltinInterpolator is a model that carries its own interpolator weights (the tiny models' small
// random RIFE), used when the generator is given none.
type BuiltinInterpolator interface {
	InterpolatorWeights() weights.Source
}

// TinyRIFE is the tiny models' RIFE: rife.Tiny() widths, seeded random weights in memory.
func TinyRIFE(seed int64) (weights.Source, error) {
	shapes, err := rife.Params(rife.Tiny(), rife.PyTorch)
	if err != nil {
		return nil, err
	}
	return weights.NewSynthetic(seed, shapes.Map(), nil), nil
}

// RIFEFolder checks a RIFE 4.25 checkpoint (mlx-community/RIFE-4.25's model.safetensors, or
// Practical-RIFE's flownet converted to safetensors: a file, or a folder of them) from its headers
// and returns its opener. A bad path or checkpoint is a *RequestError for field.
func RIFEFolder(field, path string) (WeightOpener, error) {
	ck, err := safetensors.OpenCheckpoint(path)
	if err != nil {
		return nil, &RequestError{Field: field, Value: path, Allowed: fmt.Sprintf(
			"a RIFE 4.25 checkpoint: mlx-community/RIFE-4.25 (model.safetensors) or Practical-RIFE's flownet.pkl saved as safetensors (%v)", err)}
	}
	defer ck.Close()
	if _, _, err := rife.Detect(ck); err != nil {
		return nil, &RequestError{Field: field, Value: path, Allowed: err.Error()}
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
func LoadRIFE(e *Engine, open WeightOpener) (Interpolator, error) {
	src, closeSrc, err := open()
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	m, err := rife.Load(e.Backend, src, e.DType)
	if err != nil {
		return nil, err
	}
	return &rifeInterpolator{m: m}, nil
}

// rifeInterpolator runs the pairs in batches of RIFEBatch on the device.
type rifeInterpolator struct{ m *rife.Model }

func (r *rifeInterpolator) Interpolate(ctx context.Context, a, b Frames, t []float64) (Frames, error) {
	w, h := a.Width, a.Height
	if b.Width != w || b.Height != h || a.Count != len(t) || b.Count != len(t) {
		return Frames{}, fmt.Errorf("rife: %d and %d frames (%dx%d, %dx%d) for %d fractions", a.Count, b.Count, w, h, b.Width, b.Height, len(t))
	}
	out := Frames{Width: w, Height: h, Count: len(t), RGB: make([]byte, 0, len(t)*w*h*3)}
	n := w * h * 3
	for i := 0; i < len(t); i += RIFEBatch {
		if err := ctx.Err(); err != nil {
			return Frames{}, err
		}
		k := min(RIFEBatch, len(t)-i)
		mid, err := r.m.Interpolate(a.RGB[i*n:(i+k)*n], b.RGB[i*n:(i+k)*n], k, h, w, t[i:i+k])
		if err != nil {
			return Frames{}, err
		}
		out.RGB = append(out.RGB, mid...)
	}
	return out, nil
}

func (r *rifeInterpolator) Close() error { return r.m.Close() }
