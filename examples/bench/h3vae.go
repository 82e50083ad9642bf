package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
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
	h3vaeGPUs   = flag.Int("h3vae-gpus", 1, "h3vae: devices the clips are spread over (Options.Devices: a weight replica on each, clip i on device i mod N)")
	h3vaeBatch  = flag.String("h3vae-tile-batch", "0", "h3vae: Options.TileBatch values to run, comma-separated (0: automatic; 1: tile by tile); run ascending for meaningful memory peaks")
)

func init() {
	register("h3vae", func(b compute.Backend, c common) error {
		frames, errFrames := parseList("h3vae-frames", *h3vaeFrames, intAtLeast(1))
		dts, errDTypes := parseDTypes("h3vae-dtypes", *h3vaeDTypes)
		batches, errBatches := parseList("h3vae-tile-batch", *h3vaeBatch, intAtLeast(0))
		if err := errors.Join(errFrames, errDTypes, errBatches); err != nil {
			return fmt.Errorf("h3vae bench: %w", err)
		}
		return benchH3VideoVAE(b, dts, frames, batches, *h3vaeHeight, *h3vaeWidth, *h3vaeTile, c)
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
func benchH3VideoVAE(b compute.Backend, dts []dtypes.DType, frameCounts, tileBatches []int, height, width, tile int, c common) error {
	if c.Iters <= 0 {
		return fmt.Errorf("h3vae bench: -iters %d must be positive", c.Iters)
	}
	runs := dtypeBatches(dts, tileBatches)
	h, err := newH3VAEBench(b, frameCounts, height, width, tile, c, len(runs) > 1)
	if err != nil {
		return err
	}
	for _, dtb := range runs {
		if err := h.runConfig(dtb.dt, dtb.batch, frameCounts); err != nil {
			return err
		}
	}
	return nil
}

// h3vaeBench holds what every configuration of benchH3VideoVAE decodes alike.
type h3vaeBench struct {
	b                   compute.Backend
	cfg                 h3video.Config
	height, width, tile int
	c                   common
	// latents are drawn once per latent frame count, so that every run decodes the same input; refPix
	// are the first configuration's pixels when several are compared (compare).
	latents, refPix map[int][]float32
	compare         bool
}

// newH3VAEBench sets up the release decoder's configuration (release-like latent statistics) and draws
// the latents of every frame count.
func newH3VAEBench(b compute.Backend, frameCounts []int, height, width, tile int, c common, compare bool) (*h3vaeBench, error) {
	cfg := h3video.DefaultConfig()
	if *h3vaeLayers > 0 {
		cfg.DecoderNumLayers = *h3vaeLayers
	}
	r := cfg.SpatialRatio()
	if height <= 0 || width <= 0 || height%r != 0 || width%r != 0 {
		return nil, fmt.Errorf("h3vae bench: canvas %dx%d must be positive multiples of %d", height, width, r)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x68337661))
	for i := range cfg.LatentsMean { // release-like statistics keep the pixels in a sane range
		cfg.LatentsMean[i] = 0.5 * rng.NormFloat64()
		cfg.LatentsStd[i] = 1 + 0.5*rng.Float64()
	}
	shownTile := tile
	if shownTile == 0 {
		shownTile = cfg.TileSampleMinHeight
	}
	fmt.Printf("h3vae: release decoder (%d layers, width %d, %d heads), canvas %dx%d, tile %d px; device memory before weights %d MiB\n",
		cfg.DecoderNumLayers, cfg.Width(), cfg.DecoderNumHeads, height, width, shownTile, gpuMemMiB())
	h := &h3vaeBench{b: b, cfg: cfg, height: height, width: width, tile: tile, c: c,
		latents: map[int][]float32{}, refPix: map[int][]float32{}, compare: compare}
	for _, req := range frameCounts {
		_, nl := alignFrames(req)
		if h.latents[nl] == nil {
			z := make([]float32, cfg.LatentChannels*nl*(height/r)*(width/r))
			for i := range z {
				z[i] = float32(rng.NormFloat64())
			}
			h.latents[nl] = z
		}
	}
	return h, nil
}

// runConfig draws a decoder of dtype dt and TileBatch tb and times it at every frame count.
func (h *h3vaeBench) runConfig(dt dtypes.DType, tb int, frameCounts []int) error {
	tag := fmt.Sprintf("%s/tb%d", dt, tb)
	if *h3vaeGPUs > 1 {
		tag += fmt.Sprintf("/gpus%d", *h3vaeGPUs)
	}
	path, err := attention.Resolve(h.b, dt, h.cfg.DecoderHeadDim, h.c.Attention)
	if err != nil {
		return err
	}
	t0 := time.Now()
	opts := h3video.Options{DType: dt, TileSize: h.tile, TileOverlap: *h3vaeOver, TileBatch: tb, Attention: h.c.Attention, Devices: *h3vaeGPUs}
	dec, err := h3video.NewRandom(h.b, h.cfg, opts, int64(h.c.Seed))
	if err != nil {
		return err
	}
	defer dec.Close()
	fmt.Printf("h3vae[%s]: TileBatch %d, attention path %s (head dim %d); random weights on device in %.2f s; device memory %d MiB\n",
		tag, tb, path, h.cfg.DecoderHeadDim, time.Since(t0).Seconds(), gpuMemMiB())
	for _, req := range frameCounts {
		if err := h.decodeFrames(dec, tag, req); err != nil {
			return err
		}
	}
	return nil
}

// decodeFrames times the decode of req frames (aligned up to the VAE's grid) and prints it. With
// several configurations, the first run of the first one keeps its pixels and the first run of every
// other one is compared with them.
func (h *h3vaeBench) decodeFrames(dec *h3video.Decoder, tag string, req int) error {
	nf, nl := alignFrames(req)
	plan, err := h.cfg.Plan(nl)
	if err != nil {
		return err
	}
	r := h.cfg.SpatialRatio()
	shape := []int{1, h.cfg.LatentChannels, nl, h.height / r, h.width / r}
	z := h.latents[nl]
	st := &pixelStats{ref: h.refPix[nl], keep: h.refPix[nl] == nil && h.compare}
	st.compare = st.ref != nil
	compared := st.compare
	ctx := context.Background()
	tm, err := timeRuns(h.c.Warmup, h.c.Iters, func() error {
		st.got, st.nonFinite, st.sum = 0, 0, 0
		err := dec.Decode(ctx, z, shape, st.add)
		st.keep, st.compare = false, false // only the first run keeps or compares its pixels
		return err
	})
	if err != nil {
		return err
	}
	if st.kept != nil {
		h.refPix[nl] = st.kept
	}
	if compared {
		fmt.Printf("h3vae[%s]:   pixels vs the first configuration: max abs %.4g, relative L2 %.4g\n", tag, st.maxAbs, math.Sqrt(st.errSq/st.refSq))
	}
	med := tm.Median()
	gflop := h3vaeGFLOP(h.cfg, plan.Chunks, h.height, h.width, h.tile)
	fmt.Printf("h3vae[%s]: %d frames (asked %d) = %d latents, %d clips -> %d frames %dx%d; first run (compile+run) %.2f s\n",
		tag, nf, req, nl, plan.Chunks, st.got, h.height, h.width, tm.First)
	fmt.Printf("h3vae[%s]:   decode min %.3f s, median %.3f s over %d runs; %.0f GFLOP -> %.0f TFLOP/s at the median\n",
		tag, tm.Min(), med, h.c.Iters, gflop, gflop/med/1e3)
	fmt.Printf("h3vae[%s]:   peak device memory %d MiB (nvidia-smi, this process, incl. CUDA context), peak host RSS %d MiB; mean pixel %.6f, NaN %d\n",
		tag, tm.PeakGPU, tm.PeakHost, st.sum/float64(3*st.got*h.height*h.width), st.nonFinite)
	return nil
}

// pixelStats accumulates a decode's streamed frames: count, sum and NaNs, and optionally keeps the
// pixels or compares them with a reference.
type pixelStats struct {
	got, nonFinite       int
	sum                  float64
	keep, compare        bool
	kept, ref            []float32
	off                  int
	errSq, refSq, maxAbs float64
}

func (s *pixelStats) add(f h3video.Frames) error {
	p := f.Pixels()
	if s.keep {
		s.kept = append(s.kept, p...)
	} else if s.compare {
		for i, v := range p {
			e := float64(v - s.ref[s.off+i])
			s.errSq += e * e
			s.refSq += float64(s.ref[s.off+i]) * float64(s.ref[s.off+i])
			s.maxAbs = max(s.maxAbs, math.Abs(e))
		}
		s.off += len(p)
	}
	var sum float64
	bad := 0
	for _, v := range p {
		if math.IsNaN(float64(v)) {
			bad++
		}
		sum += float64(v)
	}
	s.nonFinite += bad
	s.sum += sum
	s.got += f.Count
	return nil
}
