package rife

import (
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
)

// Model is a loaded IFNet. Its methods are not safe for concurrent use.
type Model struct {
	cfg     Config
	layout  Layout
	dtype   dtypes.DType
	backend compute.Backend
	set     *weights.Set

	floatExec, byteExec *Exec // per frame size and batch, compiled on first use
	// matmulConvs lowers the convolutions to matrix products: on the pure-Go backend, whose
	// direct convolution is far slower than its matrix product.
	matmulConvs bool
}

// Load builds a model from a checkpoint in either layout (Detect), computing in dt (Float32 or
// BFloat16; the warp is float32 as upstream's). The tensors are copied to the backend.
func Load(backend compute.Backend, src weights.Source, dt dtypes.DType) (*Model, error) {
	cfg, layout, err := Detect(src)
	if err != nil {
		return nil, err
	}
	return modelkit.Populate(func() (*Model, error) { return newModel(backend, cfg, layout, dt) }, func(m *Model) error {
		return modelkit.BindSource("rife", newIFNetSource(src), m.set, m.dtype, backend, m.build)
	})
}

// Random builds a model of cfg with seeded random weights drawn on the device (tests, benchmarks,
// the tiny models): convolutions at PyTorch's default init scale, residual betas 1.
func Random(backend compute.Backend, cfg Config, dt dtypes.DType, seed int64) (*Model, error) {
	return modelkit.Populate(func() (*Model, error) { return newModel(backend, cfg, PyTorch, dt) }, func(m *Model) error {
		return modelkit.DrawRandom("rife", m.set, m.dtype, backend, seed, randomDraw, m.build)
	})
}

// randomDraw scales the normal draws by 1/sqrt(fan_in), the size of PyTorch's default Conv2d init.
func randomDraw(p *weights.Param) (scale, offset float32) {
	if len(p.Shape) == 4 && p.Shape[0] == 1 { // beta
		return 0, 1
	}
	fan := 1
	if len(p.Shape) == 4 {
		fan = p.Shape[1] * p.Shape[2] * p.Shape[3]
	}
	return float32(1 / math.Sqrt(float64(fan))), 0
}

func newModel(backend compute.Backend, cfg Config, l Layout, dt dtypes.DType) (*Model, error) {
	dt, err := modelkit.Prepare("rife", cfg, backend, dt, modelkit.DiTDTypes)
	if err != nil {
		return nil, err
	}
	return &Model{cfg: cfg, layout: l, dtype: dt, backend: backend, set: declare(cfg, l), matmulConvs: backend.String() == "go"}, nil
}

// build creates the two executables: float frames in [0,1] to float frames (the parity tests), and
// uint8 RGB to uint8 RGB (the filter).
func (m *Model) build() error {
	return graphexec.Catch("rife: building graphs", func() error {
		m.floatExec = graphexec.MustExec(m.backend, "rife.interpolate_f32", func(in []*Node) *Node { return m.graph(in, false) })
		m.byteExec = graphexec.MustExec(m.backend, "rife.interpolate_rgb24", func(in []*Node) *Node { return m.graph(in, true) })
		return nil
	})
}

// Config is the model's block widths; Layout the checkpoint layout it was loaded from.
func (m *Model) Config() Config { return m.cfg }
func (m *Model) Layout() Layout { return m.layout }

// DType is the compute dtype.
func (m *Model) DType() dtypes.DType { return m.dtype }

// graph is the whole interpolation: in = frames a, b [N,H,W,3] (float32 in [0,1], or uint8 when
// bytes), t [N] float32, then the weights. The frames are padded at the bottom and right with
// zeros to multiples of PadTo (vs-rife's F.pad, RIFE_HDv3.inference) and the result cropped back;
// bytes quantizes it as the MLX pipeline does (clip to [0,1], *255, round half to even).
func (m *Model) graph(in []*Node, bytes bool) *Node {
	a, b, t := in[0], in[1], in[2]
	d := a.Shape().Dimensions
	n, h, w := d[0], d[1], d[2]
	prep := func(x *Node) *Node {
		x = ConvertDType(x, m.dtype)
		if bytes {
			x = DivScalar(x, 255)
		}
		ph, pw := (h+PadTo-1)/PadTo*PadTo, (w+PadTo-1)/PadTo*PadTo
		if ph == h && pw == w {
			return x
		}
		return Pad(x, ScalarZero(x.Graph(), x.DType()), compute.PadAxis{}, compute.PadAxis{End: ph - h}, compute.PadAxis{End: pw - w}, compute.PadAxis{})
	}
	pa, pb := prep(a), prep(b)
	pd := pa.Shape().Dimensions
	ts := BroadcastToDims(Reshape(ConvertDType(t, m.dtype), n, 1, 1, 1), n, pd[1], pd[2], 1)
	out := bindNet(m.cfg, m.layout, m.matmulConvs, in[3:]).forward(pa, pb, ts)
	out = ConvertDType(Slice(out, AxisRange(), AxisRange(0, h), AxisRange(0, w), AxisRange()), dtypes.Float32)
	if !bytes {
		return out
	}
	return ConvertDType(Round(MulScalar(ClipScalar(out, 0, 1), 255)), dtypes.Uint8)
}

