package main

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/dit/wan"
	"fastvideo/schedule"
)

var (
	wanditModel = flag.String("wandit-model", "1.3b", "wandit: transformer geometry, 1.3b (Wan2.1/FastWan2.1), 14b (Wan2.1-14B, each A14B expert) or 5b (Wan2.2-TI2V)")
	wanditFlags = newDiTFlags("wandit", "", 81, "(4n+1)", 512, "text rows (Wan pads the prompt to 512)")
	wanditSteps = flag.String("wandit-steps", "1000,757,522", "wandit: DMD timesteps of the FastWan denoise loop (empty: skip it)")
	wanditRuns  = flag.Int("wandit-denoise-runs", 3, "wandit: timed runs of the whole denoise loop")
	wanditVSA   = flag.Float64("wandit-vsa", -1, "wandit: also time the forward and the denoise with Video Sparse Attention at this sparsity (0.8: FastWan2.1-1.3B's; random to_gate_compress gates); negative: dense only")
)

func init() {
	register("wandit", func(b compute.Backend, c common) error {
		var cfg wan.Config
		vaeStride := 8
		switch strings.ToLower(*wanditModel) {
		case "1.3b":
			cfg = wan.Wan21T2V1_3B()
		case "14b":
			cfg = wan.Wan21T2V14B()
		case "5b":
			cfg, vaeStride = wan.Wan22TI2V5B(), 16
		default:
			return badFlag("wandit bench: -wandit-model %q is not 1.3b, 14b or 5b", *wanditModel)
		}
		if *wanditFlags.layers > 0 {
			cfg.NumLayers = *wanditFlags.layers
		}
		if *wanditFlags.tiny {
			cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.FFNDim, cfg.TextDim = 2, 32, 128, 32
		}
		dt, err := wanditFlags.dtype()
		if err != nil {
			return fmt.Errorf("wandit bench: %w", err)
		}
		var steps []int
		if s := strings.TrimSpace(*wanditSteps); s != "" {
			if steps, err = parseList("wandit-steps", s, strconv.Atoi); err != nil {
				return fmt.Errorf("wandit bench: %w", err)
			}
		}
		return benchWanDiT(b, cfg, dt, vaeStride, *wanditFlags.height, *wanditFlags.width, *wanditFlags.frames, *wanditFlags.text, steps, *wanditRuns, c)
	})
}

func benchWanDiT(b compute.Backend, cfg wan.Config, dt dtypes.DType, vaeStride, height, width, frames, textRows int,
	steps []int, runs int, c common) error {
	if err := c.medianIters("wandit"); err != nil {
		return err
	}
	if (frames-1)%4 != 0 || height%vaeStride != 0 || width%vaeStride != 0 {
		return fmt.Errorf("wandit bench: %dx%dx%d: frames must be 4n+1 and height/width multiples of the VAE stride %d", width, height, frames, vaeStride)
	}
	lt, lh, lw := (frames-1)/4+1, height/vaeStride, width/vaeStride
	nt, nh, nw, err := cfg.Tokens(lt, lh, lw)
	if err != nil {
		return fmt.Errorf("wandit bench: %w", err)
	}
	tokens := nt * nh * nw
	path, err := attention.Resolve(b, dt, cfg.AttentionHeadDim, c.Attention)
	if err != nil {
		return err
	}
	fmt.Printf("wandit: %d layers, hidden %d, %d heads x %d, FFN %d, %s; %dx%dx%d -> latent %dx%dx%dx%d -> %d tokens (%dx%dx%d) + %d text rows; attention path %s\n",
		cfg.NumLayers, cfg.HiddenSize(), cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.FFNDim, dt,
		width, height, frames, cfg.InChannels, lt, lh, lw, tokens, nt, nh, nw, textRows, path)

	baseGPU := gpuMemMiB()
	t0 := time.Now()
	m, err := wan.NewRandom(b, cfg, wan.Options{DType: dt, Attention: c.Attention}, int64(c.Seed))
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Printf("wandit: random weights drawn on the device in %.2f s; device memory %d MiB (before weights %d MiB)\n",
		time.Since(t0).Seconds(), gpuMemMiB(), baseGPU)

	randn := randnSource(c.Seed, 0x77616e64)
	latentSize := cfg.InChannels * lt * lh * lw
	t0 = time.Now()
	text, err := m.PrepareText(randn(textRows * cfg.TextDim))
	if err != nil {
		return err
	}
	defer text.Close()
	fmt.Printf("wandit: text embedded once (compile + run) in %.2f s\n", time.Since(t0).Seconds())

	in := wan.ForwardInputs{Latent: randn(latentSize), Frames: lt, Height: lh, Width: lw,
		Timesteps: []float32{757}, TextState: text}
	tflop := cfg.ForwardFLOPs(tokens, textRows) / 1e12
	latent := in.Latent
	if err := benchWanForward(m, in, "wandit", tflop, steps, runs, randn, c); err != nil {
		return err
	}
	if *wanditVSA < 0 {
		return nil
	}
	tl, err := attention.NewTiling(nil, [3]int{nt, nh, nw}, wan.VSATileSize)
	if err != nil {
		return fmt.Errorf("wandit bench: %w", err)
	}
	k := attention.TopKTiles(*wanditVSA, tl.NumVideo)
	fmt.Printf("wandit: VSA sparsity %g: %d tiles of (4,4,4), top-%d per query tile\n", *wanditVSA, tl.NumVideo, k)
	d, layers := float64(cfg.HiddenSize()), float64(cfg.NumLayers)
	saved := 4 * float64(int64(tokens)*int64(tokens)-tl.AttendedPairs(k)) * d * layers / 1e12
	// VSA's own matmul: every block's to_gate_compress projection [D, D] of the attention input.
	gate := 2 * float64(tokens) * d * d * layers / 1e12
	in.Latent, in.VSA = latent, &wan.VSA{Sparsity: *wanditVSA}
	return benchWanForward(m, in, fmt.Sprintf("wandit[vsa %g]", *wanditVSA), tflop-saved+gate, steps, runs, randn, c)
}

