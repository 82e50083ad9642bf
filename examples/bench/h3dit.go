package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/internal/fusedops"
	"fastvideo/internal/hostmath"
	"fastvideo/quant"
)

var (
	h3ditFlags = newDiTFlags("h3dit", " (multiple of 32)", 124, "(17n+5)", 93,
		"prompt tokens (93 gives the 14,937-row document at 832x480x124)")
	h3ditCached    = flag.Bool("h3dit-cached", true, "h3dit: also time forwards with a prepared AdaLN step cache")
	h3ditQBits     = flag.Int("h3dit-quant-bits", 0, "h3dit: 8, 6 or 4 quantizes the six core linears of every block (MLX affine, group 64; random words, scales and biases drawn on the device); 0 keeps them dense")
	h3ditVSA       = flag.Float64("h3dit-vsa", -1, "h3dit: also time the forward with Video Sparse Attention at this sparsity (e.g. 0.9, FastH3's; the random to_gate_compress gates on); negative: dense only")
	h3ditShards    = flag.Int("h3dit-shards", 1, "h3dit: split the joint blocks tensor-parallel into this many shards (heads and FFN width): on a backend with that many devices, shard k on device k and each block one SPMD program with its partial outputs all-reduced; with fewer, the shards one after another on device 0 with their partials summed (the reference, and its overhead). The run prints which path ran")
	h3ditShardRef  = flag.Bool("h3dit-shards-snr", true, "h3dit: with -h3dit-shards above 1, then draw the one-shard model from the same seed, run the same inputs (dense, and VSA with -h3dit-vsa) and report the sharded outputs' SNR against it")
	h3ditVSATile   = flag.Int("h3dit-vsa-tile", 64, "h3dit: VSA tile size, 64 (trained) or 256")
	h3ditVSAFine   = flag.String("h3dit-vsa-kernel", "auto", "h3dit: the VSA fine stage (h3.VSA.Kernel): auto (the Triton kernel where it runs), gather, triton or mosaic")
	h3ditGroup     = flag.Int("h3dit-group", 0, "h3dit: joint blocks per XLA program (h3.Options.BlockGroup; 0: h3.DefaultBlockGroup for dense forwards and 1 for VSA ones, 1: one block per program)")
	h3ditFP8Ref    = flag.Bool("h3dit-fp8-snr", true, "h3dit: with -h3dit-fp8, first run one forward of the dense model drawn from the same seed and report the FP8 output's SNR against it")
	h3ditQKGraph   = flag.Bool("h3dit-qk-graph", false, "h3dit: run the q/k RMSNorm and rotation as XLA's fusions of graph ops even where its Triton kernel runs (h3.Options.QKPass fusedops.FormGraph: the baseline the kernel is timed against)")
	h3ditNormGraph = flag.Bool("h3dit-norm-graph", false, "h3dit: run the joint blocks' pre-norms (RMSNorm, modulation, the FFN's with the gated residual) as XLA's fusions of graph ops even where their Triton kernels run (h3.Options.NormPass fusedops.FormGraph: the baseline)")
	h3ditFP8       = flag.String("h3dit-fp8", "", "h3dit: auto, emulated or native converts the six core linears of every joint block to FP8 e4m3fn (h3.Options.FP8) with that graph (quant.FP8Path; auto: native where the backend has F8E4M3FN); empty keeps them in the compute dtype")
)

func init() {
	register("h3dit", func(b compute.Backend, c common) error {
		cfg := h3.ReleaseConfig()
		if *h3ditFlags.layers > 0 {
			cfg.NumLayers = *h3ditFlags.layers
		}
		if *h3ditFlags.tiny {
			cfg.HiddenSize, cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.FFNDim = 64, 2, 32, 128
			cfg.TextDim, cfg.TimeEmbedHiddenDim, cfg.TimeEmbedDim, cfg.RopeFreqDim = 32, 64, 32, 4
		}
		dt, err := h3ditFlags.dtype()
		if err != nil {
			return fmt.Errorf("h3dit bench: %w", err)
		}
		var scheme *quant.Scheme
		switch *h3ditQBits {
		case 0:
		case 4, 6, 8:
			scheme = &quant.Scheme{Bits: *h3ditQBits, GroupSize: quant.DefaultGroupSize}
		default:
			return badFlag("h3dit bench: -h3dit-quant-bits %d; use 8, 6, 4 or 0 (dense)", *h3ditQBits)
		}
		return benchH3DiT(b, cfg, dt, scheme, *h3ditFlags.height, *h3ditFlags.width, *h3ditFlags.frames, *h3ditFlags.text, c)
	})
}

