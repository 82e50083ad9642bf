package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/vae/h3video"
	"fastvideo/vae/taehv"
	"fastvideo/vae/wan"
)

var (
	taehvVariant = flag.String("taehv-variant", "taew2_1", "taehv: taew2_1 (Wan2.1, 16 channels), taew2_2 (Wan2.2-TI2V-5B, 48, patch 2) or taeh3 (MiniMax H3, 24, patch 2)")
	taehvLatents = flag.Int("taehv-latents", 21, "taehv: latent frames to decode (21: Wan's 81 frames; 37: H3's 124, give taeh3 5k+2)")
	taehvHeight  = flag.Int("taehv-height", 480, "taehv: canvas height in pixels")
	taehvWidth   = flag.Int("taehv-width", 832, "taehv: canvas width in pixels")
	taehvDTypes  = flag.String("taehv-dtypes", "bf16", "taehv: dtypes, comma-separated: f32, bf16")
	taehvFull    = flag.Bool("taehv-full", true, "taehv: also time the model's full video decoder (random weights) on the same latents")
	taehvChunk   = flag.Int("taehv-chunk", 0, "taehv: latents per decoder run (Options.ChunkLatents; 0: the decoder's pipelined default)")
)

func init() {
	register("taehv", func(b compute.Backend, c common) error {
		dts, err := parseDTypes("taehv-dtypes", *taehvDTypes)
		if err != nil {
			return fmt.Errorf("taehv bench: %w", err)
		}
		return benchTAEHV(b, dts, c)
	})
}

// taehvConfig is the variant's layout.
func taehvConfig(name string) (taehv.Config, error) {
	switch name {
	case "taew2_1":
		return taehv.Taew21(), nil
	case "taew2_2":
		return taehv.Taew22(), nil
	case "taeh3":
		return taehv.Taeh3(), nil
	}
	return taehv.Config{}, badFlag("taehv bench: -taehv-variant %q is not taew2_1, taew2_2 or taeh3", name)
}

