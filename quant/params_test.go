package quant

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// TestDeclareBindLinear is the integration a model does: declare its linears from a converted
// checkpoint (quantized where the checkpoint says so), bind, feed Tensors() to an executable,
// rebuild the GraphWeight with Graph, and run Linear. The result equals the dense linear on the
// host-dequantized weight (PathDequantGEMM in f32: bit for bit).
func TestDeclareBindLinear(t *testing.T) {
	ck := convertAndOpen(t, tinySource(), Scheme{Bits: 6, GroupSize: 64}, safetensors.BF16)

	const qName, dName = "model.layers.0.q.weight", "model.proj_in.weight"
	set := weights.NewSet("")
	blk := set.Sub("model.layers.0")
	q, err := Declare(blk, "q.weight", 32, 128, SchemeOf(ck, qName))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Declare(set, dName, 64, 96, SchemeOf(ck, dName))
	if err != nil {
		t.Fatal(err)
	}
	if !q.Quantized() || q.Kind() != KindAffine || q.Name != qName || d.Quantized() || d.Kind() != KindDense {
		t.Fatalf("declared %+v and %+v", q, d)
	}
	if err := weights.Bind(ck, set, weights.Options{DType: dtypes.Float32, AllowUnexpected: true}); err != nil {
		t.Fatal(err)
	}
	defer set.Release()

	r := rand.New(rand.NewPCG(31, 32))
	x := randVec(r, 5*128)
	qa := q.Args()
	args := []any{tensors.FromFlatDataAndDimensions(x, 5, 128)}
	for _, f := range qa.Fields(q.Kind()) {
		args = append(args, *f)
	}
	out := run(t, func(in []*Node) []*Node {
		var a Args[*Node]
		for i, f := range a.Fields(KindAffine) {
			*f = in[1+i]
		}
		w := KindAffine.Graph(a, q.Scheme)
		return []*Node{Linear(in[0], w, nil, Dispatch{Path: PathDequantGEMM}), Linear(in[0], w, nil, Dispatch{Path: PathQuantized})}
	}, args...)
	a, err := ck.Affine(qName)
	if err != nil {
		t.Fatal(err)
	}
	deq, _ := a.Dequantize()
	dense := run(t, func(in []*Node) []*Node { return []*Node{Linear(in[0], DenseWeight(in[1]), nil, Dispatch{})} },
		args[0], tensors.FromFlatDataAndDimensions(deq, 32, 128))
	testutil.AssertBitExact(t, "bound quantized weight, dequant-gemm vs dense on host dequantization", f32s(t, out[0]), f32s(t, dense[0]))
	want := refLinear(x, 5, deq, 32, 128)
	testutil.AssertClose(t, "bound quantized weight, quantized path", f32s(t, out[1]), want, []int{5, 32}, testutil.ParityTol(want)/10)

	// A scheme that cannot hold the matrix is refused at declaration.
	if _, err := Declare(weights.NewSet(""), "w", 8, 96, &Scheme{Bits: 4, GroupSize: 64}); !errors.Is(err, ErrGroupSize) {
		t.Fatalf("Declare in=96: %v", err)
	}
	if SchemeOf(tinySource(), qName) != nil {
		t.Fatal("a dense source reports a quantized weight")
	}
}
