package fusedops

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// qkCase is one q/k pass's inputs: x [1, L, H, Dh], w [Dh], cos/sin [L, rot] (angles uniform on a turn).
type qkCase struct {
	l, h, dh, rot  int
	x, w, cos, sin []float32
}

func newQKCase(l, h, dh, rot int, seed uint64) qkCase {
	r := rand.New(rand.NewPCG(seed, 7))
	c := qkCase{l: l, h: h, dh: dh, rot: rot}
	c.x = make([]float32, l*h*dh)
	for i := range c.x {
		c.x[i] = float32(r.NormFloat64() * 2)
	}
	c.w = make([]float32, dh)
	for i := range c.w {
		c.w[i] = float32(1 + 0.2*r.NormFloat64())
	}
	c.cos, c.sin = make([]float32, l*rot), make([]float32, l*rot)
	for i := range c.cos {
		a := r.Float64() * 2 * math.Pi
		c.cos[i], c.sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	return c
}

// reference is the pass in float64 (fastvideo/models/dits/minimax_h3.py: RMSNorm, then the half-split
// rotation of the first rot channels).
func (c qkCase) reference() []float64 {
	out := make([]float64, len(c.x))
	half := c.rot / 2
	for t := range c.l {
		for hd := range c.h {
			row := c.x[(t*c.h+hd)*c.dh:][:c.dh]
			ss := 0.0
			for _, v := range row {
				ss += float64(v) * float64(v)
			}
			r := 1 / math.Sqrt(ss/float64(c.dh)+1e-5)
			n := make([]float64, c.dh)
			for i, v := range row {
				n[i] = float64(v) * r * float64(c.w[i])
			}
			o := out[(t*c.h+hd)*c.dh:][:c.dh]
			copy(o, n)
			for i := range half {
				cs, sn := float64(c.cos[t*c.rot+i]), float64(c.sin[t*c.rot+i])
				o[i] = n[i]*cs - n[i+half]*sn
				cs, sn = float64(c.cos[t*c.rot+i+half]), float64(c.sin[t*c.rot+i+half])
				o[i+half] = n[i+half]*cs + n[i]*sn
			}
		}
	}
	return out
}

func (c qkCase) tensors() []*tensors.Tensor {
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(c.x, 1, c.l, c.h, c.dh), tensors.FromFlatDataAndDimensions(c.w, c.dh),
		tensors.FromFlatDataAndDimensions(c.cos, c.l, c.rot), tensors.FromFlatDataAndDimensions(c.sin, c.l, c.rot)}
}

// TestQKNormRopeGraphMatchesReference: the graph form in float32 on the CPU against the float64 pass,
// the rotation partial (rot < Dh) and whole.
func TestQKNormRopeGraphMatchesReference(t *testing.T) {
	b := testutil.Backend(t)
	for _, c := range []qkCase{newQKCase(5, 3, 16, 8, 1), newQKCase(4, 2, 8, 8, 2)} {
		e := MustNewExec(b, func(x, w, cos, sin *Node) *Node { return QKNormRope(x, w, cos, sin, 1e-5, c.rot, FormAuto) })
		out, err := e.Call1(anys(c.tensors())...)
		if err != nil {
			t.Fatal(err)
		}
		got, want := tensors.MustCopyFlatData[float32](out), c.reference()
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-4*math.Max(1, math.Abs(want[i])) {
				t.Fatalf("dh %d rot %d: element %d is %g, want %g", c.dh, c.rot, i, got[i], want[i])
			}
		}
	}
}