// benchTAEHV times the TAEHV tiny decoder (random weights drawn on the device) on raw latents at the
// canvas, host latents in and host [0,1] frames out, then (with -taehv-full) the full decoder the
// variant stands in for on the same latents: the "decoder" comparison of BENCHMARKS.md, to be run
// beside bench/taehv_torch.py at the same size.
func benchTAEHV(b compute.Backend, dts []dtypes.DType, c common) error {
	cfg, err := taehvConfig(*taehvVariant)
	if err != nil {
		return err
	}
	if c.Iters <= 0 {
		return fmt.Errorf("taehv bench: -iters %d must be positive", c.Iters)
	}
	r, t := cfg.SpatialRatio(), *taehvLatents
	if *taehvHeight <= 0 || *taehvWidth <= 0 || *taehvHeight%r != 0 || *taehvWidth%r != 0 || t < 1 {
		return badFlag("taehv bench: canvas %dx%d must be positive multiples of %d, latents positive", *taehvHeight, *taehvWidth, r)
	}
	shape := []int{1, cfg.LatentChannels, t, *taehvHeight / r, *taehvWidth / r}
	z := randnSource(c.Seed, 0x74616568)(cfg.LatentChannels * t * shape[3] * shape[4])
	fmt.Printf("taehv: %s (C=%d, patch %d), %d latents %dx%d -> %d frames %dx%d; device memory before weights %d MiB\n",
		*taehvVariant, cfg.LatentChannels, cfg.PatchSize, t, shape[3], shape[4], cfg.NumFrames(t), *taehvHeight, *taehvWidth, gpuMemMiB())
	for _, dt := range dts {
		t0 := time.Now()
		dec, err := taehv.NewRandom(b, cfg, taehv.Options{DType: dt, ChunkLatents: *taehvChunk}, int64(c.Seed))
		if err != nil {
			return err
		}
		fmt.Printf("taehv[%s]: random weights on device in %.2f s\n", dt, time.Since(t0).Seconds())
		err = timeDecode("taehv", dt, c, func(emit func(count int, sample []float32) error) error {
			return dec.Decode(context.Background(), z, shape, func(f taehv.Frames) error { return emit(f.Count, f.Sample) })
		})
		if err == nil { // the frames as a video writer takes them: 8-bit RGB made on the device
			err = timeRGB24(dt, c, func() (int, error) {
				frames := 0
				err := dec.DecodeRGB24(context.Background(), z, shape, func(f taehv.RGBFrames) error { frames += f.Count; return nil })
				return frames, err
			})
		}
		if err == nil { // the decoder with one frame read back: its device time, nearly no transfer
			err = timeDecode("taehv-last-frame", dt, c, func(emit func(count int, sample []float32) error) error {
				pix, _, err := dec.DecodeFrames(context.Background(), z, shape, []int{cfg.NumFrames(t) - 1})
				if err != nil {
					return err
				}
				return emit(1, pix)
			})
		}
		dec.Close()
		if err != nil {
			return err
		}
		reportStaging(b)
		if *taehvFull {
			if err := benchFullDecoder(b, cfg, dt, z, shape, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// benchFullDecoder times the full video decoder that cfg's variant replaces on the same latents.
func benchFullDecoder(b compute.Backend, cfg taehv.Config, dt dtypes.DType, z []float32, shape []int, c common) error {
	ctx := context.Background()
	if cfg.H3Trim {
		dec, err := h3video.NewRandom(b, h3video.DefaultConfig(), h3video.Options{DType: dt}, int64(c.Seed))
		if err != nil {
			return err
		}
		defer dec.Close()
		return timeDecode("h3vae", dt, c, func(emit func(int, []float32) error) error {
			return dec.Decode(ctx, z, shape, func(f h3video.Frames) error { return emit(f.Count, f.Sample) })
		})
	}
	wcfg := wan.DefaultConfig()
	if cfg.LatentChannels == taehv.Taew22().LatentChannels {
		wcfg = wan.Wan22Config()
	}
	dec, err := wan.NewRandom(b, wcfg, wan.Options{DType: dt}, int64(c.Seed))
	if err != nil {
		return err
	}
	defer dec.Close()
	return timeDecode("wanvae", dt, c, func(emit func(int, []float32) error) error {
		return dec.Decode(ctx, z, shape, func(f wan.Frames) error { return emit(f.Count, f.Sample) })
	})
}

// timeDecode runs decode -warmup then -iters times and prints its first run, min and median, the
// frames it gave and the memory peaks. The NaN count reads the last run's frames after the timing,
// as bench/taehv_torch.py does.
func timeDecode(tag string, dt dtypes.DType, c common, decode func(emit func(count int, sample []float32) error) error) error {
	var got int
	var samples [][]float32
	emit := func(count int, sample []float32) error {
		got += count
		samples = append(samples, sample)
		return nil
	}
	tm, err := timeRuns(c.Warmup, c.Iters, func() error {
		got, samples = 0, samples[:0]
		return decode(emit)
	})
	if err != nil {
		return fmt.Errorf("%s[%s]: %w", tag, dt, err)
	}
	nan := 0
	for _, s := range samples {
		for _, v := range s {
			if math.IsNaN(float64(v)) {
				nan++
			}
		}
	}
	fmt.Printf("%s[%s]: %d frames; first run (compile+run) %.2f s; decode min %.3f s, median %.3f s over %d runs; peak device %d MiB, host %d MiB; NaN %d\n",
		tag, dt, got, tm.First, tm.Min(), tm.Median(), c.Iters, tm.PeakGPU, tm.PeakHost, nan)
	fmt.Printf("decoder record %s %s %.4f\n", tag, dt, tm.Median())
	return nil
}

// timeRGB24 times decode (returning its frame count) as timeDecode does, for the RGB24 output.
func timeRGB24(dt dtypes.DType, c common, decode func() (int, error)) error {
	var got int
	tm, err := timeRuns(c.Warmup, c.Iters, func() (err error) {
		got, err = decode()
		return err
	})
	if err != nil {
		return fmt.Errorf("taehv-rgb24[%s]: %w", dt, err)
	}
	fmt.Printf("taehv-rgb24[%s]: %d frames; first run (compile+run) %.2f s; decode min %.3f s, median %.3f s over %d runs; peak device %d MiB, host %d MiB\n",
		dt, got, tm.First, tm.Min(), tm.Median(), c.Iters, tm.PeakGPU, tm.PeakHost)
	fmt.Printf("decoder record taehv-rgb24 %s %.4f\n", dt, tm.Median())
	return nil
}
