package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/compute/dtypes"
)

// Helpers every benchmark uses the same way: dtype flags, random inputs, the timing loop and the
// output summary.

// parseDType reads a compute-dtype flag value: bf16 (bfloat16) or f32 (float32).
func parseDType(flagName, v string) (dtypes.DType, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "bf16", "bfloat16":
		return dtypes.BFloat16, nil
	case "f32", "float32":
		return dtypes.Float32, nil
	}
	return dtypes.InvalidDType, fmt.Errorf("-%s %q is not bf16 or f32", flagName, v)
}

// randnSource returns a generator of standard-normal float32 inputs: stream separates the inputs of
// different benchmarks drawn from one -seed.
func randnSource(seed, stream uint64) func(n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, stream))
	return func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
}

// timing is one benchmark's measurement: a first run (compilation included), untimed warm-up runs,
// then the timed runs, with the memory high-water marks over all of them.
type timing struct {
	First  float64   // seconds
	Sorted []float64 // the timed runs, seconds, ascending
	// PeakGPU is this process's device memory peak (nvidia-smi, MiB; -1 unavailable), PeakHost the
	// process's resident-set peak (MiB).
	PeakGPU, PeakHost int
}

func (t timing) Min() float64    { return t.Sorted[0] }
func (t timing) Median() float64 { return t.Sorted[len(t.Sorted)/2] }

// timeRuns runs run once, warmup more times untimed, then iters timed times.
func timeRuns(warmup, iters int, run func() error) (timing, error) {
	var t timing
	timed := func() (float64, error) {
		t0 := time.Now()
		err := run()
		return time.Since(t0).Seconds(), err
	}
	hostPeakMiB(true)
	gp := startGPUPeak()
	first, err := timed()
	if err != nil {
		gp.Stop()
		return t, err
	}
	for range warmup {
		if _, err := timed(); err != nil {
			gp.Stop()
			return t, err
		}
	}
	times := make([]float64, iters)
	for i := range times {
		if times[i], err = timed(); err != nil {
			gp.Stop()
			return t, err
		}
	}
	t.PeakGPU = gp.Stop()
	t.PeakHost = hostPeakMiB(false)
	t.First = first
	slices.Sort(times)
	t.Sorted = times
	return t, nil
}

// rmsNonFinite is the root mean square of the finite values of v (over len(v)) and the count of the
// others.
func rmsNonFinite(v []float32) (rms float64, nonFinite int) {
	var ss float64
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			nonFinite++
			continue
		}
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss / float64(max(1, len(v)))), nonFinite
}
