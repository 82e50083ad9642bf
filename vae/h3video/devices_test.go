package h3video

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// laneLatents are random latent frames over the fixture's canvas: at least 5 clips and a padded tail.
func laneLatents(t *testing.T, fx *testutil.Fixture) ([]float32, []int) {
	_, shape := fx.F32(t, "in.latents_normalized")
	s := []int{1, shape[1], 25, shape[3], shape[4]}
	if plan, err := fixtureConfig(t, fx).Plan(s[2]); err != nil || plan.Chunks < 5 {
		t.Fatalf("%d latent frames make %+v (%v); the lane tests want at least 5 clips", s[2], plan, err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	z := make([]float32, s[1]*s[2]*s[3]*s[4])
	for i := range z {
		z[i] = float32(rng.NormFloat64())
	}
	return z, s
}

// addLanes gives d extra lanes on device 0 (the pure-Go backend has one device): they share the
// weights but decode their clips in goroutines of their own, as the lanes of several GPUs do.
func addLanes(t *testing.T, d *Decoder, extra int) {
	for range extra {
		r, err := d.newReplica(0)
		if err != nil {
			t.Fatal(err)
		}
		d.replicas = append(d.replicas, r)
	}
}

// TestClipLanes decodes over 2 and 3 lanes: clip i must be stitched by lane i mod N, clips finishing
// out of order (lane 0 held back on its first clip) must still stream in order, and the frames must
// equal the one-lane decode bit for bit.
func TestClipLanes(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		r := fixtureConfig(t, fx).SpatialRatio()
		opts := Options{TileSize: 3 * r, TileOverlap: r, TileBatch: 2}
		z, s := laneLatents(t, fx)
		want, _ := collect(t, openDecoder(t, fx, opts), z, s)
		for _, lanes := range []int{2, 3} {
			d := openDecoder(t, fx, opts)
			addLanes(t, d, lanes-1)
			var mu sync.Mutex
			var done []int
			byLane := make([][]int, lanes)
			another := make(chan struct{}) // closed when a clip other than 0 has finished
			var once sync.Once
			d.clipHook = func(lane, clip int) {
				if lane == 0 && clip == 0 {
					// Lane 0 holds clip 0 until another lane finishes one (bounded, should lanes not run
					// at once): a busy machine cannot reorder them as a fixed sleep would let it.
					select {
					case <-another:
					case <-time.After(10 * time.Second):
					}
				}
				mu.Lock()
				done = append(done, clip)
				byLane[lane] = append(byLane[lane], clip)
				mu.Unlock()
				if clip != 0 {
					once.Do(func() { close(another) })
				}
			}
			got, _ := collect(t, d, z, s)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%d lanes: frames differ from one lane by %g", lanes, testutil.Compare(got, want).MaxAbs)
			}
			for lane, clips := range byLane {
				for j, clip := range clips {
					if clip != lane+j*lanes {
						t.Errorf("%d lanes: lane %d stitched clips %v, want every %dth from %d", lanes, lane, clips, lanes, lane)
						break
					}
				}
			}
			if len(done) < 2 || done[0] == 0 {
				t.Errorf("%d lanes: clips finished in the order %v; the test means clip 0 to finish late", lanes, done)
			}
			t.Logf("%d lanes: clips finished in the order %v", lanes, done)
		}
	})
}

// TestDevicesOption refuses more devices than the backend has, before loading anything.
func TestDevicesOption(t *testing.T) {
	testutil.ForEachFixture(t, "h3_video_vae", func(t *testing.T, fx *testutil.Fixture) {
		b := testutil.Backend(t)
		for _, n := range []int{-1, b.NumDevices() + 1} {
			_, err := FromSource(b, fixtureConfig(t, fx), fx.Weights(), Options{DType: dtypes.Float32, Devices: n})
			if err == nil || !strings.Contains(err.Error(), "Options.Devices") {
				t.Errorf("Devices %d on a %d-device backend: %v, want a refusal naming Options.Devices", n, b.NumDevices(), err)
			}
		}
		d := openDecoder(t, fx, Options{Devices: b.NumDevices()})
		if d.Devices() != b.NumDevices() {
			t.Errorf("Devices() = %d, want %d", d.Devices(), b.NumDevices())
		}
	})
}
