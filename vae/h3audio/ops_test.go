package h3audio

import (
	"math/rand/v2"
	"slices"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// These check the graph ops against direct loops written from torch's
// definitions, at the release's shapes the tiny fixture does not reach
// (the 9-tap stride-5 upsamplers) and with asymmetric filters (the shipped
// kaiser-sinc filters are symmetric, so a flipped index would go unnoticed).

func randVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func run2(t *testing.T, fn func(a, b *Node) *Node, a, b *tensors.Tensor) ([]float32, []int) {
	t.Helper()
	e, err := NewExec(testutil.Backend(t), fn)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	out, err := e.Call(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](out[0]), out[0].Shape().Dimensions
}

// convTransposeRef is torch.nn.functional.conv_transpose1d (weight [Cin, Cout, k]).
func convTransposeRef(x []float32, b, cin, l int, w []float32, cout, k, stride, pad int) ([]float32, int) {
	full := (l-1)*stride + k
	y := make([]float64, b*cout*full)
	for bi := range b {
		for i := range cin {
			for m := range l {
				xv := float64(x[(bi*cin+i)*l+m])
				for o := range cout {
					for j := range k {
						y[(bi*cout+o)*full+m*stride+j] += xv * float64(w[(i*cout+o)*k+j])
					}
				}
			}
		}
	}
	n := full - 2*pad
	out := make([]float32, b*cout*n)
	for bo := range b * cout {
		for t := range n {
			out[bo*n+t] = float32(y[bo*full+pad+t])
		}
	}
	return out, n
}

func TestConvTranspose1d(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ cin, cout, k, stride, l int }{
		{3, 2, 9, 5, 4}, // release stages 0-1
		{2, 3, 4, 2, 5}, // release stages 2-6
	} {
		x := randVals(r, 2*c.cin*c.l)
		w := randVals(r, c.cin*c.cout*c.k)
		pad := (c.k - c.stride) / 2
		want, n := convTransposeRef(x, 2, c.cin, c.l, w, c.cout, c.k, c.stride, pad)
		got, shape := run2(t, func(x, w *Node) *Node { return convTranspose1d(x, w, nil, c.stride, pad) },
			tensors.FromFlatDataAndDimensions(x, 2, c.cin, c.l), tensors.FromFlatDataAndDimensions(w, c.cin, c.cout, c.k))
		if n != c.stride*c.l || !slices.Equal(shape, []int{2, c.cout, n}) {
			t.Fatalf("k=%d stride=%d: shape %v, want [2 %d %d]", c.k, c.stride, shape, c.cout, c.stride*c.l)
		}
		testutil.AssertClose(t, "convTranspose1d", got, want, shape, 1e-5)
	}
}

func clampIdx(i, n int) int { return min(max(i, 0), n-1) }

// upsampleRef is BigVGAN's UpSample1d as FastVideo writes it.
func upsampleRef(x []float32, rows, l int, f []float32, ratio int) []float32 {
	k := len(f)
	pad := k/ratio - 1
	padLeft := pad*ratio + (k-ratio)/2
	lp := l + 2*pad
	full := (lp-1)*ratio + k
	out := make([]float32, rows*ratio*l)
	for r := range rows {
		y := make([]float64, full)
		for m := range lp {
			xv := float64(x[r*l+clampIdx(m-pad, l)])
			for j := range k {
				y[m*ratio+j] += xv * float64(f[j])
			}
		}
		for t := range ratio * l {
			out[r*ratio*l+t] = float32(float64(ratio) * y[padLeft+t])
		}
	}
	return out
}

// downsampleRef is BigVGAN's LowPassFilter1d (even filter) with stride ratio.
func downsampleRef(x []float32, rows, l int, f []float32, ratio int) ([]float32, int) {
	k := len(f)
	padLeft, padRight := k/2-1, k/2
	n := (l+padLeft+padRight-k)/ratio + 1
	out := make([]float32, rows*n)
	for r := range rows {
		for s := range n {
			var acc float64
			for j := range k {
				acc += float64(f[j]) * float64(x[r*l+clampIdx(s*ratio+j-padLeft, l)])
			}
			out[r*n+s] = float32(acc)
		}
	}
	return out, n
}

func TestAntiAliasResampling(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const b, c, l = 2, 3, 7
	x := randVals(r, b*c*l)
	f := randVals(r, filterTaps) // asymmetric on purpose
	xt := tensors.FromFlatDataAndDimensions(x, b, c, l)
	ft := tensors.FromFlatDataAndDimensions(f, 1, 1, filterTaps)

	got, shape := run2(t, func(x, f *Node) *Node { return upsample(x, f, 2) }, xt, ft)
	testutil.AssertClose(t, "upsample", got, upsampleRef(x, b*c, l, f, 2), shape, 1e-5)

	x2 := randVals(r, b*c*2*l)
	want, n := downsampleRef(x2, b*c, 2*l, f, 2)
	got, shape = run2(t, func(x, f *Node) *Node { return downsample(x, f, 2) },
		tensors.FromFlatDataAndDimensions(x2, b, c, 2*l), ft)
	if n != l || !slices.Equal(shape, []int{b, c, l}) {
		t.Fatalf("downsample shape %v, want [%d %d %d]", shape, b, c, l)
	}
	testutil.AssertClose(t, "downsample", got, want, shape, 1e-5)
}

func TestAdaptiveAvgPoolMatrix(t *testing.T) {
	// torch.nn.functional.adaptive_avg_pool1d bins for 5 -> 3: [0,2), [1,4), [3,5).
	w := adaptiveAvgPoolMatrix(5, 3)
	want := []float32{
		0.5, 0, 0,
		0.5, 1. / 3, 0,
		0, 1. / 3, 0,
		0, 1. / 3, 0.5,
		0, 0, 0.5,
	}
	testutil.AssertClose(t, "pool", w, want, []int{5, 3}, 0)
}
