package h3

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/fastvideo/framefilter"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/tokenizer"
	"fastvideo/internal/tokenizer/qwen3data"
	"fastvideo/internal/weights"
	"fastvideo/schedule"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// tiny-h3 is the whole H3 pipeline at toy width with deterministic random weights made in memory:
// no download, no files, seconds on two CPU cores. It exercises every code path of a real run
// (the real Qwen3 tokenizer, a Qwen3-VL text stack, the joint DiT with both schedulers and the AdaLN
// cache, the ViT video VAE with its 17-frame clips, the BigVGAN audio VAE, the MP4 mux), but its
// output is noise: the weights are random.
//
// The geometry contract of the real model is kept wherever packing or the decoders depend on it:
// video latents have the DiT's in_channels (24) at 1/16 of the pixel size and 1/4 of the frame
// rate inside 17-frame clips; audio latents have the DiT's audio_in_channels (32) at a hop of 800
// samples at 32 kHz; the text encoder's hidden size is the DiT's text_dim and its vocabulary covers
// every id of the real tokenizer.

// tinyWeightsSeed seeds every tiny-h3 tensor (each tensor depends only on this and its own name).
const tinyWeightsSeed = 0x483354696e79 // "H3Tiny"

// tinyDiT is the H3 architecture at toy width: the h3_dit_tiny fixture's configuration (2 heads of
// 64, hidden 128, 2 layers, 1 refiner layer).
func tinyDiT() h3dit.Config {
	return h3dit.Config{
		NumLayers: 2, NumRefinerLayers: 1, HiddenSize: 128, NumAttentionHeads: 2, AttentionHeadDim: 64,
		FFNDim: 256, InChannels: 24, OutChannels: 24, AudioInChannels: 32, PatchSize: []int{1, 2, 2}, TextDim: 64,
		FreqDim: 256, TimeEmbedHiddenDim: 64, TimeEmbedDim: 32, RopeFreqDim: 8, RopeTheta: 10000,
		NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5,
	}
}

// tinyVideoVAE is a 2-layer, 32-wide ViT decoder with the released temporal and spatial geometry.
func tinyVideoVAE() h3video.Config {
	c := h3video.DefaultConfig()
	c.BlockOutChannels = []int{8, 16, 16, 16}
	c.LayersPerBlock = 1
	c.SpatialDownsampleFactors = []int{2, 2, 2, 2}
	c.TemporalDownsampleFactors = []int{1, 2, 2, 1}
	c.NormNumGroups = 4
	c.DecoderNumLayers, c.DecoderNumHeads, c.DecoderHeadDim = 2, 2, 16
	c.LatentChannels = tinyDiT().InChannels
	c.LatentsMean = make([]float64, c.LatentChannels)
	c.LatentsStd = make([]float64, c.LatentChannels)
	for i := range c.LatentsStd {
		c.LatentsStd[i] = 1
	}
	return c
}

// tinyAudioVAE is a 3-stage BigVGAN (rates 10·10·8 = 800, 32 -> 4 channels) with one AMP block per
// stage.
func tinyAudioVAE() h3audio.Config {
	return h3audio.Config{
		EncoderDim: 4, EncoderRates: []int{8, 10, 10}, LatentDim: 64, LatentChannels: tinyDiT().AudioInChannels,
		NumAttentionHeads: 2, DecoderDim: 32, DecoderRates: []int{10, 10, 8}, DecoderKernelSizes: []int{20, 20, 16},
		ResblockKernelSizes: []int{3}, ResblockDilationSizes: [][]int{{1}}, SamplingRate: 32000,
	}
}

// tinyTextEncoder is a 2-layer Qwen3-VL text stack whose hidden size is the DiT's text_dim and whose
// vocabulary is the released one (151,936 rows, covering the tokenizer's 151,669 ids).
func tinyTextEncoder() qwen3vl.Config {
	return qwen3vl.Config{
		VocabSize: 151936, HiddenSize: tinyDiT().TextDim, IntermediateSize: 128, NumHiddenLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 5e6,
		MRoPESection: [3]int{4, 2, 2}, MRoPEInterleaved: true, OutputHiddenStateIndex: 2,
	}
}

// tinyVision is a 2-block, 32-wide Qwen3-VL vision tower with the released patch geometry (16-pixel
// patches merged 2x2) and special token ids, emitting the text stack's width.
func tinyVision() qwen3vl.VisionConfig {
	vc := qwen3vl.Q32BVision()
	vc.Depth, vc.HiddenSize, vc.IntermediateSize, vc.NumHeads = 2, 32, 64, 2
	vc.OutHiddenSize, vc.NumPositionEmbeddings, vc.DeepstackVisualIndexes = tinyTextEncoder().HiddenSize, 16, []int{0}
	return vc
}

// tinyProcessor is the released image processor with an area range that tiny canvases fit:
// 64x96 stays 64x96 (6 vision tokens).
func tinyProcessor() qwen3vl.ProcessorConfig {
	pc := qwen3vl.Q32BProcessor()
	pc.MinPixels, pc.MaxPixels = 32*32, 256*256
	return pc
}

// TinyName is the built-in toy model of the family.
const TinyName = "tiny-h3"

