package fastvideo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/fastvideo/family"
	"fastvideo/internal/testutil"
)

// More than one device is refused before anything loads where the backend has fewer (the pure-Go
// backend has one), and a count below one at once.
func TestDevicesRefused(t *testing.T) {
	var re *RequestError
	if _, err := New(context.Background(), "tiny-h3", WithDevices(0)); !errors.As(err, &re) || re.Field != "devices" {
		t.Errorf("WithDevices(0): %v, want a devices RequestError", err)
	}
	_, err := New(context.Background(), "tiny-h3", WithDevices(2), WithBackend("go:ops_sequential"))
	if !errors.As(err, &re) || re.Field != "devices" || !strings.Contains(err.Error(), "has 1") {
		t.Errorf("2 devices on the go backend: %v, want a devices RequestError naming its one device", err)
	}
}

// planDevices splits tiny-h3's DiT (2 heads, FFN 256) two ways and says when a device's share does not
// fit before loading.
func TestPlanDevices(t *testing.T) {
	const gib = int64(1) << 30
	m, err := lookup("tiny-h3", Options{}.families())
	if err != nil {
		t.Fatal(err)
	}
	e := &family.Engine{Backend: testutil.Backend(t), DType: dtypes.Float32, Devices: 2}
	comps, err := m.Open(e)
	if err != nil {
		t.Fatal(err)
	}
	defer comps.Close()
	dp, err := planDevices(e, comps)
	if err != nil {
		t.Fatal(err)
	}
	if dp.Devices != 2 || dp.LocalHeads != 1 || dp.LocalFFN != 128 || dp.DiTShardBytes <= 0 || dp.DiTReplicatedBytes <= 0 ||
		dp.VideoVAEBytes <= 0 || dp.PerDeviceBytes != dp.DiTShardBytes+dp.DiTReplicatedBytes+dp.VideoVAEBytes+activationHeadroom {
		t.Errorf("device plan %+v", dp)
	}
	var re *RequestError
	e.DeviceMemory = func() (uint64, uint64, error) { return uint64(gib), uint64(20 * gib), nil }
	if _, err := planDevices(e, comps); !errors.As(err, &re) || re.Field != "devices" || !strings.Contains(err.Error(), "each device needs") {
		t.Errorf("a share larger than the free memory: %v, want a devices RequestError saying what each device needs", err)
	}
	e.DeviceMemory = func() (uint64, uint64, error) { return 0, uint64(64 * gib), nil }
	if _, err := planDevices(e, comps); err != nil {
		t.Errorf("a share that fits: %v", err)
	}
	e.Devices = 3
	if _, err := planDevices(e, comps); !errors.As(err, &re) || re.Field != "devices" || !strings.Contains(err.Error(), "2 attention heads") {
		t.Errorf("3 devices for 2 heads: %v", err)
	}
	e.Devices = 2
	if _, err := planDevices(e, sizedComponents{}); !errors.As(err, &re) || re.Field != "devices" {
		t.Errorf("a model that does not split: %v", err)
	}
}

// A generation whose DiT is split two ways (the shards run on the one device, their partial outputs
// summed) gives the one-device latents within the parity tolerance, and its plan carries the layout.
func TestShardedGeneration(t *testing.T) {
	g, err := newTiny()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.engine.Devices = 2
	if g.devices, err = planDevices(g.engine, g.comps); err != nil {
		t.Fatal(err)
	}
	ref := seed7Latents(t)
	res := latentsOnly(t, g, Request{Prompt: "a red fox", Seed: Ptr[int64](7)})
	testutil.AssertClose(t, "video latents", res.Latents.Video, ref.Video, []int{len(ref.Video)}, testutil.ParityTol(ref.Video))
	testutil.AssertClose(t, "audio latents", res.Latents.Audio, ref.Audio, []int{len(ref.Audio)}, testutil.ParityTol(ref.Audio))
	if testutil.SameBits(res.Latents.Video, ref.Video) {
		t.Error("the split DiT gave bit-identical latents: the shards did not run")
	}
	if res.Plan == nil || res.Plan.Devices == nil || res.Plan.Devices.Devices != 2 {
		t.Errorf("the run's plan does not carry the 2-device layout: %+v", res.Plan)
	}
	plan, err := g.Plan(Request{Prompt: "a red fox"})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := plan.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "2, DiT tensor-parallel (1 heads and FFN 128 each; shard k on device k, one SPMD program per joint block, 2 all-reduces), video VAE clip i on device i mod 2 (a decoder replica on each); per device 20.00 GiB = DiT shard") {
		t.Errorf("the plan table does not show the device layout:\n%s", table.String())
	}
}
