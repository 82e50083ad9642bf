// Package textenc turns a prompt into the text-conditioning hidden states a DiT
// consumes: tokenizer, then a (streamed) text encoder, with an on-disk prompt
// cache in front so that a repeated prompt never touches the encoder weights.
//
// For MiniMax H3 the prompt goes to the tokenizer verbatim: no chat template, no
// BOS/EOS, no system text. H3's speech markup, e.g.
// `(S1) A presenter says <d>[English] Fast H3 is amazing.</d>`, is plain text the
// model was trained on; nothing here parses or rewrites it.
package textenc

import (
	"context"
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/textenc/promptcache"
	"fastvideo/internal/textenc/qwen3vl"
)

// Tokenizer is what the conditioner needs of a tokenizer.
type Tokenizer interface {
	// Encode tokenizes text verbatim, adding no special tokens.
	Encode(text string) ([]int, error)
	// Fingerprint identifies the vocabulary and rules: equal fingerprints give
	// equal ids for every text. It is part of the prompt-cache key.
	Fingerprint() string
}

// Encoder maps token ids to a hidden state [S, D] (qwen3vl.Encoder is one).
type Encoder interface {
	Encode(ctx context.Context, ids []int) (hidden []float32, shape []int, err error)
}

// Result is one conditioned prompt.
type Result struct {
	// Hidden is the encoder hidden state, float32, row-major [S, D].
	Hidden []float32
	Shape  []int
	// Cached reports that Hidden came from the prompt cache (no tokenizer or
	// encoder ran).
	Cached bool
}

// Conditioner runs tokenizer -> encoder behind the prompt cache. Safe for
// concurrent use.
type Conditioner struct {
	// Tokenizer is required.
	Tokenizer Tokenizer
	// Cache may be nil (no caching).
	Cache *promptcache.Cache
	// Key carries the model-side cache key fields (Model, Layer, DType, Variant);
	// Tokenizer and Prompt are filled in per call.
	Key promptcache.Key
	// Encoder is used if set; otherwise OpenEncoder is called once, on the first
	// cache miss, so a fully cached run never opens the checkpoint.
	Encoder     Encoder
	OpenEncoder func() (Encoder, error)

	mu sync.Mutex
}

// Condition returns the hidden state of prompt.
func (c *Conditioner) Condition(ctx context.Context, prompt string) (Result, error) {
	return c.ConditionWith(ctx, prompt, "", func(ctx context.Context, enc Encoder) ([]float32, []int, error) {
		ids, err := c.Tokenizer.Encode(prompt)
		if err != nil {
			return nil, nil, fmt.Errorf("textenc: tokenizing the prompt: %w", err)
		}
		if len(ids) == 0 {
			return nil, nil, fmt.Errorf("textenc: the prompt %q tokenizes to no tokens", prompt)
		}
		return enc.Encode(ctx, ids)
	})
}

// Compute encodes a prompt with the opened encoder (Unwrap reaches the model's own type).
type Compute func(ctx context.Context, enc Encoder) ([]float32, []int, error)

// ConditionWith is Condition for a hidden state that also depends on inputs beside the text (an
// FL2VA prompt's images): inputs identifies them in the cache key (a digest of their pixels), and
// compute runs only on a cache miss, with the encoder opened.
func (c *Conditioner) ConditionWith(ctx context.Context, prompt, inputs string, compute Compute) (Result, error) {
	if c.Tokenizer == nil {
		return Result{}, fmt.Errorf("textenc: Conditioner.Tokenizer is nil; set a tokenizer")
	}
	if prompt == "" {
		return Result{}, fmt.Errorf("textenc: the prompt is empty; give the text to condition on")
	}
	run := func(ctx context.Context) ([]float32, []int, error) {
		enc, err := c.encoder()
		if err != nil {
			return nil, nil, err
		}
		return compute(ctx, enc)
	}
	if c.Cache == nil {
		h, s, err := run(ctx)
		if err != nil {
			return Result{}, err
		}
		return Result{Hidden: h, Shape: s}, nil
	}
	key := c.Key
	key.Tokenizer = c.Tokenizer.Fingerprint()
	key.Prompt = prompt
	if inputs != "" {
		key.Variant += ";inputs=" + inputs
	}
	h, s, hit, err := c.Cache.GetOrCompute(ctx, key, run)
	if err != nil {
		return Result{}, err
	}
	return Result{Hidden: h, Shape: s, Cached: hit}, nil
}

// Unwrap returns the encoder that wrappers (types with Unwrap() Encoder, such as the one that
// closes an encoder's weights with it) hold.
func Unwrap(e Encoder) Encoder {
	for {
		w, ok := e.(interface{ Unwrap() Encoder })
		if !ok {
			return e
		}
		e = w.Unwrap()
	}
}

func (c *Conditioner) encoder() (Encoder, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Encoder != nil {
		return c.Encoder, nil
	}
	if c.OpenEncoder == nil {
		return nil, fmt.Errorf("textenc: Conditioner has neither Encoder nor OpenEncoder; set one")
	}
	enc, err := c.OpenEncoder()
	if err != nil {
		return nil, err
	}
	c.Encoder = enc
	return enc, nil
}

// Close closes the encoder if it was opened and can be closed.
func (c *Conditioner) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.Encoder.(interface{ Close() error }); ok {
		c.Encoder = nil
		return cl.Close()
	}
	return nil
}

// NewQwen3VL builds a conditioner over a Qwen3-VL text-encoder folder (config.json
// plus safetensors, sharded or not). The checkpoint is opened on the first cache
// miss. cacheDir "" disables the prompt cache. For MiniMax H3 pass
// opts.HiddenStateIndex = qwen3vl.H3HiddenStateIndex (H3Options does).
func NewQwen3VL(backend compute.Backend, dir string, tok Tokenizer, cacheDir string, opts qwen3vl.Options) (*Conditioner, error) {
	cfg, err := qwen3vl.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	index, err := opts.ResolveHiddenState(cfg)
	if err != nil {
		return nil, fmt.Errorf("textenc: %s: %w", dir, err)
	}
	c := &Conditioner{
		Tokenizer: tok,
		OpenEncoder: func() (Encoder, error) {
			return qwen3vl.Open(backend, dir, opts)
		},
	}
	if cacheDir != "" {
		id, err := promptcache.FolderIdentity(dir)
		if err != nil {
			return nil, err
		}
		dt := opts.DType
		if dt == dtypes.InvalidDType {
			dt = dtypes.Float32
		}
		prefix := opts.Prefix
		if prefix == "" {
			prefix = qwen3vl.DefaultPrefix
		}
		variant := "prefix=" + prefix
		if opts.FinalNorm {
			variant += ";final_norm"
		}
		c.Cache = &promptcache.Cache{Dir: cacheDir}
		c.Key = promptcache.Key{Model: "qwen3vl:" + id, Layer: index, DType: dt.String(), Variant: variant}
	}
	return c, nil
}

// H3Options are the encoder options of MiniMax H3's conditioner: the
// un-normalized output of decoder layer 49 (hidden_states[50]), weights streamed
// one layer at a time, computed in dt (Float32 on CPU, BFloat16 on GPU).
func H3Options(dt dtypes.DType) qwen3vl.Options {
	return qwen3vl.Options{DType: dt, HiddenStateIndex: qwen3vl.H3HiddenStateIndex}
}
