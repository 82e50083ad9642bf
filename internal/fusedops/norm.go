package fusedops

import (
	"errors"
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/nn"
	"fastvideo/internal/xlaext"
)

// errNormShape: the pass is not one the norm kernels compute.
var errNormShape = errors.New("the norm_modulate kernels do not cover this pass")

// Modulation is a block's AdaLN tables Mod [R, 6, D] (six tables a table row) and each token's table
// row Rows [L] int32: MiniMax H3's per-row modulation, whose rows differ by timestep and modality.
type Modulation struct {
	Mod, Rows *Node
}

// Table is table i of each token's row, [L, D] in dtype dt: the one table gathered, not all six.
func (m Modulation) Table(i int, dt dtypes.DType) *Node {
	table := Squeeze(Slice(ConvertDType(m.Mod, dt), AxisRange(), AxisElem(i), AxisRange()), 1) // [R, D]
	return Gather(table, ExpandAxes(m.Rows, -1))
}

// NormModulate is the AdaLN pre-norm h = RMSNorm(x)·w·(1 + table[scale]) + table[shift] of x [L, D]
// (nn.RMSNorm then nn.Modulate, in x's dtype; fastvideo/models/dits/minimax_h3.py). form chooses the graph
// ops or the kernel, as QKNormRope's does.
func NormModulate(x *Node, m Modulation, w *Node, eps float64, shift, scale int, form Form) *Node {
	if form != FormGraph {
		out, err := normKernel(x, nil, m, w, eps, [3]int{0, shift, scale})
		if err == nil {
			return out[0]
		}
		if form == FormKernel {
			panic(fmt.Errorf("fusedops: the norm_modulate kernel was asked for: %w", err))
		}
	}
	return nn.Modulate(nn.RMSNorm(x, w, eps), m.Table(shift, x.DType()), m.Table(scale, x.DType()))
}

// ResidualNormModulate adds the gated branch output y [L, D] to the residual stream x, sum = x +
// table[gate]·y, and returns the sum's pre-norm h (NormModulate) and the sum.
func ResidualNormModulate(x, y *Node, m Modulation, w *Node, eps float64, gate, shift, scale int, form Form) (h, sum *Node) {
	if form != FormGraph {
		out, err := normKernel(x, y, m, w, eps, [3]int{gate, shift, scale})
		if err == nil {
			return out[0], out[1]
		}
		if form == FormKernel {
			panic(fmt.Errorf("fusedops: the residual_norm_modulate kernel was asked for: %w", err))
		}
	}
	sum = Add(x, Mul(m.Table(gate, x.DType()), y))
	return NormModulate(sum, m, w, eps, shift, scale, FormGraph), sum
}

// NormModulateKernel reports why the norm kernels cannot compute a pre-norm on backend for a residual
// stream of dtype and width d with a weight of wDType (nil: they can).
func NormModulateKernel(backend compute.Backend, dtype, wDType dtypes.DType, d int) error {
	_, err := normKernelFor("residual_norm_modulate", backend, dtype, wDType, d)
	if err == nil {
		_, err = normKernelFor("norm_modulate", backend, dtype, wDType, d)
	}
	return err
}

// normKernelFor is the named norm kernel where it computes the pass (NormModulateKernel), or why not.
func normKernelFor(name string, backend compute.Backend, dtype, wDType dtypes.DType, d int) (*kernelRecord, error) {
	k, f, err := kernel(name, backend)
	if err != nil {
		return nil, err
	}
	switch {
	case dtype != dtypes.BFloat16 || wDType != dtypes.BFloat16:
		return nil, fmt.Errorf("%w: x %s and w %s (it takes bfloat16)", errNormShape, dtype, wDType)
	case f.Vec <= 0 || d < f.Vec || d > f.Width || d%f.Vec != 0:
		// The kernel reads a row in runs of Vec lanes, 16-byte loads, in one block of Width lanes.
		return nil, fmt.Errorf("%w: rows of %d channels (it takes a multiple of %d up to %d)", errNormShape, d, f.Vec, f.Width)
	}
	return k, nil
}

// normKernel is NormModulate (y nil) or ResidualNormModulate through the kernels, tables {gate, shift,
// scale} (gate unused without y): their operands as testdata/gen_fused_triton.py documents them. It
// returns h, and the sum with y.
func normKernel(x, y *Node, m Modulation, w *Node, eps float64, tables [3]int) ([]*Node, error) {
	g := x.Graph()
	name := "norm_modulate"
	if y != nil {
		name = "residual_norm_modulate"
	}
	if x.Rank() != 2 || m.Mod.Rank() != 3 || m.Mod.Shape().Dim(1) != 6 || m.Mod.Shape().Dim(2) != x.Shape().Dim(1) ||
		m.Rows.Rank() != 1 || m.Rows.Shape().Dim(0) != x.Shape().Dim(0) || m.Rows.DType() != dtypes.Int32 {
		return nil, fmt.Errorf("%w: x %s, tables %s, rows %s (want [L, D], [R, 6, D], int32 [L])", errNormShape, x.Shape(), m.Mod.Shape(), m.Rows.Shape())
	}
	if y != nil && !y.Shape().Equal(x.Shape()) {
		return nil, fmt.Errorf("%w: branch output %s beside x %s", errNormShape, y.Shape(), x.Shape())
	}
	l, d, r := x.Shape().Dim(0), x.Shape().Dim(1), m.Mod.Shape().Dim(0)
	k, err := normKernelFor(name, g.Backend(), x.DType(), w.DType(), d)
	if err != nil {
		return nil, err
	}
	if l*d > 1<<31-1 || r*6*d > 1<<31-1 {
		return nil, fmt.Errorf("%w: %d rows and %d table rows of %d, past the kernel's int32 offsets", errNormShape, l, r, d)
	}
	// The kernel trusts each row's table row; XLA's gather in the graph form clamps it, so clamp here too.
	rows := ClipScalar(m.Rows, 0, float64(r-1))
	params := Const(g, []int32{int32(d), int32(tables[0]), int32(tables[1]), int32(tables[2]), int32(l)})
	operands := []*Node{params, rows, Reshape(x, l*d)}
	results := []shapes.Shape{shapes.Make(x.DType(), l*d)}
	if y != nil {
		operands = append(operands, Reshape(y, l*d))
		results = append(results, results[0])
	}
	operands = append(operands, Reshape(ConvertDType(m.Mod, x.DType()), r*6*d), w, Const(g, []float32{float32(eps)}))
	out, err := xlaext.TritonCall(k.Launch(name, [3]int{l, 1, 1}), operands, results)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = Reshape(out[i], l, d)
	}
	return out, nil
}
