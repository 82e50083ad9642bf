package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// Helpers every benchmark uses the same way: dtype flags, random inputs, the timing loop, the
// device and host memory probes, and the output summary.

// parseDType reads a compute-dtype flag value: bf16 (bfloat16) or f32 (float32).
func parseDType(flagName, v string) (dtypes.DType, error) {
	dt, err := dtypeOf(v)
	if err != nil {
		return dt, badFlag("-%s %w", flagName, err)
	}
	return dt, nil
}

func dtypeOf(v string) (dtypes.DType, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "bf16", "bfloat16":
		return dtypes.BFloat16, nil
	case "f32", "float32":
		return dtypes.Float32, nil
	}
	return dtypes.InvalidDType, fmt.Errorf("%q is not bf16 or f32", v)
}

// ditFlags are the flags both DiT benchmarks take, each named -<bench>-<flag>: the video size, the
// text rows, the depth, the compute dtype and the CPU smoke-test shrink.
type ditFlags struct {
	bench                               string
	height, width, frames, text, layers *int
	dtypeName                           *string
	tiny                                *bool
}

// newDiTFlags registers a DiT benchmark's flags; sizeRule and framesRule say which sizes the model
// takes, textHelp what the text rows are.
func newDiTFlags(bench, sizeRule string, frames int, framesRule string, text int, textHelp string) ditFlags {
	name := func(flag string) string { return bench + "-" + flag }
	return ditFlags{
		bench:     bench,
		height:    flag.Int(name("height"), 480, bench+": video height in pixels"+sizeRule),
		width:     flag.Int(name("width"), 832, bench+": video width in pixels"+sizeRule),
		frames:    flag.Int(name("frames"), frames, bench+": pixel frames "+framesRule),
		text:      flag.Int(name("text"), text, bench+": "+textHelp),
		layers:    flag.Int(name("layers"), 0, bench+": blocks (0: the model's own; fewer only for smoke tests)"),
		dtypeName: flag.String(name("dtype"), "bf16", bench+": compute dtype, bf16 or f32"),
		tiny:      flag.Bool(name("tiny"), false, bench+": shrink the widths (CPU smoke test of the program only)"),
	}
}

// dtype reads -<bench>-dtype.
func (f ditFlags) dtype() (dtypes.DType, error) { return parseDType(f.bench+"-dtype", *f.dtypeName) }

