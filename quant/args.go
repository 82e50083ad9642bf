package quant

import (
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// Kind is how a linear's weight reaches an executable: the dense matrix, FP8 e4m3fn codes with their
// per-row scales, or affine-quantized packed words with their scales and biases.
type Kind uint8

const (
	KindDense Kind = iota
	KindFP8
	KindAffine
)

// KindOf is the kind of a linear stored with scheme s (zero: dense) and converted to FP8 when fp8
// (only a dense weight converts).
func KindOf(s Scheme, fp8 bool) Kind {
	switch {
	case s != (Scheme{}):
		return KindAffine
	case fp8:
		return KindFP8
	}
	return KindDense
}

// Args are a linear's executable inputs by name: graph nodes while the executable is built, the bound
// tensors when it is called. Which of them a weight takes is its Kind.
type Args[T any] struct{ W, Scales, Biases T }

// Fields lists the inputs of a weight of kind k, in call order (graphexec.Inputs).
func (a *Args[T]) Fields(k Kind) []*T {
	switch k {
	case KindAffine:
		return []*T{&a.W, &a.Scales, &a.Biases}
	case KindFP8:
		return []*T{&a.W, &a.Scales}
	}
	return []*T{&a.W}
}

// Graph builds the graph weight of kind k (scheme s when affine) from its inputs.
func (k Kind) Graph(a Args[*graph.Node], s Scheme) GraphWeight {
	switch k {
	case KindAffine:
		return QuantizedWeight(a.W, a.Scales, a.Biases, s)
	case KindFP8:
		return FP8Weight(a.W, a.Scales)
	}
	return DenseWeight(a.W)
}

// Kind is how the bound weight reaches an executable.
func (w *Weight) Kind() Kind {
	switch {
	case w.Quantized():
		return KindAffine
	case w.FP8:
		return KindFP8
	}
	return KindDense
}

// Args are the bound tensors of the weight (those its Kind takes are set).
func (w *Weight) Args() Args[*tensors.Tensor] {
	a := Args[*tensors.Tensor]{W: w.W.T}
	if w.Kind() != KindDense {
		a.Scales = w.Scales.T
	}
	if w.Kind() == KindAffine {
		a.Biases = w.Biases.T
	}
	return a
}
