package wan

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/fastvideo/framefilter"
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

// TinyName is the built-in toy model of the family.
const TinyName = "tiny-wan"

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

// tinySpec is tiny-wan's specification. Its two presets exercise both Wan samplers on a 48x64,
// 9-frame canvas (3 latent frames of 6x8, 36 DiT tokens): the default runs the FastWan DMD ladder
// (3 forwards), the other 4 UniPC steps with classifier-free guidance (8 forwards).
func tinySpec() *Spec {
	s := &Spec{
		ModelInfo: family.ModelInfo{Name: TinyName, Family: FamilyName, Variant: TinyName,
			Description: "The Wan2.1 architecture at toy width with seeded random weights and a toy tokenizer made in memory (no files; its output is noise), for tests and smoke runs"},
		DiT: tinyWanDiT(), VAE: tinyWanVAE(), TextEncoder: tinyUMT5(len(tinyWanVocab())), TextLen: umt5.DefaultTextLen,
		FlowShift: schedule.Wan21T2V480PShift, WeightsDType: api.F32, MaxSide: tinyMaxSide, MaxFrames: tinyMaxFrames,
	}
	s.setPresets(
		Preset{Preset: family.Preset{Name: "tiny_wan_dmd", Description: "48x64, 9 frames at 16 fps, 3 DMD steps without guidance (FastWan-style)",
			Height: 48, Width: 64, NumFrames: 9, FPS: 16, Steps: 3, GuidanceScale: 1, Seed: defaultSeed},
			Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps},
		Preset{Preset: family.Preset{Name: "tiny_wan_t2v", Description: "48x64, 9 frames at 16 fps, 4 UniPC steps with CFG 5.0 (base-Wan-style)",
			Height: 48, Width: 64, NumFrames: 9, FPS: 16, Steps: 4, GuidanceScale: 5, Seed: defaultSeed},
			Sampler: SamplerUniPC, NegativePrompt: NegativePromptEN},
	)
	s.rife, _ = framefilter.TinyRIFE(tinyWanWeightsSeed + 4) // a fixed, valid table: it cannot fail
	return s
}

// Tiny22Name is the toy Wan2.2 TI2V model: the 48-channel DiT with per-token timesteps and the
// Wan2.2 VAE (encoder included) at toy width, so image-to-video runs on a CPU.
const Tiny22Name = "tiny-wan2.2"

// tinyWan22DiT is the wan22_ti2v_dit_tiny fixture's configuration (48 latent channels).
func tinyWan22DiT() wandit.Config {
	c := tinyWanDiT()
	c.InChannels, c.OutChannels = 48, 48
	return c
}

// tinyWan22VAE is the wan22_vae_tiny fixture's VAE (base_dim 4, one residual block per stage, 16x
// spatial with the patch of 2) with z_dim 48 and the released Wan2.2 latent statistics.
func tinyWan22VAE() wanvae.Config {
	c := wanvae.Wan22Config()
	c.BaseDim, c.DecoderBaseDim, c.NumResBlocks = 4, 4, 1
	return c
}

// tinyImageArea is tiny-wan2.2's canvas area for a first-frame image: 64x96's, where the released
// model takes 480x832's.
const tinyImageArea = 64 * 96

