package fastvideo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/fastvideo/api"
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
	g := overTwoDevices(t, newTiny)
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
	checkPlanRow(t, g, Request{Prompt: "a red fox"},
		"2, DiT tensor-parallel (1 heads and FFN 128 each; shard k on device k, one SPMD program per joint block, 2 all-reduces), video VAE clip i on device i mod 2 (a decoder replica on each); per device 24.00 GiB = DiT shard")
}

// overTwoDevices opens a generator with open(opts...), closed when the test ends, and lays it out over two
// devices (on the one-device test backend: the split's reference path).
func overTwoDevices(t *testing.T, open func(...Option) (*VideoGenerator, error), opts ...Option) *VideoGenerator {
	t.Helper()
	g, err := open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.engine.Devices = 2
	if g.devices, err = planDevices(g.engine, g.comps); err != nil {
		t.Fatal(err)
	}
	return g
}

// checkPlanRow fails unless g's plan table for req contains want.
func checkPlanRow(t *testing.T, g *VideoGenerator, req Request, want string) {
	t.Helper()
	plan, err := g.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := plan.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), want) {
		t.Errorf("the plan table does not show %q:\n%s", want, table.String())
	}
}

// Wan splits over two devices only where there is classifier-free guidance to split, and not the 14B;
// a CFG model's plan holds the whole DiT on each device and is refused where that does not fit.
func TestPlanDevicesWan(t *testing.T) {
	const gib = int64(1) << 30
	seed := int64(1)
	open := func(name string, devices int) (*family.Engine, family.Components) {
		m, err := lookup(name, Options{}.families())
		if err != nil {
			t.Fatal(err)
		}
		e := &family.Engine{Backend: testutil.Backend(t), DType: dtypes.BFloat16, Devices: devices, RandomWeights: &seed}
		comps, err := m.Open(e)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { comps.Close() })
		return e, comps
	}
	var re *RequestError
	for _, c := range []struct {
		name    string
		devices int
		want    string
	}{
		{"fastwan2.1-t2v-1.3b", 2, "without classifier-free guidance"},
		{"wan2.1-t2v-1.3b", 3, "or 2"},
	} {
		if _, err := planDevices(open(c.name, c.devices)); !errors.As(err, &re) || re.Field != "devices" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %d devices: %v, want a devices RequestError saying %q", c.name, c.devices, err, c.want)
		}
	}
	e, comps := open("wan2.1-t2v-1.3b", 2)
	dp, err := planDevices(e, comps)
	if err != nil {
		t.Fatal(err)
	}
	// The 1.3B DiT in bf16: 1.42 B params, its float32 boundary modules and norms included.
	if dp.Split != api.CFGParallel || dp.DiTShardBytes != 0 || dp.DiTReplicatedBytes < 2*gib || dp.DiTReplicatedBytes > 3*gib ||
		dp.PerDeviceBytes != dp.DiTReplicatedBytes+activationHeadroom {
		t.Errorf("device plan %+v", dp)
	}
	e.DeviceMemory = func() (uint64, uint64, error) { return uint64(60 * gib), uint64(80 * gib), nil }
	if _, err := planDevices(e, comps); !errors.As(err, &re) || !strings.Contains(err.Error(), "each device needs") {
		t.Errorf("a DiT copy larger than the free memory: %v", err)
	}
	// The 14B splits CFG-parallel too: a 14.3 B-param copy (~28.6 GB in bf16) on each device, refused
	// where it does not fit beside the activation allowance.
	e, comps = open("wan2.1-t2v-14b", 2)
	if dp, err = planDevices(e, comps); err != nil || dp.Split != api.CFGParallel || dp.DiTReplicatedBytes < 26*gib || dp.DiTReplicatedBytes > 28*gib {
		t.Errorf("wan2.1-t2v-14b on 2 devices: plan %+v, %v; want CFG-parallel with a 26-28 GiB DiT copy per device", dp, err)
	}
	e.DeviceMemory = func() (uint64, uint64, error) { return uint64(40 * gib), uint64(48 * gib), nil }
	if _, err := planDevices(e, comps); !errors.As(err, &re) || !strings.Contains(err.Error(), "each device needs") {
		t.Errorf("the 14B's DiT copy on a 40 GiB device: %v", err)
	}
}

// A tiny-wan CFG run over two devices (on the pure-Go backend the replica shares the DiT's weights on
// device 0, the two forwards of each step still running at once) gives the one-device latents bit
// for bit under either memory policy, loads the replica beside the DiT, and its plan shows the layout.
func TestCFGParallelGeneration(t *testing.T) {
	req := Request{Prompt: "a red fox", Preset: "tiny_wan_t2v", NumInferenceSteps: 2}
	ref := latentsOnly(t, tinyWanGenerator(t), req)
	for mem, wantLoads := range map[MemoryPolicy]string{
		OneResident: "tokenizer text_encoder dit dit_replica tokenizer text_encoder dit dit_replica",
		AllResident: "tokenizer dit text_encoder dit_replica", // the DiT preloads beside the prompt's encoding
	} {
		g := overTwoDevices(t, newTinyWan, WithMemoryPolicy(mem))
		var loaded []string
		g.loadHook = func(c string) { loaded = append(loaded, c) }
		for i := range 2 {
			res := latentsOnly(t, g, req)
			if !testutil.SameBits(res.Latents.Video, ref.Latents.Video) {
				t.Fatalf("%s run %d: the CFG-parallel latents differ from the one-device ones", mem, i)
			}
		}
		if got := strings.Join(loaded, " "); got != wantLoads {
			t.Errorf("%s: loads over two generations %q, want %q", mem, got, wantLoads)
		}
		checkPlanRow(t, g, req,
			"2, CFG-parallel (conditional forwards on device 0, unconditional at the same time on device 1 with a DiT replica); per device 24.00 GiB = DiT 0.00")
	}
}
