package rife

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// FixtureKind is the kind of the IFNet fixtures (testdata/gen_ifnet.py).
const fixtureKind = "rife_ifnet"

// TestIFNetParity runs upstream's PyTorch IFNet 4.25 fixtures: random weights of a small width
// (PyTorch names), frame pairs (uint8, NHWC) of sizes that need padding, batches with different
// fractions, and the float output (NHWC) before quantization.
func TestIFNetParity(t *testing.T) {
	if _, err := os.Stat("testdata/ifnet.safetensors"); os.IsNotExist(err) {
		t.Skip("testdata/ifnet.safetensors is not generated yet: run testdata/gen_ifnet.py on the GPU machine (see its header)")
	}
	testutil.ForEachFixture(t, fixtureKind, func(t *testing.T, fx *testutil.Fixture) {
		var cfg struct {
			Config Config `json:"config"`
			Cases  []struct {
				Name string    `json:"name"`
				T    []float32 `json:"t"`
			} `json:"cases"`
		}
		if err := fx.DecodeConfig(&cfg); err != nil {
			t.Fatal(err)
		}
		got, layout, err := Detect(fx.Weights())
		if err != nil || layout != PyTorch || !equalInts(got.BlockChannels, cfg.Config.BlockChannels) {
			t.Fatalf("Detect = %v, %v, %v; the fixture says %v in PyTorch names", got, layout, err, cfg.Config)
		}
		m := testutil.Open(t, func() (*Model, error) { return Load(testutil.Backend(t), fx.Weights(), dtypes.Float32) })
		for _, c := range cfg.Cases {
			a, b := frameFloats(t, fx, "in."+c.Name+".img0"), frameFloats(t, fx, "in."+c.Name+".img1")
			want, shape := fx.F32(t, "out."+c.Name)
			n, h, w := shape[0], shape[1], shape[2]
			out, err := m.Forward(a, b, n, h, w, c.T)
			if err != nil {
				t.Fatal(err)
			}
			testutil.AssertClose(t, c.Name, out, want, shape, testutil.ParityTol(want))
		}
	})
}

