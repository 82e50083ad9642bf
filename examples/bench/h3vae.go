package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/vae/h3video"
)

type dtypeBatch struct {
	dt    dtypes.DType
	batch int
}

// dtypeBatches lists the (dtype, TileBatch) runs in order: every batch setting for each dtype.
func dtypeBatches(dts []dtypes.DType, batches []int) []dtypeBatch {
	var out []dtypeBatch
	for _, dt := range dts {
		for _, b := range batches {
			out = append(out, dtypeBatch{dt, b})
		}
	}
	return out
}

var (
	h3vaeFrames = flag.String("h3vae-frames", "64,124", "h3vae: video frame counts to decode (each aligned up to 17n+5, e.g. 64 -> 73)")
	h3vaeDTypes = flag.String("h3vae-dtypes", "bf16", "h3vae: weight dtypes to run, comma-separated: f32, bf16 (run one per process for clean memory peaks)")
	h3vaeHeight = flag.Int("h3vae-height", 480, "h3vae: canvas height in pixels (multiple of 16)")
	h3vaeWidth  = flag.Int("h3vae-width", 832, "h3vae: canvas width in pixels (multiple of 16)")
	h3vaeTile   = flag.Int("h3vae-tile", 0, "h3vae: spatial tile size in pixels (0: the reference's 256)")
	h3vaeOver   = flag.Int("h3vae-overlap", 0, "h3vae: minimum tile overlap in pixels (0: the reference's 64)")
	h3vaeLayers = flag.Int("h3vae-layers", 0, "h3vae: decoder layers (0: the release's 36; fewer only for smoke tests)")
	h3vaeBatch  = flag.String("h3vae-tile-batch", "0", "h3vae: Options.TileBatch values to run, comma-separated (0: automatic; 1: tile by tile); run ascending for meaningful memory peaks")
)

func init() {
	register("h3vae", func(b compute.Backend, c common) error {
		var frames []int
		for _, s := range strings.Split(*h3vaeFrames, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return fmt.Errorf("h3vae bench: -h3vae-frames %q: %q is not a positive integer", *h3vaeFrames, s)
			}
			frames = append(frames, n)
		}
		var dts []dtypes.DType
		for _, s := range strings.Split(*h3vaeDTypes, ",") {
			switch strings.TrimSpace(strings.ToLower(s)) {
			case "f32", "float32":
				dts = append(dts, dtypes.Float32)
			case "bf16", "bfloat16":
				dts = append(dts, dtypes.BFloat16)
			default:
				return fmt.Errorf("h3vae bench: -h3vae-dtypes %q: %q is not f32 or bf16", *h3vaeDTypes, s)
			}
		}
		var batches []int
		for _, s := range strings.Split(*h3vaeBatch, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 0 {
				return fmt.Errorf("h3vae bench: -h3vae-tile-batch %q: %q is not a non-negative integer", *h3vaeBatch, s)
			}
			batches = append(batches, n)
		}
		return benchH3VideoVAE(b, dts, frames, batches, *h3vaeHeight, *h3vaeWidth, *h3vaeTile, c.Warmup, c.Iters, c.Seed)
	})
}

// alignFrames rounds a frame count up to the VAE's 17n+5 grid and returns it with its latent count.
func alignFrames(n int) (frames, latents int) {
	for n%17 != 5 {
		n++
	}
	return n, (n-5)/17*5 + 2
}

// h3vaeGFLOP counts the decoder's matmul FLOPs for one decode (attention included, elementwise work
// left out): every clip decodes every tile through proj_in, the blocks and proj_out.
func h3vaeGFLOP(cfg h3video.Config, chunks, height, width, tile int) float64 {
	r := cfg.SpatialRatio()
	if tile == 0 {
		tile = cfg.TileSampleMinHeight
	}
	oh, ow := cfg.TileSampleMinOverlapHeight, cfg.TileSampleMinOverlapWidth
	if *h3vaeOver > 0 {
		oh, ow = *h3vaeOver, *h3vaeOver
	}
	ys, _ := h3video.SplitTiles(height, tile, oh, r)
	xs, _ := h3video.SplitTiles(width, tile, ow, r)
	d := float64(cfg.Width())
	f := d * float64(cfg.DecoderFFNMult)
	patchOut := float64(cfg.OutChannels * cfg.TemporalRatio() * r * r)
	var total float64
	for i := range ys.Starts {
		for j := range xs.Starts {
			n := float64(cfg.ClipTokens() * (ys.Sizes[i] / r) * (xs.Sizes[j] / r))
			l := n + float64(cfg.DecoderNumRegisters+1)
			block := 8*l*d*d + 2*l*d*2*f + 2*l*f*d + 4*l*l*d
			total += float64(cfg.DecoderNumLayers)*block + 2*n*float64(cfg.LatentChannels)*(float64(cfg.LatentChannels)+d) + 2*l*d*patchOut
		}
	}
	return total * float64(chunks) / 1e9
}

