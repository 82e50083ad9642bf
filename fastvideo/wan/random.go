package wan

import (
	"fmt"

	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/tokenizer/unigram"
	"fastvideo/internal/weights"
	wanvae "fastvideo/vae/wan"
)

// randomSource stands in for a checkpoint when the engine asks for random weights: the DiT, the
// VAE and the UMT5 blocks are built at the spec's geometry (the release's for a built-in model, a
// folder's configs otherwise) with weights drawn on the device from the seed. No UMT5 vocabulary
// ships with the SDK, so the prompt goes through tiny-wan's toy tokenizer and the embedding table
// has the toy vocabulary's rows: the encoder's blocks, its cost, run at full size over the
// prompt's tokens; only which rows are gathered differs. The output is noise; the work is a real
// run's.
type randomSource struct {
	spec *Spec
	seed int64
}

func (r *randomSource) Describe() string {
	return familykit.DescribeRandom(r.spec.Name, r.spec.Dir, r.seed)
}

// Check has nothing to re-validate: no file is read.
func (r *randomSource) Check() error { return nil }

func (r *randomSource) loadTokenizer() (*unigram.Tokenizer, error) {
	return unigram.FromTokenizerJSON(tinyWanTokenizerJSON(), unigram.Options{})
}

// textWeights opens nothing (newTextEncoder draws them); the identity keys the prompt cache by
// seed and geometry, so a random model never reads a real one's cached prompts.
func (r *randomSource) textWeights() (familykit.WeightOpener, string, error) {
	return familykit.InMemory(weights.MapSource{}), fmt.Sprintf("random:seed=%d:%+v", r.seed, r.textConfig()), nil
}

// textConfig is the spec's UMT5 with the toy vocabulary's row count.
func (r *randomSource) textConfig() umt5.Config {
	c := r.spec.TextEncoder
	c.VocabSize = len(tinyWanVocab())
	return c
}

func (r *randomSource) newTextEncoder(e *family.Engine, _ umt5.Config, _ weights.Source, opts umt5.Options) (*umt5.Encoder, error) {
	return umt5.NewRandom(e.Backend, r.textConfig(), opts, r.seed+2)
}

// loadDiT draws the transformer on the device, merging the adapters into each weight as it is drawn.
func (r *randomSource) loadDiT(e *family.Engine, l *familykit.LoRA) (*wandit.Model, error) {
	return familykit.BuildMerged(l, r.spec.tableShapes, func(onBind func(*weights.Param) error) (*wandit.Model, error) {
		return wandit.NewRandom(e.Backend, r.spec.DiT, wandit.Options{DType: e.DType, Attention: e.Attention, OnBind: onBind}, r.seed)
	})
}

func (r *randomSource) loadVAE(e *family.Engine) (*wanvae.Decoder, error) {
	return wanvae.NewRandom(e.Backend, r.spec.VAE, wanvae.Options{DType: e.DType}, r.seed+1)
}

func (r *randomSource) loadEncoder(e *family.Engine) (*wanvae.Decoder, error) {
	return wanvae.NewRandom(e.Backend, r.spec.VAE, encoderOptions, r.seed+1)
}
