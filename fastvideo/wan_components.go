package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	wandit "fastvideo/dit/wan"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/promptcache"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/tokenizer/unigram"
	"fastvideo/internal/weights"
	wanvae "fastvideo/vae/wan"
)

// wanComponents loads the heavyweight parts of a Wan model. Each load* call builds a fresh instance
// that the caller owns (and closes).
type wanComponents interface {
	modelFiles
	loadTokenizer() (*unigram.Tokenizer, error)
	// textEncoder returns a weight source opener for the UMT5 encoder and the prompt-cache identity
	// of the weights.
	textEncoder() (open func() (weights.Source, func() error, error), identity string, err error)
	loadDiT(b compute.Backend, dt dtypes.DType) (*wandit.Model, error)
	loadVAE(b compute.Backend, dt dtypes.DType) (*wanvae.Decoder, error)
}

// wanFolder reads a diffusers-style Wan snapshot (wan.md §10).
type wanFolder struct{ snapshot }

// openWanFolder validates a snapshot without loading weights: the configs were read and checked by
// readWanFolder; here every weight checkpoint's headers open and the tokenizer file exists.
func openWanFolder(spec *ModelSpec) (*wanFolder, error) {
	c := &wanFolder{snapshot{dir: spec.Dir, spec: spec}}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *wanFolder) check() error {
	if err := c.checkWeights(dirTransformer, dirVAE, dirTextEncoder); err != nil {
		return err
	}
	if c.hasTokenizer("tokenizer.json", "spiece.model") {
		return nil
	}
	return fmt.Errorf("fastvideo: model folder %s has neither %s nor %s (the UMT5 tokenizer of the snapshot's tokenizer/ folder)",
		c.dir, filepath.Join(dirTokenizer, "tokenizer.json"), filepath.Join(dirTokenizer, "spiece.model"))
}

func (c *wanFolder) loadTokenizer() (*unigram.Tokenizer, error) {
	return unigram.Load(c.path(dirTokenizer), unigram.Options{})
}

func (c *wanFolder) textEncoder() (func() (weights.Source, func() error, error), string, error) {
	return c.checkpointSource(dirTextEncoder, "umt5")
}

func (c *wanFolder) loadDiT(b compute.Backend, dt dtypes.DType) (*wandit.Model, error) {
	return wandit.Load(b, c.path(dirTransformer), wandit.Options{DType: dt})
}

func (c *wanFolder) loadVAE(b compute.Backend, dt dtypes.DType) (*wanvae.Decoder, error) {
	return wanvae.Load(b, c.path(dirVAE), wanvae.Options{DType: dt})
}

// newWanConditioner builds the UMT5 tokenizer -> encoder -> prompt cache chain of a Wan model. The
// conditioner's hidden state is the encoder's last hidden state over the prompt's own tokens ([n,
// d_model], </s> included); the pipeline zero-pads it to TextLen rows. The encoder is opened
// lazily, on the first cache miss (onLoad is called then).
func newWanConditioner(c wanComponents, ws *WanSpec, b compute.Backend, dt dtypes.DType, cacheDir string, resident bool,
	onLoad func(string)) (*textenc.Conditioner, error) {
	onLoad("tokenizer")
	tok, err := c.loadTokenizer()
	if err != nil {
		return nil, err
	}
	open, identity, err := c.textEncoder()
	if err != nil {
		return nil, err
	}
	cfg, textLen := ws.TextEncoder, ws.TextLen
	cond := &textenc.Conditioner{
		Tokenizer: wanTokenizer{tok, textLen},
		OpenEncoder: func() (textenc.Encoder, error) {
			onLoad("text_encoder")
			src, closeSrc, err := open()
			if err != nil {
				return nil, err
			}
			enc, err := umt5.FromSource(b, cfg, src, umt5.Options{DType: dt, Resident: resident, TextLen: textLen})
			if err != nil {
				return nil, errors.Join(err, closeSrc())
			}
			return &umt5Encoder{enc, closeSrc}, nil
		},
	}
	if cacheDir != "" {
		cond.Cache = &promptcache.Cache{Dir: cacheDir}
		cond.Key = promptcache.Key{Model: identity, Layer: cfg.NumLayers, DType: dt.String(), Variant: "umt5 last_hidden_state"}
	}
	return cond, nil
}

// wanTokenizer tokenizes like FastVideo's Wan text stage: special tokens added (T5: a final </s>),
// truncated to text_len ids, no padding.
type wanTokenizer struct {
	t       *unigram.Tokenizer
	textLen int
}

func (w wanTokenizer) Encode(text string) ([]int, error) {
	return w.t.EncodeWithSpecial(text, w.textLen)
}
func (w wanTokenizer) Fingerprint() string {
	return fmt.Sprintf("%s;special;max_length=%d", w.t.Fingerprint(), w.textLen)
}

// umt5Encoder is the UMT5 encoder over the prompt's own tokens (no padding, so no mask), closing its
// weight source with it (a streamed encoder reads it per block).
type umt5Encoder struct {
	*umt5.Encoder
	closeSrc func() error
}

func (e *umt5Encoder) Encode(ctx context.Context, ids []int) ([]float32, []int, error) {
	return e.Encoder.Encode(ctx, ids, nil)
}

func (e *umt5Encoder) Close() error { return errors.Join(e.Encoder.Close(), e.closeSrc()) }
