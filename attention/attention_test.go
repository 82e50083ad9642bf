package attention

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

// refAttention is the float64 oracle: q [B,Lq,H,D], k/v [B,Lk,H,D], flat row-major.
func refAttention(q, k, v []float32, b, lq, lk, h, d int, scale float64) []float64 {
	return refMasked(q, k, v, b, lq, lk, h, d, scale, func(i, j int) bool { return true })
}

// refMasked is refAttention where query i sees key j only when allowed(i, j) (every query sees one).
func refMasked(q, k, v []float32, b, lq, lk, h, d int, scale float64, allowed func(i, j int) bool) []float64 {
	out := make([]float64, b*lq*h*d)
	s := make([]float64, lk)
	for bi := 0; bi < b; bi++ {
		for hi := 0; hi < h; hi++ {
			for i := 0; i < lq; i++ {
				mx := math.Inf(-1)
				for j := 0; j < lk; j++ {
					if !allowed(i, j) {
						s[j] = math.Inf(-1)
						continue
					}
					acc := 0.0
					for e := 0; e < d; e++ {
						acc += float64(q[((bi*lq+i)*h+hi)*d+e]) * float64(k[((bi*lk+j)*h+hi)*d+e])
					}
					s[j] = acc * scale
					mx = math.Max(mx, s[j])
				}
				sum := 0.0
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				for e := 0; e < d; e++ {
					acc := 0.0
					for j := 0; j < lk; j++ {
						acc += s[j] * float64(v[((bi*lk+j)*h+hi)*d+e])
					}
					out[((bi*lq+i)*h+hi)*d+e] = acc / sum
				}
			}
		}
	}
	return out
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

func TestExactMatchesFloat64Reference(t *testing.T) {
	backend := testutil.Backend(t)
	cases := []struct {
		name            string
		b, lq, lk, h, d int
		scale           float64
	}{
		{"self", 1, 13, 13, 2, 16, 0},
		{"cross_lq_lt_lk", 2, 7, 19, 3, 8, 0},
		{"cross_lq_gt_lk", 1, 21, 5, 2, 24, 0.3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(c.lq*100+c.lk)))
			q := randn(r, c.b*c.lq*c.h*c.d, 1.5)
			k := randn(r, c.b*c.lk*c.h*c.d, 1.5)
			v := randn(r, c.b*c.lk*c.h*c.d, 1)
			scale := c.scale
			if scale == 0 {
				scale = 1 / math.Sqrt(float64(c.d))
			}
			exec, err := NewExec(backend, func(q, k, v *Node) *Node {
				return Attend(q, k, v, Options{Scale: c.scale, Path: PathExact})
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Call1(
				tensors.FromFlatDataAndDimensions(q, c.b, c.lq, c.h, c.d),
				tensors.FromFlatDataAndDimensions(k, c.b, c.lk, c.h, c.d),
				tensors.FromFlatDataAndDimensions(v, c.b, c.lk, c.h, c.d))
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Shape().Dimensions; got[1] != c.lq || got[3] != c.d {
				t.Fatalf("output shape %v, want [%d %d %d %d]", got, c.b, c.lq, c.h, c.d)
			}
			got := tensors.MustCopyFlatData[float32](out)
			want := refAttention(q, k, v, c.b, c.lq, c.lk, c.h, c.d, scale)
			maxErr := 0.0
			for i := range want {
				maxErr = math.Max(maxErr, math.Abs(float64(got[i])-want[i]))
			}
			t.Logf("max abs error vs float64 reference: %.3g", maxErr)
			if maxErr > 2e-6 {
				t.Errorf("max abs error %.3g > 2e-6", maxErr)
			}
		})
	}
}