// TestExpandedAnglesRotate: the kernel's tables (expandedAngles) rotate as the graph form does,
// x·C + partner(x)·S with each channel's partner c ± rot/2 (the kernel's shifted rows), equal bit for bit.
func TestExpandedAnglesRotate(t *testing.T) {
	b := testutil.Backend(t)
	c := newQKCase(5, 3, 32, 16, 3)
	e := MustNewExec(b, func(x, w, cos, sin *Node) []*Node {
		xw := Mul(x, ExpandLeftToRank(w, 4))
		half, dh := c.rot/2, c.dh
		part := func(a, z int) *Node { return Slice(xw, AxisRange(), AxisRange(), AxisRange(), AxisRange(a, z)) }
		partner := Concatenate([]*Node{part(half, c.rot), part(0, half), part(c.rot, dh)}, -1)
		cx, sx := expandedAngles(cos, sin, c.rot, dh)
		table := func(v *Node) *Node { return Reshape(v, 1, c.l, 1, dh) }
		return []*Node{rotate(xw, cos, sin, c.rot), Add(Mul(xw, table(cx)), Mul(partner, table(sx)))}
	})
	out, err := e.Call(anys(c.tensors())...)
	if err != nil {
		t.Fatal(err)
	}
	graph, tables := tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
	for i := range graph {
		if graph[i] != tables[i] {
			t.Fatalf("element %d: the graph's rotation %g, the tables' %g", i, graph[i], tables[i])
		}
	}
}

// TestQKNormRopeKernelNotOnCPU: the CPU backend runs the graph form under FormAuto, says why the kernel
// cannot run, and refuses FormKernel when the graph is built.
func TestQKNormRopeKernelNotOnCPU(t *testing.T) {
	b := testutil.Backend(t)
	if err := QKNormRopeKernel(b, dtypes.BFloat16, dtypes.BFloat16, 56, 128, 96); err == nil {
		t.Fatal("the kernel reports it can run on the CPU backend")
	}
	c := newQKCase(3, 2, 8, 8, 4)
	run := func(form Form) (out []float32, err error) {
		defer func() {
			if r := recover(); r != nil {
				err, _ = r.(error)
				if err == nil {
					t.Fatalf("panic without an error: %v", r)
				}
			}
		}()
		e := MustNewExec(b, func(x, w, cos, sin *Node) *Node { return QKNormRope(x, w, cos, sin, 1e-5, c.rot, form) })
		res, err := e.Call1(anys(c.tensors())...)
		if err != nil {
			return nil, err
		}
		return tensors.MustCopyFlatData[float32](res), nil
	}
	auto, err := run(FormAuto)
	if err != nil {
		t.Fatal(err)
	}
	graph, _ := run(FormGraph)
	for i := range auto {
		if auto[i] != graph[i] {
			t.Fatalf("FormAuto differs from FormGraph on the CPU at %d", i)
		}
	}
	if _, err := run(FormKernel); err == nil || !strings.Contains(err.Error(), "qk_norm_rope kernel was asked for") {
		t.Fatalf("FormKernel on the CPU: %v, want the kernel refused", err)
	}
}

