package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/safetensors"
	"fastvideo/quant"
)

var (
	quantBits = flag.Int("quant-bits", 6, "quantlinear: bits of the weight (8, 6 or 4)")
	quantK    = flag.Int("quant-k", 5376, "quantlinear: input features (multiple of 64)")
	quantN    = flag.String("quant-n", "5376,14336", "quantlinear: output features, comma-separated")
	quantM    = flag.String("quant-m", "16,32,64,128,256,512,768,1024,2048,4096,8192,16384", "quantlinear: row counts, comma-separated")
	quantDT   = flag.String("quant-dtype", "bf16", "quantlinear: activation/compute dtype, bf16 or f32")
	quantMaxQ = flag.Int("quant-max-quantized-m", 4096, "quantlinear: largest M timed on the quantized path (its float32 [4, M, N] chunks grow with M)")
)

func init() {
	register("quantlinear", func(b compute.Backend, c common) error {
		ns, errN := parseList("quant-n", *quantN, intAtLeast(1))
		ms, errM := parseList("quant-m", *quantM, intAtLeast(1))
		dt, errDType := parseDType("quant-dtype", *quantDT)
		if err := errors.Join(errN, errM, errDType); err != nil {
			return fmt.Errorf("quantlinear bench: %w", err)
		}
		return benchQuantLinear(b, *quantBits, *quantK, ns, ms, dt, c)
	})
}

// benchQuantLinear times y = x·wᵀ for an affine-quantized w [N, K] (group 64,
// BF16 scales as in MLX checkpoints) over row counts M, by three routes:
// quant.PathQuantized (grouped contraction, no dequantized weight),
// quant.PathDequantGEMM (dequantize to the compute dtype + one GEMM), and a
// dense GEMM on the pre-dequantized weight (the ceiling a quantized linear can
// reach). It prints one line per (N, M) and, per N, the smallest M from which
// dequant-GEMM is faster: the value for FASTVIDEO_DQ_GEMM.
func benchQuantLinear(b compute.Backend, bits, k int, ns, ms []int, dt dtypes.DType, c common) error {
	if c.Iters <= 0 {
		return fmt.Errorf("quantlinear bench: -iters must be positive")
	}
	fmt.Printf("quantlinear: int%d group 64, K=%d, compute %s, warmup %d, iters %d (median ms)\n", bits, k, dt, c.Warmup, c.Iters)
	r := rand.New(rand.NewPCG(c.Seed, 0x71756e74))
	for _, n := range ns {
		t0 := time.Now()
		w := make([]float32, n*k)
		for i := range w {
			w[i] = float32(r.NormFloat64() / 73) // ~1/√K, like a trained projection
		}
		a, err := quant.Quantize(w, n, k, bits, 64, safetensors.BF16)
		if err != nil {
			return err
		}
		deq, err := a.Dequantize()
		if err != nil {
			return err
		}
		words := tensors.FromFlatDataAndDimensions(a.Words, n, a.WordsPerRow(k))
		scales := benchFloats(a.Scales, dt, n, a.GroupsPerRow(k))
		biases := benchFloats(a.Biases, dt, n, a.GroupsPerRow(k))
		dense := benchFloats(deq, dt, n, k)
		fmt.Printf("quantlinear: N=%d: quantized on the host in %.1f s\n", n, time.Since(t0).Seconds())

		routes := []struct {
			name string
			fn   func(x, wq, s, bi, wd *Node) *Node
		}{
			{"quantized", func(x, wq, s, bi, _ *Node) *Node {
				return quant.Linear(x, quant.QuantizedWeight(wq, s, bi, a.Scheme), nil, quant.Dispatch{Path: quant.PathQuantized})
			}},
			{"dequant-gemm", func(x, wq, s, bi, _ *Node) *Node {
				return quant.Linear(x, quant.QuantizedWeight(wq, s, bi, a.Scheme), nil, quant.Dispatch{Path: quant.PathDequantGEMM})
			}},
			{"dense", func(x, _, _, _, wd *Node) *Node { return quant.Linear(x, quant.DenseWeight(wd), nil, quant.Dispatch{}) }},
		}
		crossover := -1
		for _, m := range ms {
			x := make([]float32, m*k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			xt := benchFloats(x, dt, m, k)
			line := fmt.Sprintf("quantlinear: N=%5d M=%5d", n, m)
			var med [3]float64
			for i, route := range routes {
				if i == 0 && m > *quantMaxQ {
					med[0] = -1
					line += fmt.Sprintf("  %s %8s   (skipped, M > -quant-max-quantized-m)", route.name, "-")
					continue
				}
				ms, err := timeRoute(b, route.fn, c, xt, words, scales, biases, dense)
				if err != nil {
					return fmt.Errorf("quantlinear %s N=%d M=%d: %w", route.name, n, m, err)
				}
				med[i] = ms
				tflops := 2 * float64(m) * float64(n) * float64(k) / (ms * 1e-3) / 1e12
				line += fmt.Sprintf("  %s %8.3f ms (%6.1f TFLOP/s)", route.name, ms, tflops)
			}
			if crossover < 0 && med[0] >= 0 && med[1] < med[0] {
				crossover = m
			}
			fmt.Println(line)
			xt.FinalizeAll()
		}
		if crossover > 0 {
			fmt.Printf("quantlinear: N=%d: dequant-gemm is first faster at M=%d (FASTVIDEO_DQ_GEMM=%d)\n", n, crossover, crossover)
		} else {
			fmt.Printf("quantlinear: N=%d: the quantized path was faster at every M measured\n", n)
		}
		for _, t := range []*tensors.Tensor{words, scales, biases, dense} {
			t.FinalizeAll()
		}
	}
	return nil
}

func benchFloats(v []float32, dt dtypes.DType, dims ...int) *tensors.Tensor {
	if dt == dtypes.BFloat16 {
		return tensors.FromFlatDataAndDimensions(bfloat16.FromFloat32s(v...), dims...)
	}
	return tensors.FromFlatDataAndDimensions(v, dims...)
}

// timeRoute compiles fn, runs it once plus warmup times, then returns the
// median of iters timed runs in ms. The graph also returns one element of y
// (an f32 scalar), and copying it to the host waits for the device.
func timeRoute(b compute.Backend, fn func(x, wq, s, bi, wd *Node) *Node, c common, args ...*tensors.Tensor) (float64, error) {
	e, err := NewExec(b, func(in []*Node) []*Node {
		y := fn(in[0], in[1], in[2], in[3], in[4])
		probe := ConvertDType(Reshape(Slice(y, AxisElem(0), AxisElem(0)), 1), dtypes.Float32)
		return []*Node{y, probe}
	})
	if err != nil {
		return 0, err
	}
	defer e.Finalize()
	in := make([]any, len(args))
	for i, t := range args {
		in[i] = t
	}
	once := func() (float64, error) {
		t0 := time.Now()
		out, err := e.Call(in...)
		if err != nil {
			return 0, err
		}
		if _, err := tensors.CopyFlatData[float32](out[1]); err != nil {
			return 0, err
		}
		d := time.Since(t0).Seconds() * 1e3
		for _, o := range out {
			o.FinalizeAll()
		}
		return d, nil
	}
	for i := 0; i < 1+c.Warmup; i++ {
		if _, err := once(); err != nil {
			return 0, err
		}
	}
	times := make([]float64, c.Iters)
	for i := range times {
		if times[i], err = once(); err != nil {
			return 0, err
		}
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}
