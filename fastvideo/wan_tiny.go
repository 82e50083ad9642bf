package fastvideo

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	wandit "fastvideo/dit/wan"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/tokenizer/unigram"
	"fastvideo/internal/weights"
	"fastvideo/schedule"
	wanvae "fastvideo/vae/wan"
)

// tiny-wan is the whole Wan text-to-video pipeline at toy width with deterministic random weights
// made in memory: no download, no files, seconds on two CPU cores. It runs every phase of a real
// Wan run (a Unigram tokenizer, a UMT5 encoder zero-padded to 512 rows, the Wan DiT with UniPC +
// classifier-free guidance or the 3-rung DMD ladder, the causal Wan2.1 VAE decoded latent frame by
// latent frame into the H.264 encoder), but its output is noise: the weights are random.
//
// The geometry contract of the real models is kept: the VAE's z_dim is the DiT's in_channels (16,
// Wan2.1's), with Wan2.1's 4x8x8 compression and its latent statistics; the UMT5 width is the DiT's
// text_dim; the prompt is 512 rows.
//
// Its tokenizer is a TOY: no UMT5 vocabulary (256k SentencePiece pieces) is available offline, so
// tinyWanTokenizerJSON builds a small deterministic Unigram vocabulary in code: the T5 special
// tokens, 256 byte-fallback pieces (any UTF-8 text tokenizes), letters, digits and punctuation with
// and without the word-start marker, common suffixes and a few hundred common English words, scored
// so that Viterbi prefers whole words. The ids mean nothing to a real UMT5; they only exercise the
// real tokenizer code (T5's Metaspace pre-tokenizer, NFKC normalization, </s> appended).

const tinyWanName = "tiny-wan"

// tinyWanWeightsSeed seeds every tiny-wan tensor (each tensor depends only on this and its name).
const tinyWanWeightsSeed = 0x57616e54696e79 // "WanTiny"

// tinyWanDiT is the wan21_dit_tiny fixture's configuration: 2 layers, 2 heads of 32, FFN 128,
// 16 latent channels, text_dim 32.
func tinyWanDiT() wandit.Config {
	c := wandit.Wan21T2V1_3B()
	c.NumLayers, c.NumAttentionHeads, c.AttentionHeadDim, c.FFNDim, c.TextDim = 2, 2, 32, 128, 32
	return c
}

// tinyWanVAE is the wan21_vae_tiny fixture's decoder (base_dim 4, one residual block per stage)
// with z_dim = the DiT's in_channels and Wan2.1's latent statistics.
func tinyWanVAE() wanvae.Config {
	c := wanvae.DefaultConfig()
	c.BaseDim, c.NumResBlocks = 4, 1
	c.ZDim = tinyWanDiT().InChannels
	return c
}

// tinyUMT5 is the umt5_tiny fixture's encoder (2 layers, 4 heads of 8, gated-GELU FFN 64, 8 buckets)
// with d_model = the DiT's text_dim and the toy vocabulary's size.
func tinyUMT5(vocab int) umt5.Config {
	return umt5.Config{
		ModelType: "umt5", VocabSize: vocab, DModel: tinyWanDiT().TextDim, DKV: 8, DFF: 64, NumLayers: 2, NumHeads: 4,
		NumBuckets: 8, MaxDistance: 16, FeedForwardProj: "gated-gelu", LayerNormEps: 1e-6,
		PadTokenID: 0, EOSTokenID: 1, Act: "gelu_new", Gated: true,
	}
}

// tinyWanSpec is tiny-wan's specification. Its two presets exercise both Wan samplers on a 48x64,
// 9-frame canvas (3 latent frames of 6x8, 36 DiT tokens): the default runs the FastWan DMD ladder
// (3 forwards), the other 4 UniPC steps with classifier-free guidance (8 forwards).
func tinyWanSpec() *ModelSpec {
	return &ModelSpec{
		Name: tinyWanName, Family: FamilyWan, Variant: tinyWanName,
		Description: "The Wan2.1 architecture at toy width with seeded random weights and a toy tokenizer made in memory (no files; its output is noise), for tests and smoke runs",
		Wan: &WanSpec{
			DiT: tinyWanDiT(), VAE: tinyWanVAE(), TextEncoder: tinyUMT5(len(tinyWanVocab())), TextLen: umt5.DefaultTextLen,
			FlowShift: schedule.Wan21T2V480PShift, WeightsDType: F32,
		},
		DefaultPreset: "tiny_wan_dmd",
		Presets: map[string]Preset{
			"tiny_wan_dmd": {Name: "tiny_wan_dmd", Description: "48x64, 9 frames at 16 fps, 3 DMD steps without guidance (FastWan-style)",
				Height: 48, Width: 64, NumFrames: 9, FPS: 16, Steps: 3, GuidanceScale: 1, Seed: wanDefaultSeed,
				Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps},
			"tiny_wan_t2v": {Name: "tiny_wan_t2v", Description: "48x64, 9 frames at 16 fps, 4 UniPC steps with CFG 5.0 (base-Wan-style)",
				Height: 48, Width: 64, NumFrames: 9, FPS: 16, Steps: 4, GuidanceScale: 5, Seed: wanDefaultSeed,
				Sampler: SamplerUniPC, NegativePrompt: WanNegativePromptEN},
		},
	}
}

