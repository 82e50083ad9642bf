// Package umt5 runs the UMT5 text encoder of the Wan family (Hugging Face
// UMT5EncoderModel, released as text_encoder/ with HF T5 tensor names) as GoMLX
// graphs: one compiled encoder-block executable looped from Go with each block's
// weights passed as inputs.
//
// What it computes is transformers' UMT5EncoderModel (which FastVideo's
// fastvideo/models/encoders/t5.py mirrors): an unscaled embedding lookup, then
// per block a pre-norm self-attention with T5's RMSNorm (no mean subtraction, no
// bias, statistics in float32), attention scores q·kᵀ WITHOUT the 1/√d scaling,
// a learned relative-position bias (UMT5: one table per block; T5: block 0's table
// shared) and padded keys masked out, then a pre-norm (gated) feed-forward
// network, and a final RMSNorm. Padded query rows are computed like any other
// row, as transformers does; Wan's pipeline then keeps only the valid rows and
// zero-pads to text_len = 512 (ZeroPadded, EncodeWan).
//
// Wan's prompt path, with the tokenizer of internal/tokenizer/unigram:
//
//	tok, err := unigram.Load(filepath.Join(model, "tokenizer"), unigram.Options{})
//	ids, err := tok.EncodeWithSpecial(prompt, umt5.DefaultTextLen) // ... </s>, at most 512 ids
//	enc, err := umt5.Load(backend, filepath.Join(model, "text_encoder"), umt5.Options{})
//	emb, shape, err := enc.EncodeWan(ctx, ids) // float32 [512, d_model], zero rows after the prompt
package umt5

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"fastvideo/internal/modelcfg"
)

// DefaultTextLen is Wan's text_len: FastVideo's T5ArchConfig.text_len, the
// tokenizer's max_length (truncation) and the row count of the prompt embeddings
// after t5_postprocess_text.
const DefaultTextLen = 512

// Config is the encoder geometry, as written in an HF T5/UMT5 config.json.
type Config struct {
	ModelType   string `json:"model_type"`
	VocabSize   int    `json:"vocab_size"`
	DModel      int    `json:"d_model"`
	DKV         int    `json:"d_kv"`
	DFF         int    `json:"d_ff"`
	NumLayers   int    `json:"num_layers"`
	NumHeads    int    `json:"num_heads"`
	NumBuckets  int    `json:"relative_attention_num_buckets"`
	MaxDistance int    `json:"relative_attention_max_distance"`
	// FeedForwardProj is HF's "gated-gelu", "relu", "gated-silu", ...; Act and
	// Gated are derived from it exactly as T5Config does (ParseConfig).
	FeedForwardProj string  `json:"feed_forward_proj"`
	LayerNormEps    float64 `json:"layer_norm_epsilon"`
	PadTokenID      int     `json:"pad_token_id"`
	EOSTokenID      int     `json:"eos_token_id"`

	// Act is the FFN activation (HF ACT2FN name): gelu_new, gelu,
	// gelu_pytorch_tanh, relu, silu or swish.
	Act string `json:"-"`
	// Gated selects the gated FFN (wo(act(wi_0 h) * wi_1 h)) over wo(act(wi h)).
	Gated bool `json:"-"`
}

// PerLayerBias reports whether every block owns a relative_attention_bias table
// (UMT5) rather than all blocks sharing block 0's (original T5).
func (c Config) PerLayerBias() bool { return c.ModelType != "t5" }

// InnerDim is num_heads * d_kv, the width of q, k and v.
func (c Config) InnerDim() int { return c.NumHeads * c.DKV }

