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
// "fresh" through graphexec.Take (a new slice whose pages all CPUs touch first), "reused" into one Go
// slice kept across runs (its pages already mapped).
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
		for _, mode := range []string{"fresh", "reused"} {
			tm, err := timeRuns(c.Warmup, c.Iters, func() error {
				t, err := run()
				if err != nil {
					return err
				}
				// The copy's clock includes the end of the program (an Iota: microseconds).
				t0 := time.Now()
				if mode == "fresh" {
					_, err = graphexec.Take[uint8](t)
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
				return err
			})
			if err != nil {
				return err
			}
			fmt.Printf("d2h record %s %d MiB %.4f s (with the program) \n", mode, mib, tm.Median())
		}
		e.Finalize()
	}
	return nil
}