// tinyWanWords are the toy vocabulary's whole words.
const tinyWanWords = `a an the and or of in on at to with through into over under near by from for as is are its his her
their it this that red orange yellow green blue purple pink white black gray brown golden silver dark bright
small big large little tiny old young fox cat dog bird horse fish bear wolf deer rabbit man woman girl boy
child people person car boat ship train tree trees forest river sea ocean lake beach mountain hill snow snowy
rain sun sky cloud clouds city street road house field flower flowers grass water fire light night day
morning evening sunset sunrise hour winter summer spring autumn runs running walks walking flies flying swims
swimming jumps jumping dances dancing plays playing sits sitting trots trotting rides looks camera slow
motion cinematic shot close up wide view video scene beautiful style realistic photo paper stream mossy
shallow sails raccoon piano presenter says hello`

// tinyWanVocab is the toy Unigram vocabulary: [piece, score] in id order. Scores are log-
// probability-like: whole words beat spelling them out, a word-start letter beats a bare marker
// plus letter, and every character has a piece, so <unk> and the byte pieces are reached only by
// characters outside the table (byte fallback).
func tinyWanVocab() [][2]any {
	const ws = "\u2581" // SentencePiece's word-start marker
	v := [][2]any{{"<pad>", 0.0}, {"</s>", 0.0}, {"<unk>", 0.0}}
	seen := map[string]bool{}
	add := func(piece string, score float64) {
		if !seen[piece] {
			seen[piece] = true
			v = append(v, [2]any{piece, score})
		}
	}
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), -30) // byte fallback; as text only "<0x41>" literally matches
	}
	add(ws, -4)
	var chars []string
	for c := 'a'; c <= 'z'; c++ {
		chars = append(chars, string(c))
	}
	for c := 'A'; c <= 'Z'; c++ {
		chars = append(chars, string(c))
	}
	for c := '0'; c <= '9'; c++ {
		chars = append(chars, string(c))
	}
	for _, c := range []string{".", ",", "!", "?", "'", `"`, "-", ":", ";", "(", ")", "[", "]", "<", ">", "/"} {
		chars = append(chars, c)
	}
	for _, c := range chars {
		add(c, -8)
		add(ws+c, -7)
	}
	for _, suffix := range []string{"s", "es", "ed", "er", "ing", "ly", "ion", "est"} {
		add(suffix, -5)
	}
	for _, w := range strings.Fields(tinyWanWords) {
		add(ws+w, -3)
	}
	return v
}

// tinyWanTokenizerJSON is the toy tokenizer as an HF tokenizer.json with T5's pipeline: NFKC and
// collapsed spaces, Metaspace (prepend always), Unigram with byte fallback, and a template that
// appends </s>.
func tinyWanTokenizerJSON() []byte {
	special := func(id int, content string) map[string]any {
		return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true}
	}
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": []any{special(0, "<pad>"), special(1, "</s>"), special(2, "<unk>")},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "NFKC"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " {2,}"}, "content": " "},
		}},
		"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
		"post_processor": map[string]any{
			"type":           "TemplateProcessing",
			"single":         []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}},
			"special_tokens": map[string]any{"</s>": map[string]any{"id": "</s>", "ids": []int{1}, "tokens": []string{"</s>"}}},
		},
		"model": map[string]any{"type": "Unigram", "unk_id": 2, "vocab": tinyWanVocab(), "byte_fallback": true},
	}
	b, err := json.Marshal(doc) // maps marshal with sorted keys: the bytes (and the fingerprint) are stable
	if err != nil {
		panic(fmt.Sprintf("fastvideo: the toy tokenizer does not marshal: %v", err)) // constant data; tests cover it
	}
	return b
}

