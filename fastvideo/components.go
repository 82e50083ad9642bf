package fastvideo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/promptcache"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/tokenizer"
	"fastvideo/internal/weights"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// modelFiles is what every family's components share.
type modelFiles interface {
	describe() string
	// check re-validates, cheaply, that the files a run needs are still there.
	check() error
}

// components loads the heavyweight parts of a MiniMax H3 model (wanComponents: a Wan model). Each
// load* call builds a fresh instance that the caller owns (and closes); nothing is cached here except
// what stands in for files.
type components interface {
	modelFiles
	adalnManifest() *h3.AdaLNManifest
	loadTokenizer() (*tokenizer.Tokenizer, error)
	// textEncoder returns the text stack's config, a weight source opener and the prompt-cache
	// identity of the weights.
	textEncoder() (cfg qwen3vl.Config, open func() (weights.Source, func() error, error), identity string, err error)
	loadDiT(b compute.Backend, dt dtypes.DType) (*h3.Model, error)
	loadVideoVAE(b compute.Backend, dt dtypes.DType) (*h3video.Decoder, error)
	loadAudioVAE(b compute.Backend) (*h3audio.Decoder, error)
}

// Component folders of a diffusers-style MiniMax H3 snapshot (h3.md §1.1).
const (
	dirTransformer = "transformer"
	dirVAE         = "vae"
	dirAudioVAE    = "audio_vae"
	dirTextEncoder = "text_encoder"
	dirTokenizer   = "tokenizer"
)

// snapshot is a diffusers-style model folder, what either family's folder components share.
type snapshot struct {
	dir  string
	spec *ModelSpec
}

func (c *snapshot) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *snapshot) describe() string { return c.dir }

// checkWeights opens the checkpoint headers of each component folder.
func (c *snapshot) checkWeights(dirs ...string) error {
	for _, d := range dirs {
		ck, err := safetensors.OpenCheckpoint(c.path(d))
		if err != nil {
			return fmt.Errorf("fastvideo: model folder %s: %s/ weights: %w", c.dir, d, err)
		}
		ck.Close()
	}
	return nil
}

// hasTokenizer reports whether the tokenizer/ folder holds one of the files names.
func (c *snapshot) hasTokenizer(names ...string) bool {
	for _, name := range names {
		if _, err := os.Stat(c.path(dirTokenizer, name)); err == nil {
			return true
		}
	}
	return false
}

// checkpointSource returns an opener of the checkpoint in the component folder dir and its
// prompt-cache identity, kind:hash-of-the-folder.
func (c *snapshot) checkpointSource(dir, kind string) (func() (weights.Source, func() error, error), string, error) {
	id, err := promptcache.FolderIdentity(c.path(dir))
	if err != nil {
		return nil, "", err
	}
	open := func() (weights.Source, func() error, error) {
		ck, err := safetensors.OpenCheckpoint(c.path(dir))
		if err != nil {
			return nil, nil, err
		}
		return ck, ck.Close, nil
	}
	return open, kind + ":" + id, nil
}

// folderComponents reads a model snapshot folder.
type folderComponents struct {
	snapshot
	manifest *h3.AdaLNManifest
	textCfg  qwen3vl.Config
}

