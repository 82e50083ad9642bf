package fastvideo

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/tokenizer"
	"fastvideo/internal/tokenizer/qwen3data"
	"fastvideo/internal/weights"
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
func tinyDiT() h3.Config {
	return h3.Config{
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

// tinyComponents builds tiny-h3's components from synthetic sources. The sources stand in for the
// checkpoint files of a real model (a real run's page cache), so they are made once per generator
// and bound to the backend on every load.
type tinyComponents struct {
	spec *ModelSpec

	once                  sync.Once
	dit, video, audio, te *weights.Synthetic
}

func newTinyComponents(spec *ModelSpec) *tinyComponents { return &tinyComponents{spec: spec} }

func (c *tinyComponents) sources() {
	c.once.Do(func() {
		seed := int64(tinyWeightsSeed)
		c.dit = weights.NewSynthetic(seed, shapeTable(h3.Params(c.spec.DiT)), nil)
		c.video = weights.NewSynthetic(seed+1, videoDecoderShapes(tinyVideoVAE()), nil)
		c.audio = weights.NewSynthetic(seed+2, audioDecoderShapes(tinyAudioVAE()), initAudioVAE)
		c.te = weights.NewSynthetic(seed+3, textEncoderShapes(tinyTextEncoder()), nil)
	})
}

func (c *tinyComponents) describe() string { return "tiny-h3 (random weights, in memory)" }

func (c *tinyComponents) check() error { return nil }

func (c *tinyComponents) adalnManifest() *h3.AdaLNManifest { return nil }

func (c *tinyComponents) loadTokenizer() (*tokenizer.Tokenizer, error) { return qwen3data.Load() }

func (c *tinyComponents) textEncoder() (qwen3vl.Config, func() (weights.Source, func() error, error), string, error) {
	c.sources()
	return tinyTextEncoder(), inMemory(c.te), fmt.Sprintf("tiny-h3:seed=%d:v1", tinyWeightsSeed), nil
}

func (c *tinyComponents) loadDiT(b compute.Backend, dt dtypes.DType) (*h3.Model, error) {
	c.sources()
	return h3.FromSource(b, c.spec.DiT, c.dit, h3.Options{DType: dt})
}

func (c *tinyComponents) loadVideoVAE(b compute.Backend, dt dtypes.DType) (*h3video.Decoder, error) {
	c.sources()
	return h3video.FromSource(b, tinyVideoVAE(), c.video, h3video.Options{DType: dt})
}

func (c *tinyComponents) loadAudioVAE(b compute.Backend) (*h3audio.Decoder, error) {
	c.sources()
	return h3audio.FromSource(b, tinyAudioVAE(), c.audio, h3audio.Options{})
}

// videoDecoderShapes lists the released names and shapes of the video VAE decoder for cfg (the
// table h3video declares: post_quant_conv and the ViT decoder; the encoder is not needed).
func videoDecoderShapes(c h3video.Config) map[string][]int {
	lc, dim := c.LatentChannels, c.Width()
	inner := dim * c.DecoderFFNMult
	patchOut := c.OutChannels * c.TemporalRatio() * c.SpatialRatio() * c.SpatialRatio()
	out := map[string][]int{
		"post_quant_conv.weight":  {lc, lc, 1, 1, 1},
		"post_quant_conv.bias":    {lc},
		"decoder.proj_in.weight":  {dim, lc},
		"decoder.proj_in.bias":    {dim},
		"decoder.register_tokens": {1, c.DecoderNumRegisters, dim},
		"decoder.norm_out.weight": {dim},
		"decoder.norm_out.bias":   {dim},
		"decoder.proj_out.weight": {patchOut, dim},
		"decoder.proj_out.bias":   {patchOut},
	}
	for i := 0; i < c.DecoderNumLayers; i++ {
		p := fmt.Sprintf("decoder.transformer_blocks.%d.", i)
		for name, shape := range map[string][]int{
			"norm1.weight": {dim}, "norm2.weight": {dim}, "scale1": {dim}, "scale2": {dim},
			"attn.to_q.weight": {dim, dim}, "attn.to_q.bias": {dim},
			"attn.to_k.weight": {dim, dim}, "attn.to_k.bias": {dim},
			"attn.to_v.weight": {dim, dim}, "attn.to_v.bias": {dim},
			"attn.to_out.0.weight": {dim, dim}, "attn.to_out.0.bias": {dim},
			"ff.net.0.proj.weight": {2 * inner, dim}, "ff.net.0.proj.bias": {2 * inner},
			"ff.net.2.weight": {dim, inner}, "ff.net.2.bias": {dim},
		} {
			out[p+name] = shape
		}
	}
	return out
}

// audioDecoderShapes is h3audio's declared decoder table.
func audioDecoderShapes(c h3audio.Config) map[string][]int {
	return shapeTable(h3audio.Params(c))
}

// shapeTable turns a model's parameter table into the name -> shape table of a synthetic source; err
// is the model's, which for tiny's constant configs tests rule out.
func shapeTable(list weights.Shapes, err error) map[string][]int {
	if err != nil {
		panic(fmt.Sprintf("fastvideo: tiny config: %v", err))
	}
	return list.Map()
}

// inMemory is the weight-source opener of a synthetic source, which needs no closing.
func inMemory(src weights.Source) func() (weights.Source, func() error, error) {
	return func() (weights.Source, func() error, error) { return src, func() error { return nil }, nil }
}

// numel is the number of elements of a tensor of the given shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// initAudioVAE keeps a random BigVGAN's waveform finite and mostly unclipped: the real
// anti-aliasing filters, weight-norm gains near 1 and SnakeBeta log-scales near 0 (the audio
// benchmark's choices); other tensors take the default scales.
func initAudioVAE(name string, shape []int, rng *rand.Rand) []float32 {
	n := numel(shape)
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

// textEncoderShapes is the text stack a Qwen3-VL encoder reads: the embedding and the layers up to
// the output index, under the released prefix.
func textEncoderShapes(c qwen3vl.Config) map[string][]int {
	out := map[string][]int{qwen3vl.DefaultPrefix + "embed_tokens.weight": {c.VocabSize, c.HiddenSize}}
	shapes := qwen3vl.LayerTensorShapes(c)
	for i := 0; i < c.OutputHiddenStateIndex; i++ {
		for k, n := range qwen3vl.LayerTensorNames {
			out[fmt.Sprintf("%slayers.%d.%s", qwen3vl.DefaultPrefix, i, n)] = shapes[k]
		}
	}
	return out
}