// tiny22Spec is tiny-wan2.2's specification: a 64x96 canvas (4x6 latents, 2x3 tokens a frame), the
// same two samplers as tiny-wan, and a first-frame image fitted to 64x96's area.
func tiny22Spec() *Spec {
	s := tinySpec()
	s.ModelInfo.Name, s.ModelInfo.Variant = Tiny22Name, Tiny22Name
	s.Description = "The Wan2.2 TI2V architecture (48-channel DiT, Wan2.2 VAE with its encoder) at toy width with seeded random weights and a toy tokenizer made in memory (no files; its output is noise), for image-to-video tests and smoke runs"
	s.DiT, s.VAE = tinyWan22DiT(), tinyWan22VAE()
	s.FlowShift = schedule.Wan22TI2V5BShift
	s.ImageMaxArea, s.FirstImage = tinyImageArea, true
	s.setPresets(
		Preset{Preset: family.Preset{Name: "tiny_wan22_ti2v", Description: "64x96, 9 frames at 24 fps, 4 UniPC steps with CFG 5.0 (Wan2.2-TI2V-style)",
			Height: 64, Width: 96, NumFrames: 9, FPS: 24, Steps: 4, GuidanceScale: 5, Seed: defaultSeed},
			Sampler: SamplerUniPC, NegativePrompt: NegativePromptCN},
		Preset{Preset: family.Preset{Name: "tiny_wan22_dmd", Description: "64x96, 9 frames at 24 fps, 3 DMD steps without guidance (FastWan2.2-style)",
			Height: 64, Width: 96, NumFrames: 9, FPS: 24, Steps: 3, GuidanceScale: 1, Seed: defaultSeed},
			Sampler: SamplerDMD, DMDSteps: schedule.FastWanDMDSteps},
	)
	return s
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

// tinySource is tiny-wan's synthetic weights and toy tokenizer, made once per generator (they
// stand in for a real model's files) and bound to the backend on every load.
type tinySource struct {
	checkpointText
	spec *Spec

	once          sync.Once
	err           error
	dit, vae, te  *weights.Synthetic
	tokenizerJSON []byte
}

func newTinySource(spec *Spec) *tinySource { return &tinySource{spec: spec} }

// sources makes the synthetic weights from each model's own parameter table, and the toy
// tokenizer, once.
func (c *tinySource) sources() error {
	c.once.Do(func() {
		seed := int64(tinyWanWeightsSeed)
		s := c.spec
		var errs [3]error
		c.dit, errs[0] = familykit.Synthetic(seed, wandit.Params, s.DiT, initWanDiT)
		c.vae, errs[1] = familykit.Synthetic(seed+1, vaeWithEncoderParams, s.VAE, initWanVAE)
		c.te, errs[2] = familykit.Synthetic(seed+2, umt5.Params, s.TextEncoder, nil)
		c.tokenizerJSON = tinyWanTokenizerJSON()
		c.err = errors.Join(errs[:]...)
	})
	return c.err
}

func (c *tinySource) Describe() string { return "tiny-wan (random weights, toy tokenizer, in memory)" }

func (c *tinySource) Check() error { return nil }

func (c *tinySource) loadTokenizer() (*unigram.Tokenizer, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return unigram.FromTokenizerJSON(c.tokenizerJSON, unigram.Options{})
}

func (c *tinySource) textWeights() (familykit.WeightOpener, string, error) {
	if err := c.sources(); err != nil {
		return nil, "", err
	}
	return familykit.InMemory(c.te), fmt.Sprintf("tiny-wan:seed=%d:v1", tinyWanWeightsSeed), nil
}

func (c *tinySource) loadDiT(e *family.Engine, l *familykit.LoRA) (*wandit.Model, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return familykit.BuildMerged(l, c.spec.loraShapes, func(onBind func(*weights.Param) error) (*wandit.Model, error) {
		return wandit.FromSource(e.Backend, c.spec.DiT, c.dit, wandit.Options{DType: e.DType, Attention: e.Attention, OnBind: onBind})
	})
}

func (c *tinySource) loadVAE(e *family.Engine) (*wanvae.Decoder, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return wanvae.FromSource(e.Backend, c.spec.VAE, c.vae, wanvae.Options{DType: e.DType})
}

func (c *tinySource) loadEncoder(e *family.Engine) (*wanvae.Decoder, error) {
	if err := c.sources(); err != nil {
		return nil, err
	}
	return wanvae.FromSource(e.Backend, c.spec.VAE, c.vae, encoderOptions)
}

// vaeWithEncoderParams is the whole VAE checkpoint's table (decoder and encoder): each synthetic
// tensor depends only on the seed and its name, so the decoder's are those of the decoder alone.
func vaeWithEncoderParams(cfg wanvae.Config) (weights.Shapes, error) {
	dec, err := wanvae.Params(cfg)
	if err != nil {
		return nil, err
	}
	enc, err := wanvae.EncoderParams(cfg)
	if err != nil {
		return nil, err
	}
	return append(dec, enc...), nil
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
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(offset + scale*rng.NormFloat64())
	}
	return v
}
