package main

import (
	"flag"
	"fmt"
	"math/rand/v2"

	"github.com/gomlx/compute"

	"fastvideo/internal/rife"
)

var (
	rifeSize   = flag.String("rife-size", "480x832", "rife: frame size HxW (padded to multiples of 64 inside, as upstream)")
	rifeBatch  = flag.String("rife-batch", "1,8", "rife: frame pairs per call, comma-separated")
	rifeDTypes = flag.String("rife-dtype", "f32,bf16", "rife: compute dtypes, comma-separated")
)

func init() {
	register("rife", benchRIFE)
}

// benchRIFE times RIFE 4.25 (release widths, random weights) on uint8 frame pairs, uploads and
// downloads included, against bench/rife_torch.py.
func benchRIFE(b compute.Backend, c common) error {
	var h, w int
	if _, err := fmt.Sscanf(*rifeSize, "%dx%d", &h, &w); err != nil || h < 1 || w < 1 {
		return badFlag("-rife-size %q: want HxW", *rifeSize)
	}
	batches, err := parseList("rife-batch", *rifeBatch, intAtLeast(1))
	if err != nil {
		return err
	}
	dts, err := parseDTypes("rife-dtype", *rifeDTypes)
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x52494645))
	for _, dt := range dts {
		m, err := rife.Random(b, rife.Release(), dt, int64(c.Seed))
		if err != nil {
			return err
		}
		for _, n := range batches {
			a, bb := make([]byte, n*h*w*3), make([]byte, n*h*w*3)
			for i := range a {
				a[i], bb[i] = byte(r.IntN(256)), byte(r.IntN(256))
			}
			ts := make([]float64, n)
			for i := range ts {
				ts[i] = 0.5
			}
			tm, err := timeRuns(c.Warmup, c.Iters, func() error { _, err := m.Interpolate(a, bb, n, h, w, ts); return err })
			if err != nil {
				m.Close()
				return err
			}
			fmt.Printf("rife %s %dx%d pairs=%d: first %.3f s, median %.2f ms, min %.2f ms -> %.1f frames/s; peak GPU %d MiB\n",
				dt, h, w, n, tm.First, 1e3*tm.Median(), 1e3*tm.Min(), float64(n)/tm.Median(), tm.PeakGPU)
		}
		m.Close()
	}
	return nil
}