// The exact path on bf16 inputs computes in f32 and returns bf16: the error is the output rounding only.
func TestExactBFloat16Inputs(t *testing.T) {
	backend := testutil.Backend(t)
	const b, l, h, d = 1, 9, 2, 8
	r := rand.New(rand.NewPCG(7, 7))
	q, k, v := randn(r, b*l*h*d, 1), randn(r, b*l*h*d, 1), randn(r, b*l*h*d, 1)
	toBF := func(x []float32) ([]bfloat16.BFloat16, []float32) {
		o, back := make([]bfloat16.BFloat16, len(x)), make([]float32, len(x))
		for i := range x {
			o[i] = bfloat16.FromFloat32(x[i])
			back[i] = o[i].Float32()
		}
		return o, back
	}
	qb, qr := toBF(q)
	kb, kr := toBF(k)
	vb, vr := toBF(v)
	exec := MustNewExec(backend, func(q, k, v *Node) *Node { return Attend(q, k, v, Options{Path: PathExact}) })
	out, err := exec.Call1(tensors.FromFlatDataAndDimensions(qb, b, l, h, d),
		tensors.FromFlatDataAndDimensions(kb, b, l, h, d), tensors.FromFlatDataAndDimensions(vb, b, l, h, d))
	if err != nil {
		t.Fatal(err)
	}
	if out.DType() != dtypes.BFloat16 {
		t.Fatalf("output dtype %s, want bfloat16", out.DType())
	}
	got := tensors.MustCopyFlatData[bfloat16.BFloat16](out)
	want := refAttention(qr, kr, vr, b, l, l, h, d, 1/math.Sqrt(d))
	for i := range want {
		if e := math.Abs(float64(got[i].Float32()) - want[i]); e > 8e-3*math.Max(1, math.Abs(want[i])) {
			t.Fatalf("element %d: got %v want %v", i, got[i].Float32(), want[i])
		}
	}
}

func TestPathSelection(t *testing.T) {
	backend := testutil.Backend(t)
	if p, err := Resolve(backend, dtypes.BFloat16, 128, Options{}); err != nil || p != PathExact {
		t.Errorf("auto (the zero Options) on the Go backend: got %v, %v; want exact", p, err)
	}
	if _, err := Resolve(backend, dtypes.BFloat16, 128, Options{Path: PathFused}); err == nil ||
		!strings.Contains(err.Error(), "has no fused") {
		t.Errorf("forced fused on the Go backend: want an error naming the missing kernel, got %v", err)
	}
	if p, err := Resolve(backend, dtypes.Float32, 64, Options{Path: PathExact}); err != nil || p != PathExact {
		t.Errorf("explicit exact: got %v, %v", p, err)
	}
	if _, err := Resolve(backend, dtypes.Float32, 64, Options{Path: Path(17)}); err == nil || !strings.Contains(err.Error(), "exact, fused or auto") {
		t.Errorf("unknown path: want an error listing the choices, got %v", err)
	}

	// Building a graph with the fused path forced panics with the same message; the caller recovers it.
	exec := MustNewExec(backend, func(q *Node) *Node { return Attend(q, q, q, Options{Path: PathFused}) })
	_, err := exec.Call1(tensors.FromFlatDataAndDimensions(make([]float32, 2*4*8), 1, 2, 4, 8))
	if err == nil || !strings.Contains(err.Error(), "fused path forced") {
		t.Errorf("graph build with forced fused path: want error, got %v", err)
	}
}

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Path
	}{{"", PathAuto}, {"auto", PathAuto}, {" Exact ", PathExact}, {"FUSED", PathFused}} {
		if got, err := ParsePath(c.in); err != nil || got != c.want {
			t.Errorf("ParsePath(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := ParsePath("fast"); err == nil || !strings.Contains(err.Error(), EnvVar) || !strings.Contains(err.Error(), "exact, fused or auto") {
		t.Errorf("ParsePath(fast): want an error naming %s and the choices, got %v", EnvVar, err)
	}
	for _, p := range []Path{PathAuto, PathExact, PathFused} {
		if got, err := ParsePath(p.String()); err != nil || got != p {
			t.Errorf("ParsePath(%v.String()) = %v, %v", p, got, err)
		}
	}
}
