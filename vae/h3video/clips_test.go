package h3video

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestClipAssignmentRoundRobin(t *testing.T) {
	got, err := clipAssignment(8, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 3, 6}, {1, 4, 7}, {2, 5}}
	for d := range want {
		if !slices.Equal(got[d], want[d]) {
			t.Errorf("device %d decodes clips %v, want %v", d, got[d], want[d])
		}
	}
	// Every clip exactly once, on any device count.
	for clips := 1; clips <= 9; clips++ {
		for devices := 1; devices <= 4; devices++ {
			a, err := clipAssignment(clips, devices)
			if err != nil {
				t.Fatal(err)
			}
			var all []int
			busiest := 0
			for _, l := range a {
				all = append(all, l...)
				busiest = max(busiest, len(l))
			}
			slices.Sort(all)
			if len(all) != clips || all[0] != 0 || all[len(all)-1] != clips-1 || busiest != (clips+devices-1)/devices {
				t.Errorf("%d clips over %d devices: %v (busiest %d)", clips, devices, a, busiest)
			}
		}
	}
	for _, bad := range [][2]int{{0, 2}, {3, 0}} {
		if _, err := clipAssignment(bad[0], bad[1]); err == nil {
			t.Errorf("%d clips over %d devices accepted", bad[0], bad[1])
		}
	}
}

// Clips finishing in a random order (devices racing) come out in clip order, each once.
func TestClipOrderRestoresStream(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		n := 1 + r.IntN(12)
		o := newClipOrder[int](n)
		var stream []int
		for _, i := range r.Perm(n) {
			ready, err := o.Put(i, 100+i)
			if err != nil {
				t.Fatal(err)
			}
			stream = append(stream, ready...)
		}
		if err := o.Done(); err != nil {
			t.Fatal(err)
		}
		for i, v := range stream {
			if v != 100+i {
				t.Fatalf("stream %v is not in clip order", stream)
			}
		}
		if len(stream) != n {
			t.Fatalf("%d of %d clips came out", len(stream), n)
		}
	}
}

func TestClipOrderRefuses(t *testing.T) {
	o := newClipOrder[string](3)
	if ready, err := o.Put(1, "b"); err != nil || len(ready) != 0 {
		t.Fatalf("clip 1 before clip 0: %v, %v; want it held", ready, err)
	}
	if _, err := o.Put(1, "b"); err == nil {
		t.Error("clip 1 finished twice was accepted")
	}
	if err := o.Done(); err == nil {
		t.Error("Done with clip 0 missing reported success")
	}
	if ready, err := o.Put(0, "a"); err != nil || !slices.Equal(ready, []string{"a", "b"}) {
		t.Errorf("clip 0 released %v, %v; want a, b", ready, err)
	}
	for _, i := range []int{0, 3, -1} {
		if _, err := o.Put(i, "x"); err == nil {
			t.Errorf("clip %d accepted", i)
		}
	}
}
