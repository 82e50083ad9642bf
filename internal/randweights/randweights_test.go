package randweights

import (
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// TestFillRandom: the same seed gives the same values, another seed others; draw's scale and offset
// apply; uint32 words are drawn too.
func TestFillRandom(t *testing.T) {
	b := testutil.Backend(t)
	draw := func(seed int64) *weights.Set {
		s := weights.NewSet("")
		s.Add("m.weight", 64, 32)
		s.AddF32("n.weight", 4096)
		s.AddTyped("q.words", dtypes.Uint32, 8)
		err := FillRandom(b, s, dtypes.BFloat16, seed, func(p *weights.Param) (float32, float32) {
			if p.Name == "n.weight" {
				return 0.1, 1
			}
			return 1 / float32(math.Sqrt(float64(FanIn(p.Shape)))), 0
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, a2, c := draw(3), draw(3), draw(4)
	defer a.Release()
	defer a2.Release()
	defer c.Release()
	for i, p := range a.Params() {
		if p.T.DType() != []dtypes.DType{dtypes.BFloat16, dtypes.Float32, dtypes.Uint32}[i] {
			t.Errorf("%s has dtype %s", p.Name, p.T.DType())
		}
		same := p.T.Equal(a2.Params()[i].T)
		other := p.T.Equal(c.Params()[i].T)
		if !same || other {
			t.Errorf("%s: same seed equal %v (want true), other seed equal %v (want false)", p.Name, same, other)
		}
	}
	n, _ := graphexec.HostF32(a.Params()[1].T)
	var mean float64
	for _, x := range n {
		mean += float64(x) / float64(len(n))
	}
	if math.Abs(mean-1) > 0.01 {
		t.Errorf("n.weight mean %.4f, want 1 ± 0.01 (offset 1, scale 0.1)", mean)
	}
}

func TestFixtureDraw(t *testing.T) {
	for _, c := range []struct {
		name          string
		shape         []int
		scale, offset float32
	}{
		{"a.bias", []int{8}, 0.05, 0},
		{"a.weight", []int{8, 16}, 0.25, 0},
		{"conv.weight", []int{8, 4, 1, 2, 2}, 0.25, 0},
		{"norm.weight", []int{8}, 0.1, 1},
	} {
		s, o := FixtureDraw(&weights.Param{Name: c.name, Shape: c.shape})
		if s != c.scale || o != c.offset {
			t.Errorf("%s %v: (%v, %v), want (%v, %v)", c.name, c.shape, s, o, c.scale, c.offset)
		}
	}
}