// TestParseKernelFile: the embedded kernel file loads, and files that are incomplete or whose IR depends
// on the geometry are refused.
func TestParseKernelFile(t *testing.T) {
	if f, err := parseKernelFile(kernelFileData); err != nil || f.Kernels["qk_norm_rope"] == nil || len(f.Kernels["qk_norm_rope"].Bytecode()) == 0 {
		t.Fatalf("the embedded fused_triton.json has no qk_norm_rope kernel: %v", err)
	}
	for name, data := range map[string]string{
		"not json":    `{`,
		"null kernel": `{"plugin": "p 1", "head": 128, "heads": 64, "kernels": {"qk_norm_rope": null}}`,
		"no plugin":   `{"head": 128, "heads": 64, "kernels": {}}`,
		"no IR":       `{"plugin": "p 1", "head": 128, "heads": 64, "kernels": {"qk_norm_rope": {"ir": "", "num_warps": 4, "num_stages": 1, "geometry_free": true}}}`,
		"geometry IR": `{"plugin": "p 1", "head": 128, "heads": 64, "kernels": {"qk_norm_rope": {"ir": "AAAA", "num_warps": 4, "num_stages": 1, "geometry_free": false}}}`,
	} {
		if _, err := parseKernelFile([]byte(data)); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
	f, err := parseKernelFile([]byte(`{"plugin": "p 1", "head": 128, "heads": 64, "kernels": {"qk_norm_rope": {"ir": "AAAA", "num_warps": 16, "num_stages": 1, "geometry_free": true}}}`))
	if err != nil || len(f.Kernels["qk_norm_rope"].Bytecode()) != 3 {
		t.Fatalf("a complete file: %v", err)
	}
}

// TestQKNormRopeKernelOnGPU: the kernel against the graph form on the same bf16 inputs, FastH3's heads and
// rotation and a few others. Both outputs come back in bf16 (a graph form converted to float32 in the
// graph would not be rounded: XLA drops the bf16 round trip), and may differ by one bf16 step where the
// order of the statistic's float32 sum does; the generator found them equal bit for bit at FastH3's
// geometry:
//
//	bash bench/build_gpu.sh -test .gpu/fusedops.test ./internal/fusedops
//	cd internal/fusedops && FASTVIDEO_GPU_TEST=1 ../../.gpu/fusedops.test -test.run OnGPU -test.v
func TestQKNormRopeKernelOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	if err := QKNormRopeKernel(b, dtypes.BFloat16, dtypes.BFloat16, 56, 128, 96); err != nil {
		t.Fatalf("the kernel cannot run on xla:cuda: %v", err)
	}
	for _, c := range []qkCase{newQKCase(1000, 56, 128, 96, 5), newQKCase(37, 3, 128, 96, 6), newQKCase(9, 64, 128, 128, 7), newQKCase(20, 5, 128, 16, 8)} {
		in := c.tensors()
		for _, i := range []int{0, 1} { // x and w in bf16, as the DiT holds them
			in[i] = toBF16(in[i])
		}
		run := func(form Form) []bfloat16.BFloat16 {
			e := MustNewExec(b, func(x, w, cos, sin *Node) *Node { return QKNormRope(x, w, cos, sin, 1e-5, c.rot, form) })
			out, err := e.Call1(anys(in)...)
			if err != nil {
				t.Fatal(err)
			}
			return tensors.MustCopyFlatData[bfloat16.BFloat16](out)
		}
		kernel, graph := run(FormKernel), run(FormGraph)
		equal := 0
		for i := range kernel {
			switch bf16StepsApart(kernel[i], graph[i]) {
			case 0:
				equal++
			case 1:
			default:
				t.Fatalf("L %d, H %d, rot %d: element %d kernel %g, graph %g: more than one bf16 step apart",
					c.l, c.h, c.rot, i, kernel[i].Float32(), graph[i].Float32())
			}
		}
		t.Logf("L %d, H %d, rot %d: %.2f %% of %d elements equal, the rest one bf16 step apart", c.l, c.h, c.rot, 100*float64(equal)/float64(len(kernel)), len(kernel))
	}
}

// bf16StepsApart is how many representable bf16 values separate a and b (finite values; ±0 are one value):
// the sign-magnitude bits mapped onto one ordered integer line.
func bf16StepsApart(a, b bfloat16.BFloat16) int {
	ordered := func(v bfloat16.BFloat16) int {
		bits := int(v.Bits())
		if bits&0x8000 != 0 {
			return -(bits & 0x7fff)
		}
		return bits
	}
	d := ordered(a) - ordered(b)
	if d < 0 {
		return -d
	}
	return d
}

func toBF16(x *tensors.Tensor) *tensors.Tensor {
	v := tensors.MustCopyFlatData[float32](x)
	out := make([]bfloat16.BFloat16, len(v))
	for i := range v {
		out[i] = bfloat16.FromFloat32(v[i])
	}
	return tensors.FromFlatDataAndDimensions(out, x.Shape().Dimensions...)
}

func anys(ts []*tensors.Tensor) []any {
	out := make([]any, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// TestBF16StepsApart: the GPU test's measure of disagreement, on values whose one-step distance is smaller
// than |g|/256 (the bound it replaced, which failed 1.7734375 against 1.78125, adjacent values).
func TestBF16StepsApart(t *testing.T) {
	for _, c := range []struct {
		a, b float32
		want int
	}{
		{1.7734375, 1.78125, 1}, {1.78125, 1.7734375, 1}, {1.78125, 1.78125, 0}, {1.7734375, 1.7890625, 2},
		{2, 1.9921875, 1}, {-2, -1.9921875, 1}, {0, float32(math.Copysign(0, -1)), 0}, {-1, 1, 2 * 0x3f80},
	} {
		if got := bf16StepsApart(bfloat16.FromFloat32(c.a), bfloat16.FromFloat32(c.b)); got != c.want {
			t.Errorf("bf16StepsApart(%g, %g) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