// h3ditTFLOP counts one forward's matmul FLOPs over the joint blocks (Q, K, V, O projections, SwiGLU,
// QKᵀ and PV), the work that dominates; AdaLN projections, input/output heads and elementwise work are
// left out (together < 0.1 %). The refined prompt is cached across steps, as FastVideo does.
func h3ditTFLOP(cfg h3.Config, rows int) float64 {
	l, d, inner, f := float64(rows), float64(cfg.HiddenSize), float64(cfg.InnerDim()), float64(cfg.FFNDim)
	block := l*(8*d*inner+6*d*f) + 4*l*l*inner
	return float64(cfg.NumLayers) * block / 1e12
}

// h3ditPass says which form of a fused elementwise pass the forwards run (h3.Options.QKPass, NormPass):
// graph ops where the kernel cannot run (kernelErr) or where flag forces them, else the Triton kernels.
func h3ditPass(kernelErr error, forceGraph bool, flag string) string {
	switch {
	case kernelErr != nil:
		return "XLA's fusions of graph ops (" + kernelErr.Error() + ")"
	case forceGraph:
		return "XLA's fusions of graph ops (-" + flag + ")"
	}
	return "the Triton kernels"
}

func benchH3DiT(b compute.Backend, cfg h3.Config, dt dtypes.DType, scheme *quant.Scheme, height, width, frames, textTokens int, c common) error {
	if err := c.medianIters("h3dit"); err != nil {
		return err
	}
	doc, err := newH3DiTDocument(height, width, frames, textTokens)
	if err != nil {
		return err
	}
	lay := doc.lay
	path, err := attention.Resolve(b, dt, cfg.AttentionHeadDim, c.Attention)
	if err != nil {
		return err
	}
	fmt.Printf("h3dit: %d layers, hidden %d, %d heads x %d, FFN %d, %s; %dx%dx%d + %d text tokens -> %d rows (%d video, %d audio); attention path %s\n",
		cfg.NumLayers, cfg.HiddenSize, cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.FFNDim, dt,
		width, height, frames, textTokens, lay.SequenceLength, len(lay.VideoIndices), len(lay.AudioIndices), path)
	fmt.Printf("h3dit: q/k RMSNorm and rotation: %s; pre-norms: %s\n",
		h3ditPass(fusedops.QKNormRopeKernel(b, dt, dt, cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.RotaryDim()), *h3ditQKGraph, "h3dit-qk-graph"),
		h3ditPass(fusedops.NormModulateKernel(b, dt, dt, cfg.HiddenSize), *h3ditNormGraph, "h3dit-norm-graph"))

	var denseVideo []float32
	if *h3ditFP8 != "" && *h3ditFP8Ref && scheme == nil {
		if denseVideo, err = denseH3DiTVideo(b, cfg, dt, doc, textTokens, c); err != nil {
			return err
		}
	}
	m, weightsLabel, err := newRandomH3DiT(b, cfg, dt, scheme, c)
	if err != nil {
		return err
	}
	defer m.Close()
	in, text, err := h3ditInputs(m, cfg, doc, textTokens, c)
	if err != nil {
		return err
	}
	defer text.Close()

	measure := func(label string, in h3.ForwardInputs) ([]float32, error) {
		return measureH3DiT(b, m, in, label, weightsLabel, h3ditTFLOP(cfg, lay.SequenceLength), c)
	}
	video, err := measure("adaln per step", in)
	if err != nil {
		return err
	}
	if denseVideo != nil {
		fmt.Printf("h3dit: FP8 (%s) video output vs the dense %s model from the same seed: SNR %.1f dB\n",
			weightsLabel, dt, hostmath.SNRdB(video, denseVideo))
	}
	if *h3ditCached {
		cache, err := m.PrepareAdaLN(doc.video, doc.audio)
		if err != nil {
			return err
		}
		defer cache.Close()
		in.AdaLN = cache
		if _, err := measure("adaln cached", in); err != nil {
			return err
		}
	}
	if *h3ditVSA < 0 {
		return nil
	}
	in.VSA = h3.LayoutVSA(lay, *h3ditVSA, *h3ditVSATile, attention.ModeExempt)
	if in.VSA.Kernel, err = attention.ParseSparseKernel(*h3ditVSAFine); err != nil {
		return fmt.Errorf("h3dit bench: -h3dit-vsa-kernel: %w", err)
	}
	vsaVideo, err := measureH3DiTVSA(b, m, cfg, dt, in, weightsLabel, c)
	if err != nil || *h3ditShards == 1 || !*h3ditShardRef || scheme != nil || *h3ditFP8 != "" {
		return err
	}
	// The tensor-parallel forwards (each device its heads, the VSA fine stage included) against the
	// model they split, drawn from the same seed.
	ref, refVSA, err := oneShardH3DiT(b, cfg, dt, doc, textTokens, in.VSA, c)
	if err != nil {
		return err
	}
	fmt.Printf("h3dit: %d shards against one, same seed and inputs: dense video SNR %.1f dB, VSA video SNR %.1f dB\n",
		*h3ditShards, hostmath.SNRdB(video, ref), hostmath.SNRdB(vsaVideo, refVSA))
	return nil
}

