package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
)

var d2hMiB = flag.String("d2h-mib", "97,194,388", "d2h: device-to-host copy sizes in MiB, comma-separated")

func init() {
	register("d2h", benchD2H)
}

// benchD2H times copying a device buffer to the host, the floor under every decoder's host frames:
// "fresh" through graphexec.Take (a new slice: in the GPU build through page-locked staging, else one
// whose pages all CPUs touch first), "reused" into one Go slice kept across runs (its pages already
// mapped, pageable).
func benchD2H(b compute.Backend, c common) error {
	sizes, err := parseList("d2h-mib", *d2hMiB, intAtLeast(1))
	if err != nil {
		return err
	}
	for _, mib := range sizes {
		n := mib << 20
		e := graphexec.MustExec(b, "bench.d2h", func(in []*Node) []*Node {
			return []*Node{ConvertDType(Iota(in[0].Graph(), shapes.Make(dtypes.Int32, n), 0), dtypes.Uint8)}
		})
		run := func() (*tensors.Tensor, error) { return graphexec.Call1(e, tensors.FromValue(int32(0))) }
		var reuse []uint8
		checked := false
		for _, mode := range []string{"fresh", "reused"} {
			tm, err := timeRuns(c.Warmup, c.Iters, func() error {
				t, err := run()
				if err != nil {
					return err
				}
				// The copy's clock includes the end of the program (an Iota: microseconds).
				t0 := time.Now()
				var got []uint8
				if mode == "fresh" {
					got, err = graphexec.Take[uint8](t)
				} else {
					if reuse == nil {
						reuse = make([]uint8, n)
					}
					buf, berr := t.Buffer(b, 0)
					if err = berr; err == nil {
						err = buf.ToFlatData(reuse)
					}
					t.FinalizeAll()
				}
				fmt.Printf("d2h %s %d MiB copy %.4f s\n", mode, mib, time.Since(t0).Seconds())
				if err == nil && got != nil && !checked { // once: the check is not part of the copy
					checked, err = true, checkRamp(got)
				}
				return err
			})
			if err != nil {
				return err
			}
			fmt.Printf("d2h record %s %d MiB %.4f s (with the program) \n", mode, mib, tm.Median())
		}
		e.Finalize()
	}
	reportStaging(b)
	return nil
}

// checkRamp: the copied values are the program's (i mod 256), wherever they were staged.
func checkRamp(v []uint8) error {
	for i, x := range v {
		if x != uint8(i) {
			return fmt.Errorf("d2h: value %d is %d, want %d", i, x, uint8(i))
		}
	}
	return nil
}

// reportStaging says whether graphexec.Take staged large outputs through page-locked memory.
func reportStaging(b compute.Backend) {
	n, err := graphexec.PinnedStaging(b)
	fmt.Printf("pinned staging: %d MiB registered", n>>20)
	if err != nil {
		fmt.Printf(" (%v)", err)
	}
	fmt.Println()
}
