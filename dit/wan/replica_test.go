package wan

import (
	"strings"
	"testing"

	"github.com/gomlx/compute"

	"fastvideo/internal/testutil"
)

// forwardPair runs a forward of a and one of b at the same time (the CFG-parallel step's two
// branches) on in, each with its own text state.
func forwardPair(t *testing.T, a, b *Model, in ForwardInputs) (outA, outB []float32) {
	t.Helper()
	type result struct {
		out []float32
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.Forward(in)
		done <- result{out, err}
	}()
	outA, errA := a.Forward(in)
	r := <-done
	if errA != nil || r.err != nil {
		t.Fatalf("forwards: %v, %v", errA, r.err)
	}
	return outA, r.out
}

// A replica on the model's own device (the CPU reference of the CFG-parallel step) shares the weights
// and, run at the same time as the model, gives its output bit for bit; closing it leaves the model
// whole. A replica on a device the backend does not have is refused.
func TestReplicaSameDevice(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		in := fixtureInputs(t, fx)
		want := mustForward(t, m, in)
		r, err := m.Replica(0)
		if err != nil {
			t.Fatal(err)
		}
		if !r.sharesWeights || r.Device() != 0 {
			t.Errorf("a replica on device 0 of a device-0 model: shares %v, device %d", r.sharesWeights, r.Device())
		}
		for range 2 {
			got, gotR := forwardPair(t, m, r, in)
			if !testutil.SameBits(got, want) || !testutil.SameBits(gotR, want) {
				t.Fatal("concurrent forwards of the model and its replica differ from the model's forward alone")
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if got, err := m.Forward(in); err != nil || !testutil.SameBits(got, want) {
			t.Fatalf("the model after its replica closed: %v", err)
		}
		n := m.backend.NumDevices()
		if _, err := m.Replica(compute.DeviceNum(n)); err == nil || !strings.Contains(err.Error(), "device(s)") {
			t.Errorf("a replica on device %d of a %d-device backend: %v, want a refusal", n, n, err)
		}
	})
}