// measureH3DiTVSA times m's forward with in's VSA and says which fine stage runs.
func measureH3DiTVSA(b compute.Backend, m *h3.Model, cfg h3.Config, dt dtypes.DType, in h3.ForwardInputs, weightsLabel string, c common) ([]float32, error) {
	tl, err := in.VSA.Tiling()
	if err != nil {
		return nil, fmt.Errorf("h3dit bench: %w", err)
	}
	k := attention.TopKTiles(*h3ditVSA, tl.NumVideo)
	fine, label := "the Triton kernel", fmt.Sprintf("vsa %g E%d", *h3ditVSA, *h3ditVSATile)
	switch err := attention.TritonVSA(b, dt, cfg.AttentionHeadDim, *h3ditVSATile); {
	case in.VSA.Kernel == attention.SparseMosaic:
		fine, label = "the Mosaic GPU kernel", label+" mosaic"
		if err := attention.MosaicVSA(b, dt, cfg.NumAttentionHeads, cfg.AttentionHeadDim, tl, k); err != nil {
			return nil, fmt.Errorf("h3dit bench: -h3dit-vsa-kernel mosaic: %w", err)
		}
	case in.VSA.Kernel == attention.SparseGather:
		fine, label = "gathered tiles (-h3dit-vsa-kernel gather)", label+" gather"
	case err != nil:
		fine = "gathered tiles (" + err.Error() + ")"
	}
	fmt.Printf("h3dit: VSA sparsity %g, E=%d: %d prefix + %d video tiles, top-%d video tiles per video query tile; fine stage: %s\n",
		*h3ditVSA, *h3ditVSATile, tl.NumPrefix, tl.NumVideo, k, fine)
	return measureH3DiT(b, m, in, label, weightsLabel, h3ditVSATFLOP(cfg, tl, k), c)
}

// oneShardH3DiT draws the one-shard model from the bench's seed and returns its dense and VSA (vsa)
// video outputs on the document's inputs.
func oneShardH3DiT(b compute.Backend, cfg h3.Config, dt dtypes.DType, doc *h3ditDocument, textTokens int, vsa *h3.VSA, c common) (dense, sparse []float32, err error) {
	m, err := h3.NewRandom(b, cfg, h3ditOptions(dt, c), int64(c.Seed))
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	in, text, err := h3ditInputs(m, cfg, doc, textTokens, c)
	if err != nil {
		return nil, nil, err
	}
	defer text.Close()
	out, err := m.Forward(in)
	if err != nil {
		return nil, nil, err
	}
	in.VSA = vsa
	outVSA, err := m.Forward(in)
	if err != nil {
		return nil, nil, err
	}
	return out.Video, outVSA.Video, nil
}

// h3ditInputs draws the document's inputs and refines the prompt once on m (text must be closed).
func h3ditInputs(m *h3.Model, cfg h3.Config, doc *h3ditDocument, textTokens int, c common) (h3.ForwardInputs, *h3.TextState, error) {
	randn := randnSource(c.Seed, 0x68336469)
	in := doc.inputs(cfg, randn)
	t0 := time.Now()
	text, err := m.PrepareText(randn(textTokens * cfg.TextDim))
	if err != nil {
		return in, nil, err
	}
	in.TextState = text
	fmt.Printf("h3dit: prompt refined once (compile + run) in %.2f s\n", time.Since(t0).Seconds())
	return in, text, nil
}