// tinySpec is tiny-h3's spec: the toy configs, the released ladders, and any aligned clip length
// up to the released maximum (short clips are the point of a toy model).
func tinySpec() *Spec {
	s := &Spec{
		ModelInfo: family.ModelInfo{Name: TinyName, Family: FamilyName, Variant: TinyName,
			Description:     "The H3 architecture at toy width with seeded random weights made in memory (no files; its output is noise), for tests and smoke runs",
			AudioSampleRate: tinyAudioVAE().SamplingRate, AudioChannels: packing.AudioChannels},
		DiT: tinyDiT(), VAE: tinyVideoVAE(), AudioVAE: tinyAudioVAE(),
		VideoShift: schedule.H3VideoShift, AudioShift: schedule.H3AudioShift, WeightsDType: api.F32,
		MinAlignedFrames: 5, MaxAlignedFrames: releasedMaxFrames, MaxSide: tinyMaxSide,
	}
	s.setPresets("tiny_t2va", tinyH3Presets)
	vc, pc := tinyVision(), tinyProcessor()
	s.setKeyframes(&vc, &pc)
	s.rife, _ = framefilter.TinyRIFE(tinyWeightsSeed + 4) // a fixed, valid table: it cannot fail
	return s
}

// tinySource is tiny-h3's synthetic weights. They stand in for the checkpoint files of a real
// model (a real run's page cache), so they are made once per generator and bound to the backend
// on every load.
type tinySource struct {
	checkpointText
	spec *Spec

	once                                   sync.Once
	err                                    error
	dit, video, audio, te, vision, encoder *weights.Synthetic
}

func newTinySource(spec *Spec) *tinySource { return &tinySource{spec: spec} }

// sources makes the synthetic weights from each model's own parameter table, once.
func (c *tinySource) sources() error {
	c.once.Do(func() {
		seed := int64(tinyWeightsSeed)
		s := c.spec
		var errs [6]error
		c.dit, errs[0] = familykit.Synthetic(seed, h3dit.Params, s.DiT, nil)
		c.video, errs[1] = familykit.Synthetic(seed+1, h3video.Params, s.VAE, nil)
		c.audio, errs[2] = familykit.Synthetic(seed+2, h3audio.Params, s.AudioVAE, initAudioVAE)
		c.te, errs[3] = familykit.Synthetic(seed+3, qwen3vl.Params, tinyTextEncoder(), nil)
		c.vision, errs[4] = familykit.Synthetic(seed+5, qwen3vl.VisionParams, *s.Vision, nil)
		c.encoder, errs[5] = familykit.Synthetic(seed+6, h3video.EncoderParams, s.VAE, nil)
		c.err = errors.Join(errs[:]...)
	})
	return c.err
}

func (c *tinySource) Describe() string { return "tiny-h3 (random weights, in memory)" }

func (c *tinySource) Check() error { return nil }

func (c *tinySource) loadTokenizer() (*tokenizer.Tokenizer, error) { return qwen3data.Load() }

func (c *tinySource) textWeights() (familykit.WeightOpener, string, error) {
	if err := c.sources(); err != nil {
		return nil, "", err
	}
	return familykit.InMemory(c.te), fmt.Sprintf("tiny-h3:seed=%d:v1", tinyWeightsSeed), nil
}

func (c *tinySource) loadDiT(e *family.Engine, opts h3dit.Options, l *familykit.LoRA) (*h3dit.Model, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return familykit.BuildMerged(l, c.spec.loraShapes, func(onBind func(*weights.Param) error) (*h3dit.Model, error) {
		opts.OnBind = onBind
		return h3dit.FromSource(e.Backend, c.spec.DiT, c.dit, opts)
	})
}

func (c *tinySource) loadVideoVAE(e *family.Engine) (*h3video.Decoder, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return h3video.FromSource(e.Backend, c.spec.VAE, c.video, h3video.Options{DType: e.DType, Attention: e.Attention})
}

func (c *tinySource) loadAudioVAE(e *family.Engine) (*h3audio.Decoder, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return h3audio.FromSource(e.Backend, c.spec.AudioVAE, c.audio, h3audio.Options{})
}

// initAudioVAE keeps a random BigVGAN's waveform finite and mostly unclipped: the real
// anti-aliasing filters, weight-norm gains near 1 and SnakeBeta log-scales near 0 (the audio
// benchmark's choices); other tensors take the default scales.
func initAudioVAE(name string, shape []int, rng *rand.Rand) []float32 {
	n := modelkit.Elements(shape)
	v := make([]float32, n)
	switch {
	case strings.HasSuffix(name, ".filter"):
		f := h3audio.KaiserSincFilter(0.25, 0.3, n)
		copy(v, f)
	case name == "decoder.conv_post.weight_g":
		v[0] = 0.3
	case strings.HasSuffix(name, ".weight_g"):
		for i := range v {
			v[i] = float32(1 + 0.1*rng.NormFloat64())
		}
	case strings.HasSuffix(name, ".act.alpha"), strings.HasSuffix(name, ".act.beta"):
		for i := range v {
			v[i] = float32(0.1 * rng.NormFloat64())
		}
	default:
		return nil
	}
	return v
}

func (c *tinySource) loadVision(e *family.Engine, cfg qwen3vl.VisionConfig) (*qwen3vl.Vision, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return qwen3vl.NewVision(e.Backend, cfg, c.vision)
}

func (c *tinySource) loadVideoEncoder(e *family.Engine) (*h3video.Encoder, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return h3video.EncoderFromSource(e.Backend, c.spec.VAE, c.encoder, encoderOptions)
}