// benchWanForward times one forward, then the denoise loop when steps are given.
func benchWanForward(m *wan.Model, in wan.ForwardInputs, tag string, tflop float64, steps []int, runs int, randn func(int) []float32, c common) error {
	tm, out, err := timeForward(c, tag, func() ([]float32, error) { return m.Forward(in) })
	if err != nil {
		return err
	}
	reportForward(tag, tm, tflop, "output", out)
	if len(steps) == 0 {
		return nil
	}
	return benchWanDenoise(m, in, steps, runs, tflop, randn)
}

// benchWanDenoise times FastWan's DMD loop (DmdDenoisingStage in FastVideo's
// fastvideo/pipelines/stages/denoising.py): one conditional forward per timestep (no CFG),
// x0 = x − σ·v, re-noise into the next step; the prompt is embedded once beforehand, as the pipeline does.
func benchWanDenoise(m *wan.Model, in wan.ForwardInputs, steps []int, runs int, tflop float64, randn func(int) []float32) error {
	if runs < 1 {
		return badFlag("wandit bench: -wandit-denoise-runs %d must be positive", runs)
	}
	ladder, err := schedule.NewDMDLadder(steps)
	if err != nil {
		return fmt.Errorf("wandit bench: %w", err)
	}
	n := len(in.Latent)
	noise := make([][]float32, ladder.Steps())
	for k := range noise {
		noise[k] = randn(n)
	}
	var x0 []float32
	totals := make([]float64, runs)
	for r := range totals {
		x := slices.Clone(in.Latent)
		x0 = make([]float32, n)
		t := time.Now()
		for k, ts := range ladder.Timesteps {
			in.Latent, in.Timesteps = x, []float32{float32(ts)}
			v, err := m.Forward(in)
			if err != nil {
				return err
			}
			if err := ladder.PredictX0(k, v, x, x0); err != nil {
				return err
			}
			if k+1 < ladder.Steps() {
				if err := ladder.Renoise(k, x0, noise[k], x); err != nil {
					return err
				}
			}
		}
		totals[r] = time.Since(t).Seconds()
	}
	sort.Float64s(totals)
	med := totals[len(totals)/2]
	total := tflop * float64(ladder.Steps())
	rms, nan := rmsNonFinite(x0)
	fmt.Printf("wandit: FastWan denoise%s %v (sigma %v, no CFG): total min %.3f s, median %.3f s over %d runs (%.3f s per step); %.1f TFLOP -> %.0f TFLOP/s (%.0f%% of %d); x0 rms %.4f, non-finite %d\n",
		vsaLabel(in.VSA), ladder.Timesteps, ladder.Sigmas, totals[0], med, runs, med/float64(ladder.Steps()), total, total/med, 100*total/med/h200DenseTFLOPS, h200DenseTFLOPS, rms, nan)
	return nil
}

// vsaLabel names the attention of a denoise summary.
func vsaLabel(v *wan.VSA) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf(" [VSA sparsity %g]", v.Sparsity)
}