// h3ditOptions are the model options every h3dit model of the bench shares (FP8 and quantization aside).
func h3ditOptions(dt dtypes.DType, c common) h3.Options {
	o := h3.Options{DType: dt, Attention: c.Attention, Dispatch: c.Dispatch, BlockGroup: *h3ditGroup}
	if *h3ditQKGraph {
		o.QKPass = fusedops.FormGraph
	}
	if *h3ditNormGraph {
		o.NormPass = fusedops.FormGraph
	}
	return o
}

// denseH3DiTVideo runs one forward of the dense model drawn from the bench's seed, the reference of the
// FP8 model's SNR, and frees the model before the FP8 one is drawn (both would not fit on one H200).
func denseH3DiTVideo(b compute.Backend, cfg h3.Config, dt dtypes.DType, doc *h3ditDocument, textTokens int, c common) ([]float32, error) {
	t0 := time.Now()
	m, err := h3.NewRandom(b, cfg, h3ditOptions(dt, c), int64(c.Seed))
	if err != nil {
		return nil, err
	}
	defer m.Close()
	in, text, err := h3ditInputs(m, cfg, doc, textTokens, c)
	if err != nil {
		return nil, err
	}
	defer text.Close()
	out, err := m.Forward(in)
	if err != nil {
		return nil, err
	}
	fmt.Printf("h3dit: dense %s reference forward for the FP8 SNR in %.1f s (draw, compile, run)\n", dt, time.Since(t0).Seconds())
	return out.Video, nil
}

// h3ditVSATFLOP is h3ditTFLOP with the attention term counted over the pairs VSA computes (full tiles), plus
// VSA's own matmul, each joint block's to_gate_compress projection [inner, D] (57.5 TFLOP of FastH3's release
// forward, 8 % of it).
func h3ditVSATFLOP(cfg h3.Config, tl *attention.Tiling, topK int) float64 {
	l, inner := float64(tl.Rows()), float64(cfg.InnerDim())
	saved := 4 * (l*l - float64(tl.AttendedPairs(topK))) * inner
	gate := 2 * l * float64(cfg.HiddenSize) * inner
	return h3ditTFLOP(cfg, tl.Rows()) + float64(cfg.NumLayers)*(gate-saved)/1e12
}

// h3ditDocument is the packed document a benchmark forward runs: the layout, the row timesteps of step
// 1 of the FastH3 4-step ladders, and the ladders.
type h3ditDocument struct {
	lay          *packing.Layout
	uniq         []float32
	tidx         []uint8
	video, audio []float32
}

func newH3DiTDocument(height, width, frames, textTokens int) (*h3ditDocument, error) {
	geo, err := packing.NewGeometry(height, width, frames)
	if err != nil {
		return nil, fmt.Errorf("h3dit bench: %w", err)
	}
	lay, err := packing.Build(geo.Request(nil, textTokens))
	if err != nil {
		return nil, fmt.Errorf("h3dit bench: %w", err)
	}
	// FastH3 4-step ladder (schedule.NewH3Schedule(4)), step 1: video t = 1 − 36/37, audio t = 0.1.
	d := &h3ditDocument{lay: lay,
		video: []float32{0, 0.027027010917663574, 0.07692307233810425, 0.19999998807907104},
		audio: []float32{0, 0.10000002384185791, 0.25, 0.5},
	}
	d.uniq, d.tidx = packing.RowTimesteps(lay, d.video[1], d.audio[1], packing.ConditionVideoTimestep(d.video[1]), 1)
	return d, nil
}

// inputs draws the document's random video and audio latents and fills its rows' tags and positions.
func (d *h3ditDocument) inputs(cfg h3.Config, randn func(int) []float32) h3.ForwardInputs {
	lay := d.lay
	in := h3.ForwardInputs{
		VideoRows: randn(len(lay.VideoIndices) * cfg.VideoPatchDim()),
		AudioRows: randn(len(lay.AudioIndices) * cfg.AudioInChannels),
		Timesteps: d.uniq, VideoIndices: lay.VideoIndices, AudioIndices: lay.AudioIndices, TextIndices: lay.TextIndices,
	}
	in.TimestepIndices = make([]int32, lay.SequenceLength)
	in.TokenTags = make([]int32, lay.SequenceLength)
	in.PositionIDs = make([]float64, 3*lay.SequenceLength)
	for r := 0; r < lay.SequenceLength; r++ {
		in.TimestepIndices[r], in.TokenTags[r] = int32(d.tidx[r]), int32(lay.TokenTags[r])
		copy(in.PositionIDs[3*r:], lay.PositionIDs[r][:])
	}
	return in
}