// parseList reads a comma-separated flag value, each item with parse.
func parseList[T any](flagName, v string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range strings.Split(v, ",") {
		x, err := parse(strings.TrimSpace(s))
		if err != nil {
			return nil, badFlag("-%s %q: %w", flagName, v, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// parseDTypes reads a comma-separated list of compute dtypes (see parseDType).
func parseDTypes(flagName, v string) ([]dtypes.DType, error) {
	return parseList(flagName, v, dtypeOf)
}

// intAtLeast parses an integer of at least least.
func intAtLeast(least int) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < least {
			return 0, fmt.Errorf("%q is not an integer of at least %d", s, least)
		}
		return n, nil
	}
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

// timeForward is timeRuns of a forward pass, keeping its last output; when tag is -profile-window's,
// one more forward runs inside the profiler range.
func timeForward[O any](c common, tag string, forward func() (O, error)) (timing, O, error) {
	var out O
	run := func() error {
		var err error
		out, err = forward()
		return err
	}
	tm, err := timeRuns(c.Warmup, c.Iters, run)
	if err == nil {
		err = c.Window.bracket(tag, tm.Median(), run)
	}
	return tm, out, err
}

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

// h200DenseTFLOPS is the H200's dense bf16 tensor-core peak, the yardstick of the DiT benchmarks.
const h200DenseTFLOPS = 790

// reportForward prints a DiT forward's measurement under tag: the first (compiling) run, the timed runs
// with the throughput of tflop per forward against the H200 peak, the memory peaks, and the rms of the
// output named what.
func reportForward(tag string, tm timing, tflop float64, what string, out []float32) {
	med := tm.Median()
	rms, nan := rmsNonFinite(out)
	fmt.Printf("%s: first forward (compile + run) %.2f s -> compile ~%.2f s\n", tag, tm.First, tm.First-med)
	fmt.Printf("%s: forward min %.3f s, median %.3f s over %d runs; %.1f TFLOP -> %.0f TFLOP/s (%.0f%% of %d)\n",
		tag, tm.Min(), med, len(tm.Sorted), tflop, tflop/med, 100*tflop/med/h200DenseTFLOPS, h200DenseTFLOPS)
	fmt.Printf("%s: peak device memory %d MiB (nvidia-smi, this process), peak host RSS %d MiB; %s rms %.4f, non-finite %d\n",
		tag, tm.PeakGPU, tm.PeakHost, what, rms, nan)
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

// gpuMemMiB reads this process's device memory from nvidia-smi (MiB), or -1 when unavailable; on several
// GPUs (one line each), the largest: the memory a tensor-parallel run must fit per device.
func gpuMemMiB() int {
	out, err := exec.Command("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return -1
	}
	pid := strconv.Itoa(os.Getpid())
	most := -1
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, ",")
		if len(f) == 2 && strings.TrimSpace(f[0]) == pid {
			if v, err := strconv.Atoi(strings.TrimSpace(f[1])); err == nil {
				most = max(most, v)
			}
		}
	}
	return most
}

// allocatorStats describes device 0's XLA allocator: the bytes its live buffers hold now and their
// peak since the backend was created (PJRT_Device_MemoryStats, what torch's max_memory_allocated is
// to PyTorch), or "unavailable" where the binary's go-xla lacks the call (bench/goxla-memstats.patch
// adds it; bench/build_gpu.sh builds with it) or the backend is not XLA. nvidia-smi cannot
// stand in: XLA's pool grows by doubling regions up to its memory fraction and never shrinks.
func allocatorStats(b compute.Backend) string {
	s, ok := b.(interface {
		DeviceMemoryStats(compute.DeviceNum) (inUse, peak int64, err error)
	})
	if !ok {
		return "allocator stats unavailable (go-xla without bench/goxla-memstats.patch)"
	}
	inUse, peak, err := s.DeviceMemoryStats(0)
	if err != nil || peak < 0 {
		return fmt.Sprintf("allocator stats unavailable (%v, peak %d)", err, peak)
	}
	return fmt.Sprintf("allocator in use %.2f GiB, peak %.2f GiB", float64(inUse)/(1<<30), float64(peak)/(1<<30))
}

// gpuPeak polls gpuMemMiB until stopped and reports the largest value seen.
type gpuPeak struct {
	stop chan struct{}
	done chan int
}

func startGPUPeak() *gpuPeak {
	p := &gpuPeak{stop: make(chan struct{}), done: make(chan int, 1)}
	go func() {
		peak := gpuMemMiB()
		for {
			select {
			case <-p.stop:
				p.done <- max(peak, gpuMemMiB())
				return
			case <-time.After(25 * time.Millisecond):
				peak = max(peak, gpuMemMiB())
			}
		}
	}()
	return p
}

func (p *gpuPeak) Stop() int { close(p.stop); return <-p.done }

// hostPeakMiB resets (reset=true) or reads the process's resident-set high-water mark (Linux).
func hostPeakMiB(reset bool) int {
	if reset {
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
		return 0
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.Atoi(f[1])
				return kb / 1024
			}
		}
	}
	return -1
}

// randomOnDevice draws count tensors of randn's n values each, shaped dims, and puts them on the device
// in dtype dt, converted there by a program of their own so that the timed programs take them as a
// model's layers do.
func randomOnDevice(b compute.Backend, dt dtypes.DType, randn func(n int) []float32, count, n int, dims ...int) ([]*tensors.Tensor, error) {
	convert, err := NewExec(b, func(x *Node) *Node { return ConvertDType(x, dt) })
	if err != nil {
		return nil, err
	}
	defer convert.Finalize()
	out := make([]*tensors.Tensor, 0, count)
	for range count {
		x := tensors.FromFlatDataAndDimensions(randn(n), dims...)
		t, err := convert.Call1(x)
		x.FinalizeAll()
		if err != nil {
			for _, t := range out {
				t.FinalizeAll()
			}
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
