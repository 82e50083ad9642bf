package quant

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Weight is a linear weight [Out, In] in a model's parameter table: dense, or
// affine-quantized when the checkpoint quantizes it. A model holds a *Weight
// where it held a dense *weights.Param, passes Tensors() to its executable and
// rebuilds the GraphWeight from the same number of graph inputs with Graph.
type Weight struct {
	// Name is the full name the model binds, e.g. "layers.0.attn.q.weight".
	Name    string
	Out, In int
	// Scheme is zero for a dense weight.
	Scheme Scheme
	// W is the dense weight (compute dtype), the packed words (Uint32) or,
	// for FP8, the e4m3fn codes (Uint8); Scales and Biases (compute dtype) are
	// nil for a dense weight; an FP8 weight has float32 Scales [Out] and no
	// Biases.
	W, Scales, Biases *weights.Param
	// FP8 is set by ToFP8.
	FP8 bool
}

// SchemeSource is implemented by sources that know which weights are quantized
// (a *Checkpoint).
type SchemeSource interface {
	Scheme(key string) (Scheme, bool)
}

// SchemeOf returns the quantization of the weight under released name key in
// src, or nil when src is dense or does not quantize it.
func SchemeOf(src weights.Source, key string) *Scheme {
	if ss, ok := src.(SchemeSource); ok {
		if s, ok := ss.Scheme(key); ok {
			return &s
		}
	}
	return nil
}

// Declare declares the weight name [out, in] in set (name is relative to the
// set's prefix, like weights.Set.Add): dense when scheme is nil, else the
// packed words Uint32 [out, in·bits/32] under name and the scales and biases
// [out, in/group] under name+".scales" and name+".biases", bound in the
// compute dtype. It fails with ErrBits or ErrGroupSize for a scheme that
// cannot hold the matrix.
func Declare(set *weights.Set, name string, out, in int, scheme *Scheme) (*Weight, error) {
	if scheme == nil {
		p := set.Add(name, out, in)
		return &Weight{Name: p.Name, Out: out, In: in, W: p}, nil
	}
	if err := scheme.check(out, in); err != nil {
		return nil, fmt.Errorf("quant: declaring %s: %w", name, err)
	}
	w := &Weight{Out: out, In: in, Scheme: *scheme}
	w.W = set.AddTyped(name, dtypes.Uint32, out, scheme.WordsPerRow(in))
	w.Scales = set.Add(name+ScalesSuffix, out, scheme.GroupsPerRow(in))
	w.Biases = set.Add(name+BiasesSuffix, out, scheme.GroupsPerRow(in))
	w.Name = w.W.Name
	return w, nil
}

// Quantized reports whether the weight is affine-quantized.
func (w *Weight) Quantized() bool { return w.Scales != nil && !w.FP8 }

// Dequantized returns a weights.Source over the same released names in which
// every quantized key is a dense float32 [out, in] tensor dequantized on the
// host (scale·q + bias), and the scales and biases are gone. A dense model
// binds it unchanged; it costs the dense weights' memory, so it serves tests
// and as a reference for the in-graph paths.
func (c *Checkpoint) Dequantized() weights.Source { return &dequantSource{c} }

type dequantSource struct{ c *Checkpoint }

func (d *dequantSource) Names() []string {
	var out []string
	for _, n := range d.c.names {
		if base, ok := auxBase(n); ok {
			if _, q := d.c.schemes[base]; q {
				continue
			}
		}
		out = append(out, n)
	}
	return out
}

func (d *dequantSource) Tensor(name string) (safetensors.Info, bool) {
	if base, ok := auxBase(name); ok {
		if _, q := d.c.schemes[base]; q {
			return safetensors.Info{}, false
		}
	}
	if _, q := d.c.schemes[name]; !q {
		return d.c.Tensor(name)
	}
	a, err := d.c.Affine(name)
	if err != nil {
		return safetensors.Info{}, false // Open validated the tensors; unreachable for a valid checkpoint
	}
	v, err := a.Dequantize()
	if err != nil {
		return safetensors.Info{}, false
	}
	return safetensors.Info{Name: name, DType: safetensors.F32, Shape: []int{a.Rows, a.Cols}, Data: safetensors.F32Bytes(v)}, true
}

// auxBase strips a ".scales" or ".biases" suffix.
func auxBase(name string) (string, bool) {
	for _, s := range []string{ScalesSuffix, BiasesSuffix} {
		if len(name) > len(s) && name[len(name)-len(s):] == s {
			return name[:len(name)-len(s)], true
		}
	}
	return "", false
}