// Forward interpolates float frames: a, b [N,H,W,3] float32 in [0,1], t one fraction per pair. The
// result is float32 [N,H,W,3], neither clipped nor quantized.
func (m *Model) Forward(a, b []float32, n, h, w int, t []float32) (out []float32, err error) {
	if err := checkPair(len(a), len(b), n, h, w, t); err != nil {
		return nil, err
	}
	return call(m, m.floatExec, a, b, n, h, w, t, graphexec.HostF32)
}

// call runs e on a batch of pairs and the weights, and reads its one output back with read.
func call[T float32 | byte, O any](m *Model, e *Exec, a, b []T, n, h, w int, t []float32, read func(*tensors.Tensor) (O, error)) (O, error) {
	args := []any{
		tensors.FromFlatDataAndDimensions(a, n, h, w, 3), tensors.FromFlatDataAndDimensions(b, n, h, w, 3),
		tensors.FromFlatDataAndDimensions(t, n),
	}
	res, err := graphexec.Call(e, graphexec.ParamArgs(args, m.set.Params()...)...)
	if err != nil {
		var none O
		return none, err
	}
	defer graphexec.Finalize(res...)
	return read(res[0])
}

// Interpolate makes, for each pair i, the frame at fraction t[i] between a's frame i and b's frame
// i: a, b are n frames of w x h packed RGB (rgb24), as is the result.
func (m *Model) Interpolate(a, b []byte, n, h, w int, t []float64) (out []byte, err error) {
	ts := make([]float32, len(t))
	for i, v := range t {
		if !(v > 0 && v < 1) {
			return nil, fmt.Errorf("rife: fraction %d is %v, want one inside (0, 1)", i, v)
		}
		ts[i] = float32(v)
	}
	if err := checkPair(len(a), len(b), n, h, w, ts); err != nil {
		return nil, err
	}
	return call(m, m.byteExec, a, b, n, h, w, ts, tensors.CopyFlatData[byte])
}

// checkPair validates the sizes of a batch of frame pairs.
func checkPair(lenA, lenB, n, h, w int, t []float32) error {
	if n < 1 || h < 1 || w < 1 || len(t) != n {
		return fmt.Errorf("rife: %d pairs of %dx%d frames with %d fractions", n, w, h, len(t))
	}
	if want := n * h * w * 3; lenA != want || lenB != want {
		return fmt.Errorf("rife: frames of %d and %d values, want %d (%d x %dx%d x 3)", lenA, lenB, want, n, w, h)
	}
	return nil
}

// Compile builds the uint8 executable for n pairs of w x h frames ahead of the first call (the
// benchmarks time warm calls).
func (m *Model) Compile(n, h, w int) error {
	specs := []shapes.Shape{shapes.Make(dtypes.Uint8, n, h, w, 3), shapes.Make(dtypes.Uint8, n, h, w, 3), shapes.Make(dtypes.Float32, n)}
	for _, p := range m.set.Params() {
		specs = append(specs, p.T.Shape())
	}
	return graphexec.Catch("rife: compile", func() error { _, err := m.byteExec.Compile(specs...); return err })
}

// Close frees the weights and executables.
func (m *Model) Close() error {
	if m == nil || m.set == nil {
		return nil
	}
	err := modelkit.Release(m.set, nil, m.floatExec, m.byteExec)
	m.set, m.floatExec, m.byteExec = nil, nil, nil
	return err
}