// frameFloats reads uint8 frames as float32 / 255, as the generator feeds them to PyTorch.
func frameFloats(t *testing.T, fx *testutil.Fixture, name string) []float32 {
	info := fx.Info(t, name)
	if info.DType != safetensors.U8 {
		t.Fatalf("%s is %s, want U8", name, info.DType)
	}
	out := make([]float32, len(info.Data))
	for i, v := range info.Data {
		out[i] = float32(v) / 255
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// tinySources are the same random tiny weights in both layouts: PyTorch names behind "module."
// with a training-only tensor beside them, and the MLX transposition.
func tinySources(t *testing.T) (pt, mlx weights.Source) {
	shapes, err := Params(Tiny(), PyTorch)
	if err != nil {
		t.Fatal(err)
	}
	syn := weights.NewSynthetic(7, shapes.Map(), nil)
	ptm, mlxm := weights.MapSource{}, weights.MapSource{}
	for _, c := range convs(Tiny(), PyTorch) {
		for _, n := range []string{c.weight, c.bias, c.beta} {
			if n == "" {
				continue
			}
			info, _ := syn.Tensor(n)
			ptm["module."+n] = info
			mlxm[mlxName(n)] = toMLX(t, info, c, n == c.weight)
		}
	}
	ptm["module.teacher.conv.weight"] = safetensors.Info{Name: "module.teacher.conv.weight", DType: safetensors.F32, Shape: []int{1}, Data: make([]byte, 4)}
	return ptm, mlxm
}

func mlxName(n string) string {
	n = strings.Replace(n, ".conv0.0.0.", ".conv0.0.conv.", 1)
	n = strings.Replace(n, ".conv0.1.0.", ".conv0.1.conv.", 1)
	return strings.Replace(n, ".lastconv.0.", ".lastconv.", 1)
}

// toMLX permutes a PyTorch kernel ([O,I,kh,kw], transposed [I,O,kh,kw]) to [O,kh,kw,I] and a beta
// [1,C,1,1] to [1,1,1,C].
func toMLX(t *testing.T, info safetensors.Info, c conv, kernel bool) safetensors.Info {
	v, err := info.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if !kernel {
		shape := info.Shape
		if len(shape) == 4 {
			shape = []int{1, 1, 1, shape[1]}
		}
		return safetensors.Info{DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(v)}
	}
	k := c.k
	out := make([]float32, len(v))
	for o := range c.out {
		for i := range c.in {
			for s := range k * k {
				src := (o*c.in+i)*k*k + s
				if c.transposed {
					src = (i*c.out+o)*k*k + s
				}
				out[(o*k*k+s)*c.in+i] = v[src]
			}
		}
	}
	return safetensors.Info{DType: safetensors.F32, Shape: c.weightShape(MLX), Data: safetensors.F32Bytes(out)}
}

func randomFrames(rng *rand.Rand, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(rng.IntN(256))
	}
	return out
}

// TestLayoutsAgree loads the same weights from both layouts, detects the tiny config, and checks
// that both give the same frames for a batch whose size needs padding.
func TestLayoutsAgree(t *testing.T) {
	pt, mlx := tinySources(t)
	b := testutil.Backend(t)
	mp := testutil.Open(t, func() (*Model, error) { return Load(b, pt, dtypes.Float32) })
	mm := testutil.Open(t, func() (*Model, error) { return Load(b, mlx, dtypes.Float32) })
	if mp.Layout() != PyTorch || mm.Layout() != MLX || !equalInts(mm.Config().BlockChannels, Tiny().BlockChannels) {
		t.Fatalf("layouts %v, %v; config %v", mp.Layout(), mm.Layout(), mm.Config())
	}
	rng := rand.New(rand.NewPCG(1, 1))
	n, h, w := 2, 40, 70
	a, c := randomFrames(rng, n*h*w*3), randomFrames(rng, n*h*w*3)
	ts := []float64{0.5, 0.3}
	x, err := mp.Interpolate(a, c, n, h, w, ts)
	if err != nil {
		t.Fatal(err)
	}
	y, err := mm.Interpolate(a, c, n, h, w, ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(x) != n*h*w*3 {
		t.Fatalf("%d bytes, want %d", len(x), n*h*w*3)
	}
	diff := 0
	for i := range x {
		if d := int(x[i]) - int(y[i]); d > 1 || d < -1 {
			diff++
		}
	}
	if diff > 0 {
		t.Errorf("%d bytes differ by more than 1 between the layouts", diff)
	}
}

// TestConstantFramesStayConstant: every warp of a uniform frame is the frame and the blend of two
// equal values is the value, whatever the weights and the fraction (at a size that needs no
// padding: upstream's zero padding would enter the warps).
func TestConstantFramesStayConstant(t *testing.T) {
	m := testutil.Open(t, func() (*Model, error) { return Random(testutil.Backend(t), Tiny(), dtypes.Float32, 3) })
	n, h, w := 3, 64, 128
	a := make([]byte, n*h*w*3)
	for i := range a {
		a[i] = byte(40 + 70*(i%3))
	}
	out, err := m.Interpolate(a, a, n, h, w, []float64{0.1, 0.5, 0.9})
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if out[i] != a[i] {
			t.Fatalf("byte %d = %d, want %d", i, out[i], a[i])
		}
	}
	if _, err := m.Interpolate(a, a, n, h, w, []float64{0, 0.5, 1}); err == nil {
		t.Error("fractions 0 and 1 must be refused")
	}
}

// TestBindErrorsNameTheTensor: a missing tensor and a misshapen one are reported by name and shape.
func TestBindErrorsNameTheTensor(t *testing.T) {
	pt, _ := tinySources(t)
	gone, bad := "module.block2.convblock.3.conv.weight", "module.encode.cnn1.bias"
	src := &testutil.EditSource{Base: pt, Hide: func(n string) bool { return n == gone },
		Replace: map[string]safetensors.Info{bad: {DType: safetensors.F32, Shape: []int{3}, Data: make([]byte, 12)}}}
	_, err := Load(testutil.Backend(t), src, dtypes.Float32)
	if err == nil {
		t.Fatal("a checkpoint with a missing and a misshapen tensor loaded")
	}
	for _, want := range []string{"block2.convblock.3.conv.weight [8 8 3 3]", "encode.cnn1.bias: checkpoint shape [3], model expects [16]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, _, err := Detect(weights.MapSource{}); err == nil || !strings.Contains(err.Error(), "block0.lastconv") {
		t.Errorf("Detect of an empty source: %v", err)
	}
}

// TestCheckBeforeLoading: Check passes both released layouts whole and refuses, from the headers
// alone, a checkpoint with a missing, a misshapen or a non-float tensor, naming them.
func TestCheckBeforeLoading(t *testing.T) {
	pt, mlx := tinySources(t)
	for _, src := range []weights.Source{pt, mlx} {
		if err := Check(src); err != nil {
			t.Errorf("a whole checkpoint: %v", err)
		}
	}
	gone, bad, ints := "module.block2.convblock.3.conv.weight", "module.encode.cnn1.bias", "module.block0.lastconv.0.bias"
	info, _ := pt.Tensor(ints)
	src := &testutil.EditSource{Base: pt, Hide: func(n string) bool { return n == gone },
		Replace: map[string]safetensors.Info{bad: {DType: safetensors.F32, Shape: []int{3}, Data: make([]byte, 12)},
			ints: {DType: safetensors.I32, Shape: info.Shape, Data: make([]byte, 4*info.NumElements())}}}
	err := Check(src)
	for _, want := range []string{"block2.convblock.3.conv.weight missing", "encode.cnn1.bias is [3]", "block0.lastconv.0.bias is I32"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v; want it to say %q", err, want)
		}
	}
}
