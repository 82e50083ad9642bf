package main

import (
	"fmt"
	"strings"
	"time"

	"fastvideo/internal/backend"
)

// profileWindow brackets one extra forward of one measurement with the CUDA driver's
// cuProfilerStart/cuProfilerStop, so that bench/kerneltrace.c (or `ncu --profile-from-start off`)
// collects exactly that forward's kernels: compilation, XLA's autotuning and the warm-up and timed
// runs stay outside.
// The forward runs after the timed runs, so the profiler's slowdown never reaches the median.
type profileWindow struct {
	tag  string // the measurement to bracket, as its report lines name it, e.g. "h3dit[adaln cached]"
	cuda bool   // the backend runs on CUDA: only then is the driver called
	done bool
	seen []string // the tags measured, for the error when tag never comes
}

// runsOn records whether the measurements run on CUDA, the only backend whose profiler the window calls.
func (w *profileWindow) runsOn(p *backend.Plan) { w.cuda = p.Backend == backend.KindXLA && p.IsCUDA() }

// bracket runs forward once more inside the window when tag is the window's; median is the same
// forward's timed median, printed beside it as the wall time the kernels are compared with.
func (w *profileWindow) bracket(tag string, median float64, forward func() error) error {
	if w == nil || w.tag == "" {
		return nil
	}
	w.seen = append(w.seen, tag)
	if tag != w.tag || w.done {
		return nil
	}
	w.done = true
	if !w.cuda {
		fmt.Printf("profile window [%s]: the backend is not CUDA; one extra forward runs without a profiler range\n", tag)
		return forward()
	}
	if err := backend.StartCUDAProfiler(0); err != nil {
		fmt.Printf("profile window [%s]: WARNING: no profiler range (%v); one extra forward runs unprofiled\n", tag, err)
		return forward()
	}
	t0 := time.Now()
	err := forward()
	wall := time.Since(t0).Seconds()
	if serr := backend.StopCUDAProfiler(0); serr != nil && err == nil {
		err = fmt.Errorf("profile window [%s]: %w", tag, serr)
	}
	fmt.Printf("profile window [%s]: one forward between cuProfilerStart and cuProfilerStop, %.3f s under the profiler; timed median outside it %.3f s (bench/kernel_breakdown.py --wall-ms %.1f)\n",
		tag, wall, median, 1000*median)
	return err
}

// check fails when the window was asked for a tag no measurement carried.
func (w *profileWindow) check() error {
	if w == nil || w.tag == "" || w.done {
		return nil
	}
	return badFlag("-profile-window %q matched no measurement; this run measured: %s", w.tag, strings.Join(w.seen, ", "))
}