// newRandomH3DiT draws the model's weights on the device (dense, or the core linears quantized with
// scheme) and prints their resident memory; the label names the weights in the summaries.
func newRandomH3DiT(b compute.Backend, cfg h3.Config, dt dtypes.DType, scheme *quant.Scheme, c common) (*h3.Model, string, error) {
	weightsLabel := "dense " + dt.String()
	if scheme != nil {
		weightsLabel = fmt.Sprintf("int%d", scheme.Bits)
		fmt.Printf("h3dit: core linears int%d group %d (%s: dispatch %+v; zero floor = %d rows)\n",
			scheme.Bits, scheme.GroupSize, quant.DQGEMMEnv, c.Dispatch, quant.DefaultDQGEMMFloor)
	}
	opts := h3ditOptions(dt, c)
	if *h3ditFP8 != "" {
		path, err := quant.ParseFP8Path(*h3ditFP8)
		if err != nil {
			return nil, "", badFlag("h3dit bench: -h3dit-fp8: %w", err)
		}
		opts.FP8, opts.Dispatch.FP8 = true, path
		weightsLabel = "fp8 " + path.String()
		fmt.Printf("h3dit: joint-block core linears in FP8 e4m3fn, %s graph (backend declares F8E4M3FN: %v)\n",
			path, quant.SupportsNativeFP8(b))
	}
	baseGPU := gpuMemMiB()
	t0 := time.Now()
	opts.Shards = *h3ditShards
	var m *h3.Model
	var err error
	if scheme != nil {
		m, err = h3.NewRandomQuantized(b, cfg, opts, *scheme, int64(c.Seed))
	} else {
		m, err = h3.NewRandom(b, cfg, opts, int64(c.Seed))
	}
	if err != nil {
		return nil, "", err
	}
	if tp := m.TensorParallel(); tp != "" {
		fmt.Printf("h3dit: tensor parallel: %s\n", tp)
		path := "in turn on one device"
		if strings.Contains(tp, "SPMD") {
			path = "SPMD over devices"
		}
		weightsLabel += fmt.Sprintf(", %d shards %s", *h3ditShards, path)
	}
	fmt.Printf("h3dit: random weights drawn on the device in %.2f s; device memory %d MiB (before weights %d MiB); %s\n",
		time.Since(t0).Seconds(), gpuMemMiB(), baseGPU, allocatorStats(b))
	wm := m.WeightMemory()
	core := wm.QuantizedLinears + wm.FP8Linears + wm.DenseCoreLinears
	fmt.Printf("h3dit: resident weights %.2f GiB (%s): core linears %.2f GiB quantized + %.2f GiB FP8 + %.2f GiB dense, AdaLN projections %.2f GiB, other %.2f GiB; without the AdaLN projections (a cache-carrying conversion) %.2f GiB\n",
		gib(wm.Total), weightsLabel, gib(wm.QuantizedLinears), gib(wm.FP8Linears), gib(wm.DenseCoreLinears), gib(wm.AdaLN),
		gib(wm.Total-core-wm.AdaLN), gib(wm.Total-wm.AdaLN))
	return m, weightsLabel, nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// measureH3DiT times m's forward on in, prints the measurement and a summary line and returns the
// video output.
func measureH3DiT(b compute.Backend, m *h3.Model, in h3.ForwardInputs, label, weightsLabel string, tflop float64, c common) ([]float32, error) {
	tag := "h3dit[" + label + "]"
	tm, out, err := timeForward(c, tag, func() (h3.ForwardOutputs, error) { return m.Forward(in) })
	if err != nil {
		return nil, err
	}
	reportForward(tag, tm, tflop, "video", out.Video)
	fmt.Printf("h3dit summary [%s, %s]: forward median %.3f s, resident weights %.2f GiB, peak device %d MiB (nvidia-smi); %s\n",
		weightsLabel, label, tm.Median(), gib(m.WeightMemory().Total), tm.PeakGPU, allocatorStats(b))
	return out.Video, nil
}
