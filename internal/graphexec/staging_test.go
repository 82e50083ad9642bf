package graphexec

import (
	"errors"
	"slices"
	"testing"
	"unsafe"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
)

// fakePinner is a backend that can "register" host memory, as the GPU build's XLA backend can; it
// counts what is registered and can be told to refuse.
type fakePinner struct {
	compute.Backend
	refuse error
	live   map[uintptr]int
	pins   int
}

func (f *fakePinner) PinHostMemory(data unsafe.Pointer, size int) (func() error, error) {
	if f.refuse != nil {
		return nil, f.refuse
	}
	if f.live == nil {
		f.live = map[uintptr]int{}
	}
	f.pins++
	f.live[uintptr(data)] = size
	return func() error { delete(f.live, uintptr(data)); return nil }, nil
}

// A large output crosses through a registered region and comes back whole; the region is reused by
// the next output, registered once; a backend that refuses to register falls back to the direct copy.
func TestTakeStaged(t *testing.T) {
	if !canMapHost {
		t.Skip("no anonymous mappings on this system")
	}
	b := testutil.Backend(t)
	e := MustExec(b, "test.ramp", func(in []*Node) []*Node { return []*Node{AddScalar(in[0], 1)} })
	defer FinalizeExecs(e)
	n := stageMinBytes/4 + 12345
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i % 1000)
	}
	want := make([]float32, n)
	for i, v := range in {
		want[i] = v + 1
	}
	pinner := &fakePinner{Backend: b}
	for round := range 3 {
		o, err := Call1(e, tensors.FromFlatDataAndDimensions(in, n))
		if err != nil {
			t.Fatal(err)
		}
		buf, err := o.Buffer(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		staged, err := takeStaged(pinner, buf, n, func(v []float32) { copy(got, v) })
		o.FinalizeAll()
		if !staged || err != nil || !slices.Equal(got, want) {
			t.Fatalf("round %d: staged %v, err %v, equal %v", round, staged, err, slices.Equal(got, want))
		}
	}
	if pinner.pins != 1 || len(pinner.live) != 1 {
		t.Errorf("%d registrations, %d live; want one region reused", pinner.pins, len(pinner.live))
	}
	if bytes, err := PinnedStaging(pinner); err != nil || bytes != stageRound {
		t.Errorf("PinnedStaging = %d, %v; want %d, nil", bytes, err, stageRound)
	}
	if _, err := PinnedStaging(b); err == nil {
		t.Error("the go backend cannot pin: PinnedStaging must say so")
	}

	refusing := &fakePinner{Backend: b, refuse: errors.New("no DmaMap")}
	o, err := Call1(e, tensors.FromFlatDataAndDimensions(in, n))
	if err != nil {
		t.Fatal(err)
	}
	defer o.FinalizeAll()
	buf, err := o.Buffer(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if staged, _ := takeStaged(refusing, buf, n, func([]float32) { t.Error("consume called without a region") }); staged {
		t.Error("a backend that refuses to register must not stage")
	}
	if _, err := PinnedStaging(refusing); err == nil || err.Error() != "no DmaMap" {
		t.Errorf("PinnedStaging after a refusal: %v, want the refusal", err)
	}
}

// Take and TakeF32 (float32, and bfloat16 widened straight out of the region) return the device
// values whole when the backend stages.
func TestTakeThroughStaging(t *testing.T) {
	if !canMapHost {
		t.Skip("no anonymous mappings on this system")
	}
	b := testutil.Backend(t)
	pinner := &fakePinner{Backend: b}
	saved := asPinner
	asPinner = func(compute.Backend) (hostPinner, bool) { return pinner, true }
	defer func() { asPinner = saved; stagingPools.Delete(b) }()
	out, want := rampOutputs(t, b, stageMinBytes/2+7) // its bfloat16 copy is still over stageMinBytes
	f32, err := Take[float32](out[0])
	if err != nil || !slices.Equal(f32, want) {
		t.Errorf("Take: equal %v, %v", slices.Equal(f32, want), err)
	}
	widened, err := TakeF32(out[1])
	if err != nil || !slices.Equal(widened, want) {
		t.Errorf("TakeF32 of bfloat16: equal %v, %v", slices.Equal(widened, want), err)
	}
	if pinner.pins == 0 {
		t.Error("nothing was staged")
	}
}

// The pool keeps its registered bytes under stageMaxBytes, dropping free regions to make room, and
// hands out the smallest free region that fits.
func TestStagingPoolBounds(t *testing.T) {
	if !canMapHost {
		t.Skip("no anonymous mappings on this system")
	}
	pinner := &fakePinner{}
	p := &stagingPool{pinner: pinner}
	small, big := p.get(1), p.get(3*stageRound)
	if small == nil || big == nil || len(small.mem) != stageRound || len(big.mem) != 3*stageRound {
		t.Fatalf("regions %v %v", small, big)
	}
	p.put(big)
	p.put(small)
	if r := p.get(stageRound / 2); r != small {
		t.Error("the smallest free region that fits must be reused")
	} else {
		p.put(r)
	}
	huge := p.get(stageMaxBytes - stageRound)
	if huge == nil {
		t.Fatal("a region up to the bound must be made once free ones are dropped")
	}
	live := 0
	for _, n := range pinner.live {
		live += n
	}
	if p.pinned > stageMaxBytes || live != p.pinned {
		t.Errorf("pool counts %d bytes, %d registered; want them equal and at most %d", p.pinned, live, stageMaxBytes)
	}
	if r := p.get(2 * stageRound); r != nil {
		t.Error("no region may be made past the bound while the big one is in use")
	}
	p.mu.Lock()
	p.release(huge)
	p.mu.Unlock()
}
