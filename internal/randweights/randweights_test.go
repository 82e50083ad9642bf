package randweights

import (
	"errors"
	"math"
	"strings"
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

// A parameter's AfterBind runs as soon as it is drawn, before the next parameter is drawn, and its
// error names the parameter.
func TestFillRandomRunsAfterBind(t *testing.T) {
	b := testutil.Backend(t)
	s := weights.NewSet("")
	first, second := s.Add("first.weight", 8, 4), s.Add("second.weight", 8, 4)
	defer s.Release()
	draw := func(p *weights.Param) (float32, float32) { return 1, 0 }
	var secondDrawnFirst bool
	first.AfterBind = func(*weights.Param) error {
		secondDrawnFirst = second.Bound()
		return nil
	}
	if err := FillRandom(b, s, dtypes.Float32, 1, draw); err != nil {
		t.Fatal(err)
	}
	if secondDrawnFirst || !first.Bound() || !second.Bound() {
		t.Errorf("second drawn before first's AfterBind: %v; bound: %v %v", secondDrawnFirst, first.Bound(), second.Bound())
	}
	s2 := weights.NewSet("")
	defer s2.Release()
	s2.Add("only.weight", 2).AfterBind = func(*weights.Param) error { return errors.New("refused") }
	if err := FillRandom(b, s2, dtypes.Float32, 1, draw); err == nil || !strings.Contains(err.Error(), "after drawing only.weight: refused") {
		t.Errorf("a failing AfterBind: %v", err)
	}
}

// Fill compiles every distinct dtype and shape of a set before it draws (several at once), so that no
// draw waits for a compile: the calls compile nothing, and each shape is compiled once.
func TestFillCompilesAheadOfTheDraws(t *testing.T) {
	b := testutil.Backend(t)
	s := weights.NewSet("")
	defer s.Release()
	s.Add("a.weight", 6, 5)
	s.Add("b.weight", 6, 5)
	s.Add("c.weight", 3, 7)
	s.AddF32("d.weight", 9)
	s.AddTyped("e.words", dtypes.Uint32, 4)
	programs0, _ := graphexec.Compiles()
	byCalls0 := graphexec.CallCompiles()
	if err := FillRandom(b, s, dtypes.BFloat16, 1, FixtureDraw); err != nil {
		t.Fatal(err)
	}
	programs, _ := graphexec.Compiles()
	if got := programs - programs0; got != 4 {
		t.Errorf("compiled %d programs for 4 distinct dtypes and shapes", got)
	}
	if got := graphexec.CallCompiles() - byCalls0; got != 0 {
		t.Errorf("%d draws compiled their program themselves; want every one compiled ahead", got)
	}
}
