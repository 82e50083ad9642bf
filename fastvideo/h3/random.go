package h3

import (
	"fmt"
	"sync"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/tokenizer"
	"fastvideo/internal/tokenizer/qwen3data"
	"fastvideo/internal/weights"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// randomSource stands in for a checkpoint when the engine asks for random weights: every
// component is built at its spec's geometry (the release's for a built-in model, a folder's
// configs otherwise) with weights drawn from the seed, the large ones on the device (DiT, video
// VAE, the text stack layer by layer), the audio VAE's on the host. The text encoder gets the
// released tokenizer, or the folder's when it has one. The output is noise; the work is a real
// run's.
type randomSource struct {
	spec    *Spec
	textCfg qwen3vl.Config
	seed    int64
	tok     func() (*tokenizer.Tokenizer, error)

	once  sync.Once
	err   error
	audio *weights.Synthetic
}

func newRandomSource(s *Spec, textCfg qwen3vl.Config, seed int64) *randomSource {
	r := &randomSource{spec: s, textCfg: textCfg, seed: seed, tok: qwen3data.Load}
	if s.Dir != "" {
		f := &folder{Snapshot: familykit.Snapshot{Dir: s.Dir}, spec: s}
		if f.HasFile(familykit.DirTokenizer, "tokenizer.json", "tokenizer.json.gz") {
			r.tok = f.loadTokenizer
		}
	}
	return r
}

func (r *randomSource) Describe() string {
	return familykit.DescribeRandom(r.spec.Name, r.spec.Dir, r.seed)
}

// Check has nothing to re-validate: no file is read but the tokenizer's.
func (r *randomSource) Check() error { return nil }

func (r *randomSource) loadTokenizer() (*tokenizer.Tokenizer, error) { return r.tok() }

// textWeights opens nothing (newTextEncoder draws the layers); the identity keys the prompt cache
// by seed and geometry, so a random model never reads a real one's cached prompts.
func (r *randomSource) textWeights() (familykit.WeightOpener, string, error) {
	return familykit.InMemory(weights.MapSource{}), fmt.Sprintf("random:seed=%d:%+v", r.seed, r.textCfg), nil
}

func (r *randomSource) newTextEncoder(e *family.Engine, cfg qwen3vl.Config, _ weights.Source, opts qwen3vl.Options) (*qwen3vl.Encoder, error) {
	return qwen3vl.NewRandom(e.Backend, cfg, opts, r.seed+3)
}

// loadDiT draws the transformer with its AdaLN projections (a folder's AdaLN cache manifest
// describes checkpoint files that a random model does not read), merging the adapters into each
// weight as it is drawn.
func (r *randomSource) loadDiT(e *family.Engine, opts h3dit.Options, l *familykit.LoRA) (*h3dit.Model, error) {
	opts.AdaLNManifest = nil
	return familykit.BuildMerged(l, r.spec.tableShapes, func(onBind func(*weights.Param) error) (*h3dit.Model, error) {
		opts.OnBind = onBind
		return h3dit.NewRandom(e.Backend, r.spec.DiT, opts, r.seed)
	})
}

func (r *randomSource) loadVideoVAE(e *family.Engine) (*h3video.Decoder, error) {
	return h3video.NewRandom(e.Backend, r.spec.VAE, videoVAEOptions(e), r.seed+1)
}

// loadAudioVAE draws the BigVGAN once per generator, on the host (tens of MB), with tiny-h3's
// initialization that keeps a random waveform finite.
func (r *randomSource) loadAudioVAE(e *family.Engine) (*h3audio.Decoder, error) {
	r.once.Do(func() { r.audio, r.err = familykit.Synthetic(r.seed+2, h3audio.Params, r.spec.AudioVAE, initAudioVAE) })
	if r.err != nil {
		return nil, r.err
	}
	return h3audio.FromSource(e.Backend, r.spec.AudioVAE, r.audio, h3audio.Options{})
}

// loadVision draws the vision tower on the device (about 0.5B parameters at release size).
func (r *randomSource) loadVision(e *family.Engine, cfg qwen3vl.VisionConfig) (*qwen3vl.Vision, error) {
	return qwen3vl.NewRandomVision(e.Backend, cfg, r.seed+5)
}

func (r *randomSource) loadVideoEncoder(e *family.Engine) (*h3video.Encoder, error) {
	return h3video.NewRandomEncoder(e.Backend, r.spec.VAE, encoderOptions, r.seed+6)
}