// benchH3VideoVAE times the release-size video decoder (released geometry, random weights drawn on
// the device) at each frame count and dtype: end to end from host latents to host [0,1] pixels per
// streamed clip, with device and host memory peaks.
func benchH3VideoVAE(b compute.Backend, dts []dtypes.DType, frameCounts, tileBatches []int, height, width, tile, warmup, iters int, seed uint64) error {
	if iters <= 0 {
		return fmt.Errorf("h3vae bench: -iters %d must be positive", iters)
	}
	cfg := h3video.DefaultConfig()
	if *h3vaeLayers > 0 {
		cfg.DecoderNumLayers = *h3vaeLayers
	}
	r := cfg.SpatialRatio()
	if height <= 0 || width <= 0 || height%r != 0 || width%r != 0 {
		return fmt.Errorf("h3vae bench: canvas %dx%d must be positive multiples of %d", height, width, r)
	}
	rng := rand.New(rand.NewPCG(seed, 0x68337661))
	for i := range cfg.LatentsMean { // release-like statistics keep the pixels in a sane range
		cfg.LatentsMean[i] = 0.5 * rng.NormFloat64()
		cfg.LatentsStd[i] = 1 + 0.5*rng.Float64()
	}
	baseGPU := gpuMemMiB()
	shownTile := tile
	if shownTile == 0 {
		shownTile = cfg.TileSampleMinHeight
	}
	fmt.Printf("h3vae: release decoder (%d layers, width %d, %d heads), canvas %dx%d, tile %d px; device memory before weights %d MiB\n",
		cfg.DecoderNumLayers, cfg.Width(), cfg.DecoderNumHeads, height, width, shownTile, baseGPU)
	// Latents are drawn once per frame count, so that every run decodes the same input and its
	// pixels can be compared with the first run's.
	latents := map[int][]float32{}
	refPix := map[int][]float32{}
	for _, req := range frameCounts {
		_, nl := alignFrames(req)
		if latents[nl] == nil {
			z := make([]float32, cfg.LatentChannels*nl*(height/r)*(width/r))
			for i := range z {
				z[i] = float32(rng.NormFloat64())
			}
			latents[nl] = z
		}
	}
	runs := dtypeBatches(dts, tileBatches)
	for _, dtb := range runs {
		dt, tb := dtb.dt, dtb.batch
		tag := fmt.Sprintf("%s/tb%d", dt, tb)
		path, err := attention.Resolve(b, dt, cfg.DecoderHeadDim, attention.Options{})
		if err != nil {
			return err
		}
		t0 := time.Now()
		dec, err := h3video.NewRandom(b, cfg, h3video.Options{DType: dt, TileSize: tile, TileOverlap: *h3vaeOver, TileBatch: tb}, int64(seed))
		if err != nil {
			return err
		}
		fmt.Printf("h3vae[%s]: TileBatch %d, attention path %s (head dim %d); random weights on device in %.2f s; device memory %d MiB\n",
			tag, tb, path, cfg.DecoderHeadDim, time.Since(t0).Seconds(), gpuMemMiB())
		for _, req := range frameCounts {
			nf, nl := alignFrames(req)
			plan, err := cfg.Plan(nl)
			if err != nil {
				dec.Close()
				return err
			}
			shape := []int{1, cfg.LatentChannels, nl, height / r, width / r}
			z := latents[nl]
			var nonFinite, got int
			var sum float64
			// With several configurations, the first run of the first one keeps its pixels and the
			// first run of every other one is compared with them.
			ref, keep := refPix[nl], refPix[nl] == nil && len(runs) > 1
			compare := ref != nil
			var errSq, refSq, maxAbs float64
			off := 0
			emit := func(f h3video.Frames) error {
				p := f.Pixels()
				if keep {
					refPix[nl] = append(refPix[nl], p...)
				} else if compare {
					for i, v := range p {
						e := float64(v - ref[off+i])
						errSq += e * e
						refSq += float64(ref[off+i]) * float64(ref[off+i])
						maxAbs = max(maxAbs, math.Abs(e))
					}
					off += len(p)
				}
				var s float64
				bad := 0
				for _, v := range p {
					if math.IsNaN(float64(v)) {
						bad++
					}
					s += float64(v)
				}
				nonFinite += bad
				sum += s
				got += f.Count
				return nil
			}
			ctx := context.Background()
			run := func() (float64, error) {
				got, nonFinite, sum = 0, 0, 0
				t := time.Now()
				err := dec.Decode(ctx, z, shape, emit)
				return time.Since(t).Seconds(), err
			}
			hostPeakMiB(true)
			gp := startGPUPeak()
			first, err := run()
			if err != nil {
				gp.Stop()
				dec.Close()
				return err
			}
			if compare {
				fmt.Printf("h3vae[%s]:   pixels vs the first configuration: max abs %.4g, relative L2 %.4g\n", tag, maxAbs, math.Sqrt(errSq/refSq))
			}
			keep, compare = false, false
			for range warmup {
				if _, err := run(); err != nil {
					gp.Stop()
					dec.Close()
					return err
				}
			}
			times := make([]float64, iters)
			for i := range times {
				if times[i], err = run(); err != nil {
					gp.Stop()
					dec.Close()
					return err
				}
			}
			peakGPU := gp.Stop()
			peakHost := hostPeakMiB(false)
			sorted := slices.Clone(times)
			sort.Float64s(sorted)
			med := sorted[len(sorted)/2]
			gflop := h3vaeGFLOP(cfg, plan.Chunks, height, width, tile)
			fmt.Printf("h3vae[%s]: %d frames (asked %d) = %d latents, %d clips -> %d frames %dx%d; first run (compile+run) %.2f s\n",
				tag, nf, req, nl, plan.Chunks, got, height, width, first)
			fmt.Printf("h3vae[%s]:   decode min %.3f s, median %.3f s over %d runs; %.0f GFLOP -> %.0f TFLOP/s at the median\n",
				tag, sorted[0], med, iters, gflop, gflop/med/1e3)
			fmt.Printf("h3vae[%s]:   peak device memory %d MiB (nvidia-smi, this process, incl. CUDA context), peak host RSS %d MiB; mean pixel %.6f, NaN %d\n",
				tag, peakGPU, peakHost, sum/float64(3*got*height*width), nonFinite)
		}
		dec.Close()
	}
	return nil
}
