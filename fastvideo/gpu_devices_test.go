package fastvideo

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"fastvideo/internal/testutil"
)

// TestCFGParallelOnGPU generates tiny-wan's guided preset in f32 with TF32 off on one GPU, then over
// two (each step's unconditional forward on the second GPU with a copy of the DiT, at the same time as
// the conditional one on the first), and finds the latents equal within the parity tolerance, both
// memory policies. Built and run on a machine with 2 GPUs (ffmpeg on the PATH):
//
//	bash bench/build_gpu.sh -test .gpu/fastvideo.test ./fastvideo
//	FASTVIDEO_GPU_TEST=1 .gpu/fastvideo.test -test.run TestCFGParallelOnGPU -test.v
func TestCFGParallelOnGPU(t *testing.T) {
	if os.Getenv(testutil.GPUTestEnv) != "1" {
		t.Skipf("set %s=1 on a machine with 2 NVIDIA GPUs", testutil.GPUTestEnv)
	}
	req := Request{Prompt: "a red fox", Preset: "tiny_wan_t2v", NumInferenceSteps: 3}
	// One generator at a time: each holds its own XLA client and memory pool.
	run := func(devices int, mem MemoryPolicy) *Result {
		g, err := New(context.Background(), "tiny-wan", WithBackend("xla:cuda,tf32=false"), WithDType(F32),
			WithDevices(devices), WithMemoryPolicy(mem))
		var re *RequestError
		if errors.As(err, &re) && re.Field == "devices" && strings.Contains(err.Error(), "has 1") {
			t.Skipf("2 devices: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		res := latentsOnly(t, g, req)
		if devices > 1 && loadTime(res.Timings, "dit_replica") == 0 {
			t.Errorf("%s over %d devices did not load the DiT replica: %+v", mem, devices, res.Timings.Loads)
		}
		return res
	}
	want := run(1, OneResident).Latents.Video
	for _, mem := range []MemoryPolicy{OneResident, AllResident} {
		got := run(2, mem).Latents.Video
		testutil.AssertClose(t, string(mem)+" 2 GPUs vs 1", got, want, []int{len(want)}, testutil.ParityTol(want))
	}
}
