package h3

import (
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/quant"
)

// blockShape is what a block's weight inputs look like to its executable: the kind of each core
// linear (dense, FP8 or affine-quantized, fixed per kind of block) and whether the VSA gate follows.
type blockShape struct {
	schemes linearLayout
	fp8     bool
	gate    bool
}

// blockWeights are one block's weights as executable inputs, by name: graph nodes while the executable
// is built (T = *Node), the bound tensors when it is called (T = *tensors.Tensor). Fields lists those
// its shape takes, the one place their call order is written.
type blockWeights[T any] struct {
	shape                      blockShape
	Norm1, Norm2, NormQ, NormK T
	Q, K, V, Out, FFIn, FFOut  quant.Args[T]
	// Gate is the VSA compression gate to_gate_compress [inner, D] (an input when shape.gate).
	Gate T
}

// linears returns the six core linears in linearLayout order.
func (w *blockWeights[T]) linears() [numCoreLinears]*quant.Args[T] {
	return [numCoreLinears]*quant.Args[T]{&w.Q, &w.K, &w.V, &w.Out, &w.FFIn, &w.FFOut}
}

func (w *blockWeights[T]) Fields() []*T {
	f := []*T{&w.Norm1, &w.Norm2, &w.NormQ, &w.NormK}
	for k, l := range w.linears() {
		f = append(f, l.Fields(quant.KindOf(w.shape.schemes[k], w.shape.fp8))...)
	}
	if w.shape.gate {
		f = append(f, &w.Gate)
	}
	return f
}

// withGate is w taking (or not) its gate as an input.
func (w *blockWeights[T]) withGate(gate bool) *blockWeights[T] {
	c := *w
	c.shape.gate = gate
	return &c
}

// graphWeights are the graph inputs of a block of shape s, to be filled by graphexec.Unpack.
func graphWeights(s blockShape) *blockWeights[*Node] { return &blockWeights[*Node]{shape: s} }

// coreOf is the block's weights as the block graphs read them.
func coreOf(w *blockWeights[*Node]) coreWeights {
	var ws [numCoreLinears]quant.GraphWeight
	for k, l := range w.linears() {
		ws[k] = quant.KindOf(w.shape.schemes[k], w.shape.fp8).Graph(*l, w.shape.schemes[k])
	}
	c := coreWeights{
		Norm1: w.Norm1, Norm2: w.Norm2,
		Attn: attnWeights{Q: ws[0], K: ws[1], V: ws[2], Out: ws[3], NormQ: w.NormQ, NormK: w.NormK},
		FFIn: ws[4], FFOut: ws[5],
	}
	if w.shape.gate {
		c.Attn.Gate = w.Gate
	}
	return c
}

// boundWeights are the bound tensors of the core weights c (fp8: its linears were converted), with
// gate (nil: none) as its VSA gate, held but not an input until withGate(true) (a VSA program).
func boundWeights(c *coreParams, fp8 bool, gate *tensors.Tensor) *blockWeights[*tensors.Tensor] {
	w := &blockWeights[*tensors.Tensor]{
		shape: blockShape{schemes: c.layout(), fp8: fp8},
		Norm1: c.Norm1.T, Norm2: c.Norm2.T, NormQ: c.NormQ.T, NormK: c.NormK.T, Gate: gate,
	}
	for k, l := range c.linears() {
		*w.linears()[k] = l.Args()
	}
	return w
}
