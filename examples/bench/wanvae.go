package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/vae/wan"
)

var (
	wanvaeFrames  = flag.Int("wanvae-frames", 81, "wanvae: video frames to decode (4n+1; 81 = 21 latent frames)")
	wanvaeHeight  = flag.Int("wanvae-height", 480, "wanvae: canvas height in pixels (multiple of the spatial ratio)")
	wanvaeWidth   = flag.Int("wanvae-width", 832, "wanvae: canvas width in pixels (multiple of the spatial ratio)")
	wanvaeDTypes  = flag.String("wanvae-dtypes", "bf16", "wanvae: weight/conv dtypes, comma-separated: f32, bf16 (one per process gives clean memory peaks)")
	wanvaeVariant = flag.String("wanvae-variant", "wan21", "wanvae: released VAE geometry: wan21 (z=16, 8x) or wan22 (z=48, 16x)")
	wanvaeTiling  = flag.Bool("wanvae-tiling", false, "wanvae: spatial tiling (256 px tiles every 192 px, the reference's defaults); off is what Wan pipelines run")
)

func init() {
	register("wanvae", func(b compute.Backend, c common) error {
		dts, err := parseDTypes("wanvae-dtypes", *wanvaeDTypes)
		if err != nil {
			return fmt.Errorf("wanvae bench: %w", err)
		}
		var cfg wan.Config
		switch *wanvaeVariant {
		case "wan21":
			cfg = wan.DefaultConfig()
		case "wan22":
			cfg = wan.Wan22Config()
		default:
			return badFlag("wanvae bench: -wanvae-variant %q is not wan21 or wan22", *wanvaeVariant)
		}
		return benchWanVAE(b, cfg, dts, c.Warmup, c.Iters, c.Seed)
	})
}

// benchWanVAE times the released Wan VAE decoder (random weights drawn on the device): host
// DiT-space latents in, host frames out chunk by chunk (streamed, as the pipeline would consume
// them), with device and host memory peaks.
func benchWanVAE(b compute.Backend, cfg wan.Config, dts []dtypes.DType, warmup, iters int, seed uint64) error {
	frames, height, width := *wanvaeFrames, *wanvaeHeight, *wanvaeWidth
	if iters <= 0 {
		return fmt.Errorf("wanvae bench: -iters %d must be positive", iters)
	}
	tr, r := cfg.TemporalRatio(), cfg.SpatialRatio()
	if frames <= 0 || (frames-1)%tr != 0 {
		return badFlag("wanvae bench: -wanvae-frames %d must be %d·n+1", frames, tr)
	}
	if height <= 0 || width <= 0 || height%r != 0 || width%r != 0 {
		return fmt.Errorf("wanvae bench: canvas %dx%d must be positive multiples of %d", height, width, r)
	}
	nl := (frames-1)/tr + 1
	shape := []int{1, cfg.ZDim, nl, height / r, width / r}
	z := randnSource(seed, 0x77616e76)(cfg.ZDim * nl * shape[3] * shape[4])
	gflop := cfg.DecodeGFLOP(nl, shape[3], shape[4])
	fmt.Printf("wanvae: %s decoder (z=%d, base %d, ratio %dx%dx%d), %d frames = %d latents %dx%d -> %dx%d, tiling %v; %.0f GFLOP per decode; device memory before weights %d MiB\n",
		*wanvaeVariant, cfg.ZDim, cfg.BaseDim, tr, r, r, frames, nl, shape[3], shape[4], height, width, *wanvaeTiling, gflop, gpuMemMiB())
	for _, dt := range dts {
		t0 := time.Now()
		dec, err := wan.NewRandom(b, cfg, wan.Options{DType: dt, Tiling: *wanvaeTiling}, int64(seed))
		if err != nil {
			return err
		}
		fmt.Printf("wanvae[%s]: random weights on device in %.2f s; device memory %d MiB\n", dt, time.Since(t0).Seconds(), gpuMemMiB())
		var got, nonFinite int
		var sum float64
		var firstChunk time.Time
		emit := func(f wan.Frames) error {
			if f.Start == 0 {
				firstChunk = time.Now()
			}
			for _, v := range f.Sample {
				if math.IsNaN(float64(v)) {
					nonFinite++
				}
				sum += float64(v)
			}
			got += f.Count
			return nil
		}
		ctx := context.Background()
		var ttff float64
		tm, err := timeRuns(warmup, iters, func() error {
			got, nonFinite, sum = 0, 0, 0
			t := time.Now()
			err := dec.Decode(ctx, z, shape, emit)
			ttff = firstChunk.Sub(t).Seconds()
			return err
		})
		dec.Close()
		if err != nil {
			return err
		}
		first, med, peakGPU, peakHost := tm.First, tm.Median(), tm.PeakGPU, tm.PeakHost
		fmt.Printf("wanvae[%s]: %d latents -> %d frames %dx%d; first run (compile+run) %.2f s\n", dt, nl, got, height, width, first)
		fmt.Printf("wanvae[%s]:   decode min %.3f s, median %.3f s over %d runs (first chunk out after %.3f s); %.1f TFLOP/s at the median\n",
			dt, tm.Min(), med, iters, ttff, gflop/med/1e3)
		fmt.Printf("wanvae[%s]:   peak device memory %d MiB (nvidia-smi, this process, incl. CUDA context and weights), peak host RSS %d MiB; mean sample %.4f, NaN %d\n",
			dt, peakGPU, peakHost, sum/float64(3*got*height*width), nonFinite)
	}
	return nil
}