// openFolder validates a snapshot without loading weights: every component's config parses and
// agrees with the DiT, every weight checkpoint's headers open, and the tokenizer file exists.
func openFolder(spec *ModelSpec) (*folderComponents, error) {
	// spec came from ReadModelFolder, which read the DiT and audio VAE configs with the packages' own
	// readers and cross-checked them; the video VAE config is re-read here by the decoder's strict
	// reader (its latent statistics are required to decode, not to plan).
	c := &folderComponents{snapshot: snapshot{dir: spec.Dir, spec: spec}}
	dit := spec.DiT
	var err error
	if c.manifest, err = h3.ReadAdaLNManifest(c.path(dirTransformer)); err != nil {
		return nil, err
	}
	if _, err := h3video.LoadConfig(c.path(dirVAE)); err != nil {
		return nil, err
	}
	if c.textCfg, err = qwen3vl.LoadConfig(c.path(dirTextEncoder)); err != nil {
		return nil, fmt.Errorf("fastvideo: %w (the snapshot's text_encoder/ holds the Qwen3-VL config.json and weights)", err)
	}
	if _, err := textOptions(c.textCfg, dtypes.Float32).ResolveHiddenState(c.textCfg); err != nil {
		return nil, fmt.Errorf("fastvideo: %s: %w (MiniMax H3 reads the output of text layer %d)", c.path(dirTextEncoder), err, qwen3vl.H3HiddenStateIndex)
	}
	if c.textCfg.HiddenSize != dit.TextDim {
		return nil, fmt.Errorf("fastvideo: the text encoder's hidden_size %d (%s) differs from the transformer's text_dim %d",
			c.textCfg.HiddenSize, c.path(dirTextEncoder, "config.json"), dit.TextDim)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *folderComponents) check() error {
	if err := c.checkWeights(dirTransformer, dirVAE, dirAudioVAE, dirTextEncoder); err != nil {
		return err
	}
	if c.hasTokenizer("tokenizer.json", "tokenizer.json.gz") {
		return nil
	}
	return fmt.Errorf("fastvideo: model folder %s has no %s (the Qwen3 tokenizer of the snapshot's tokenizer/ folder)",
		c.dir, filepath.Join(dirTokenizer, "tokenizer.json"))
}

func (c *folderComponents) adalnManifest() *h3.AdaLNManifest { return c.manifest }

func (c *folderComponents) loadTokenizer() (*tokenizer.Tokenizer, error) {
	return tokenizer.Load(c.path(dirTokenizer))
}

func (c *folderComponents) textEncoder() (qwen3vl.Config, func() (weights.Source, func() error, error), string, error) {
	open, identity, err := c.checkpointSource(dirTextEncoder, "qwen3vl")
	if err != nil {
		return qwen3vl.Config{}, nil, "", err
	}
	return c.textCfg, open, identity, nil
}

func (c *folderComponents) loadDiT(b compute.Backend, dt dtypes.DType) (*h3.Model, error) {
	return h3.Load(b, c.path(dirTransformer), h3.Options{DType: dt})
}

func (c *folderComponents) loadVideoVAE(b compute.Backend, dt dtypes.DType) (*h3video.Decoder, error) {
	return h3video.Load(b, c.path(dirVAE), h3video.Options{DType: dt})
}

func (c *folderComponents) loadAudioVAE(b compute.Backend) (*h3audio.Decoder, error) {
	return h3audio.Load(b, c.path(dirAudioVAE), h3audio.Options{})
}

// newConditioner builds the tokenizer -> Qwen3-VL -> prompt cache chain of a model. The encoder is
// opened lazily, on the first cache miss (onLoad is called then), so a cached prompt never reads its
// weights.
func newConditioner(c components, b compute.Backend, dt dtypes.DType, cacheDir string, resident bool, onLoad func(string)) (*textenc.Conditioner, error) {
	onLoad("tokenizer")
	tok, err := c.loadTokenizer()
	if err != nil {
		return nil, err
	}
	cfg, open, identity, err := c.textEncoder()
	if err != nil {
		return nil, err
	}
	opts := textOptions(cfg, dt)
	opts.Resident = resident
	index, err := opts.ResolveHiddenState(cfg)
	if err != nil {
		return nil, err
	}
	cond := &textenc.Conditioner{
		Tokenizer: tokenizerAdapter{tok},
		OpenEncoder: func() (textenc.Encoder, error) {
			onLoad("text_encoder")
			src, closeSrc, err := open()
			if err != nil {
				return nil, err
			}
			enc, err := qwen3vl.New(b, cfg, src, opts)
			if err != nil {
				return nil, errors.Join(err, closeSrc())
			}
			return &ownedEncoder{enc, closeSrc}, nil
		},
	}
	if cacheDir != "" {
		cond.Cache = &promptcache.Cache{Dir: cacheDir}
		cond.Key = promptcache.Key{Model: identity, Layer: index, DType: dt.String(), Variant: "prefix=" + qwen3vl.DefaultPrefix}
	}
	return cond, nil
}

// textOptions are H3's encoder options: the output of text layer 50 (hidden_states[50]), unless
// the config names its own output index (tiny-h3 reads its last layer).
func textOptions(cfg qwen3vl.Config, dt dtypes.DType) qwen3vl.Options {
	opts := textenc.H3Options(dt)
	if cfg.OutputHiddenStateIndex > 0 {
		opts.HiddenStateIndex = 0
	}
	return opts
}

// ownedEncoder closes the weight source with the encoder (a streamed encoder reads it per layer).
type ownedEncoder struct {
	*qwen3vl.Encoder
	closeSrc func() error
}

func (e *ownedEncoder) Close() error { return errors.Join(e.Encoder.Close(), e.closeSrc()) }

// tokenizerAdapter gives the tokenizer the conditioner's interface (its Encode cannot fail).
type tokenizerAdapter struct{ t *tokenizer.Tokenizer }

func (a tokenizerAdapter) Encode(text string) ([]int, error) { return a.t.Encode(text), nil }
func (a tokenizerAdapter) Fingerprint() string               { return a.t.Fingerprint() }