// tinyWanComponents builds tiny-wan's components from synthetic sources, made once per generator
// (they stand in for a real model's files) and bound to the backend on every load.
type tinyWanComponents struct {
	spec *ModelSpec

	once          sync.Once
	dit, vae, te  *weights.Synthetic
	tokenizerJSON []byte
}

func newTinyWanComponents(spec *ModelSpec) *tinyWanComponents { return &tinyWanComponents{spec: spec} }

func (c *tinyWanComponents) sources() {
	c.once.Do(func() {
		seed := int64(tinyWanWeightsSeed)
		ws := c.spec.Wan
		c.dit = weights.NewSynthetic(seed, shapeTable(wandit.Params(ws.DiT)), initWanDiT)
		c.vae = weights.NewSynthetic(seed+1, wanVAEShapes(ws.VAE), initWanVAE)
		c.te = weights.NewSynthetic(seed+2, umt5Shapes(ws.TextEncoder), nil)
		c.tokenizerJSON = tinyWanTokenizerJSON()
	})
}

func (c *tinyWanComponents) describe() string {
	return "tiny-wan (random weights, toy tokenizer, in memory)"
}

func (c *tinyWanComponents) check() error { return nil }

func (c *tinyWanComponents) loadTokenizer() (*unigram.Tokenizer, error) {
	c.sources()
	return unigram.FromTokenizerJSON(c.tokenizerJSON, unigram.Options{})
}

func (c *tinyWanComponents) textEncoder() (func() (weights.Source, func() error, error), string, error) {
	c.sources()
	return inMemory(c.te), fmt.Sprintf("tiny-wan:seed=%d:v1", tinyWanWeightsSeed), nil
}

func (c *tinyWanComponents) loadDiT(b compute.Backend, dt dtypes.DType) (*wandit.Model, error) {
	c.sources()
	return wandit.FromSource(b, c.spec.Wan.DiT, c.dit, wandit.Options{DType: dt})
}

func (c *tinyWanComponents) loadVAE(b compute.Backend, dt dtypes.DType) (*wanvae.Decoder, error) {
	c.sources()
	return wanvae.FromSource(b, c.spec.Wan.VAE, c.vae, wanvae.Options{DType: dt})
}

// wanVAEShapes is vae/wan's declared decoder table.
func wanVAEShapes(cfg wanvae.Config) map[string][]int {
	return shapeTable(wanvae.Params(cfg))
}

// umt5Shapes lists the tensors a UMT5 encoder reads, under the released HF T5 names.
func umt5Shapes(cfg umt5.Config) map[string][]int {
	out := map[string][]int{
		umt5.EmbeddingNames[0]:            {cfg.VocabSize, cfg.DModel},
		"encoder.final_layer_norm.weight": {cfg.DModel},
	}
	shapes := umt5.BlockTensorShapes(cfg)
	for i := 0; i < cfg.NumLayers; i++ {
		for k, n := range umt5.BlockTensorNames(cfg) {
			out[fmt.Sprintf("encoder.block.%d.%s", i, n)] = shapes[k]
		}
		out[umt5.RelativeBiasName(i)] = []int{cfg.NumBuckets, cfg.NumHeads}
	}
	return out
}

// initWanDiT draws the modulation tables like dit/wan's NewRandom (randn/sqrt(D), their upstream
// initialization); other tensors take the default scales.
func initWanDiT(name string, shape []int, rng *rand.Rand) []float32 {
	if !strings.HasSuffix(name, "scale_shift_table") {
		return nil
	}
	return scaled(shape, rng, 1/math.Sqrt(float64(shape[len(shape)-1])), 0)
}

// initWanVAE draws the RMS-norm gains ([C, 1, 1, 1], which the default rule would take for a
// matrix) as 1 + 0.1·randn, like vae/wan's NewRandom.
func initWanVAE(name string, shape []int, rng *rand.Rand) []float32 {
	if !strings.HasSuffix(name, ".gamma") {
		return nil
	}
	return scaled(shape, rng, 0.1, 1)
}

func scaled(shape []int, rng *rand.Rand, scale, offset float64) []float32 {
	v := make([]float32, numel(shape))
	for i := range v {
		v[i] = float32(offset + scale*rng.NormFloat64())
	}
	return v
}