// ParseConfig reads an HF config.json of a T5-family encoder. Missing fields keep
// UMT5Config's defaults where transformers has one that matters for inference
// (gated-gelu, 32 buckets, max distance 128, eps 1e-6, pad 0, eos 1), so a
// config that omits them means what it means to transformers.
func ParseConfig(raw []byte) (Config, error) {
	cfg := Config{
		NumBuckets: 32, MaxDistance: 128, FeedForwardProj: "gated-gelu",
		LayerNormEps: 1e-6, PadTokenID: 0, EOSTokenID: 1,
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return Config{}, fmt.Errorf("umt5: config is not valid JSON: %v", err)
	}
	var present map[string]json.RawMessage
	_ = json.Unmarshal(raw, &present) // raw already parsed above
	if _, ok := present["feed_forward_proj"]; !ok && cfg.ModelType == "t5" {
		cfg.FeedForwardProj = "relu" // T5Config's default differs from UMT5Config's
	}
	// transformers' T5Config/UMT5Config derive the activation from
	// feed_forward_proj and ignore a stored dense_act_fn.
	parts := strings.Split(cfg.FeedForwardProj, "-")
	switch {
	case len(parts) == 1:
		cfg.Act = parts[0]
	case len(parts) == 2 && parts[0] == "gated":
		cfg.Act, cfg.Gated = parts[1], true
	default:
		return Config{}, fmt.Errorf("umt5: feed_forward_proj = %q is not of the form {ACT} or gated-{ACT} (e.g. \"gated-gelu\")", cfg.FeedForwardProj)
	}
	if cfg.FeedForwardProj == "gated-gelu" {
		cfg.Act = "gelu_new" // HF's special case: gated-gelu means the tanh approximation
	}
	return modelcfg.Valid(cfg)
}

// LoadConfig reads dir/config.json (dir may also be the file itself).
func LoadConfig(path string) (Config, error) {
	return modelcfg.Read(path, ParseConfig, "umt5", "")
}

var supportedActs = map[string]bool{"gelu_new": true, "gelu": true, "gelu_pytorch_tanh": true, "relu": true, "silu": true, "swish": true}

// Validate checks the geometry, naming every bad field.
func (c Config) Validate() error {
	var bad modelcfg.Problems
	pos := bad.Positive
	pos("vocab_size", c.VocabSize)
	pos("d_model", c.DModel)
	pos("d_kv", c.DKV)
	pos("d_ff", c.DFF)
	bad.Layers("num_layers", c.NumLayers)
	pos("num_heads", c.NumHeads)
	if c.NumBuckets < 4 || c.NumBuckets%2 != 0 {
		bad.Add("relative_attention_num_buckets = %d must be an even number >= 4 (half per direction, half of those exact)", c.NumBuckets)
	}
	if c.NumBuckets >= 4 && c.MaxDistance <= c.NumBuckets/4 {
		bad.Add("relative_attention_max_distance = %d must exceed the exact range num_buckets/4 = %d", c.MaxDistance, c.NumBuckets/4)
	}
	bad.PositiveFloat("layer_norm_epsilon", c.LayerNormEps)
	if !supportedActs[c.Act] {
		bad.Add("feed_forward_proj = %q gives activation %q; supported: gelu_new, gelu, gelu_pytorch_tanh, relu, silu", c.FeedForwardProj, c.Act)
	}
	if c.ModelType != "" && c.ModelType != "umt5" && c.ModelType != "t5" && c.ModelType != "mt5" {
		bad.Add("model_type = %q is not a T5-family encoder (umt5, t5 or mt5)", c.ModelType)
	}
	return bad.Err("umt5")
}

// RelativePositionBuckets returns the bidirectional relative-position bucket of
// every (query i, key j) pair of a length-n sequence, row-major [n, n], computed
// as transformers' _relative_position_bucket does: with rel = j - i, half of the
// buckets serve rel > 0; |rel| below num_buckets/4 gets its own bucket, larger
// distances share log-spaced buckets up to max_distance, and beyond it the last
// bucket of the direction. The log branch is evaluated in float32 operation by
// operation (float32 division, log, division by float32(log(max/exact)),
// multiplication, truncation), as torch evaluates it on a float32 tensor, so
// that distances that land exactly on a bucket boundary (64 with 32 buckets and
// max distance 128, for instance) fall on the same side.
func RelativePositionBuckets(n, numBuckets, maxDistance int) []int32 {
	half := numBuckets / 2
	exact := half / 2
	den := float32(math.Log(float64(maxDistance) / float64(exact)))
	out := make([]int32, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			rel := j - i
			b := 0
			if rel > 0 {
				b = half
			}
			a := rel
			if a < 0 {
				a = -a
			}
			if a < exact {
				b += a
			} else {
				x := float32(a) / float32(exact)
				l := float32(math.Log(float64(x)))
				v := int(float32(float32(l/den) * float32(half-exact)))
				b += min(exact+v, half-1)
			}
			out[i*n+j] = int32(b)
		}
	}
	return out
}
