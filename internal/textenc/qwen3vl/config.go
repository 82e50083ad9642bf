// Package qwen3vl runs the text path of the Qwen3-VL decoder (the MiniMax H3 text
// conditioner) as GoMLX graphs: one compiled decoder-layer executable looped from Go,
// with each layer's weights passed as inputs. Weights either stay resident on the
// device or are streamed one layer at a time from a memory-mapped checkpoint, in
// which case only the prompt's embedding rows are ever read from the table.
package qwen3vl

import (
	"encoding/json"
	"fmt"
	"math"

	"fastvideo/internal/blockfp8"
	"fastvideo/internal/modelcfg"
)

// H3HiddenStateIndex is the hidden state MiniMax H3 conditions on: hidden_states[50]
// of the 64-layer text stack, the un-normalized output of decoder layer index 49
// (FastVideo's output_hidden_state_index default,
// fastvideo/configs/models/encoders/minimax_h3_qwen3_vl.py).
const H3HiddenStateIndex = 50

// DefaultPrefix is the tensor-name prefix of the text decoder in released Qwen3-VL
// checkpoints (`model.language_model.embed_tokens.weight`, ...).
const DefaultPrefix = "model.language_model."

// Config is the text-decoder geometry. The zero value is invalid; build it with
// ParseConfig (an HF config.json, with or without a nested text_config) or fill
// it and call Validate.
type Config struct {
	VocabSize        int     `json:"vocab_size"`
	HiddenSize       int     `json:"hidden_size"`
	IntermediateSize int     `json:"intermediate_size"`
	NumHiddenLayers  int     `json:"num_hidden_layers"`
	NumHeads         int     `json:"num_attention_heads"`
	NumKVHeads       int     `json:"num_key_value_heads"`
	HeadDim          int     `json:"head_dim"`
	RMSNormEps       float64 `json:"rms_norm_eps"`
	RopeTheta        float64 `json:"rope_theta"`
	// MRoPESection splits the head_dim/2 rotary frequencies between the temporal,
	// height and width position axes. For text-only input all three axes carry the
	// token index, so the split does not change the result.
	MRoPESection     [3]int `json:"mrope_section"`
	MRoPEInterleaved bool   `json:"mrope_interleaved"`
	AttentionBias    bool   `json:"attention_bias"`
	// OutputHiddenStateIndex selects the returned hidden state with the numbering
	// of HF's hidden_states tuple: 0 is the embedding output, k >= 1 the output of
	// decoder layer k-1 (never normalized: FastVideo's conditioner semantics). Only
	// layers 0..k-1 are ever read. 0 in a parsed config means "not given": Encoder
	// then uses NumHiddenLayers unless Options.HiddenStateIndex says otherwise.
	OutputHiddenStateIndex int `json:"output_hidden_state_index"`
	// BlockFP8 is set when config.json's quantization_config declares MiniMax H3's serialized
	// block-FP8 checkpoint (blockfp8.ParseH3Config): the decoder layers' seven linear weights are
	// F8_E4M3 with 128x128 block scales, which LoadWeights dequantizes on the host as it binds them.
	BlockFP8 blockfp8.Block `json:"-"`
}

// hfConfig mirrors the keys a Qwen3-VL config.json may carry, in the layouts
// transformers 4.5x (rope_scaling) and 5.x (rope_parameters) write.
type hfConfig struct {
	Config
	RopeScaling    *ropeParams     `json:"rope_scaling"`
	RopeParameters *ropeParams     `json:"rope_parameters"`
	TextConfig     json.RawMessage `json:"text_config"`
	RawSection     []int           `json:"mrope_section"`
	RawInterleaved *bool           `json:"mrope_interleaved"`
	RawRopeTheta   *float64        `json:"rope_theta"`
	Quantization   json.RawMessage `json:"quantization_config"`
}

type ropeParams struct {
	RopeType    string   `json:"rope_type"`
	RopeTheta   *float64 `json:"rope_theta"`
	Section     []int    `json:"mrope_section"`
	Interleaved *bool    `json:"mrope_interleaved"`
}

// ParseConfig reads a Qwen3-VL config: either the full model's config.json (the
// text fields under "text_config") or a flat text config, as the fixtures store.
func ParseConfig(raw []byte) (Config, error) {
	var top hfConfig
	if err := json.Unmarshal(raw, &top); err != nil {
		return Config{}, fmt.Errorf("qwen3vl: config is not valid JSON: %v", err)
	}
	src := top
	if len(top.TextConfig) > 0 && string(top.TextConfig) != "null" {
		var text hfConfig
		if err := json.Unmarshal(top.TextConfig, &text); err != nil {
			return Config{}, fmt.Errorf("qwen3vl: config text_config is not an object: %v", err)
		}
		src = text
		if src.OutputHiddenStateIndex == 0 {
			src.OutputHiddenStateIndex = top.OutputHiddenStateIndex
		}
	}
	cfg := src.Config
	// Rotary parameters may sit at the top level or in rope_scaling/rope_parameters;
	// the nested forms win because transformers 5 leaves the flat rope_theta null.
	cfg.MRoPEInterleaved = false
	cfg.MRoPESection = [3]int{}
	section := src.RawSection
	if src.RawInterleaved != nil {
		cfg.MRoPEInterleaved = *src.RawInterleaved
	}
	cfg.RopeTheta = 0
	if src.RawRopeTheta != nil {
		cfg.RopeTheta = *src.RawRopeTheta
	}
	for _, rp := range []*ropeParams{src.RopeScaling, src.RopeParameters} {
		if rp == nil {
			continue
		}
		if rp.RopeType != "" && rp.RopeType != "default" && rp.RopeType != "mrope" {
			return Config{}, fmt.Errorf("qwen3vl: rope_type %q is not supported: only the default (unscaled) rotary embedding is implemented", rp.RopeType)
		}
		if rp.RopeTheta != nil {
			cfg.RopeTheta = *rp.RopeTheta
		}
		if len(rp.Section) > 0 {
			section = rp.Section
		}
		if rp.Interleaved != nil {
			cfg.MRoPEInterleaved = *rp.Interleaved
		}
	}
	if len(section) > 0 {
		if len(section) != 3 {
			return Config{}, fmt.Errorf("qwen3vl: mrope_section %v must hold 3 sizes (temporal, height, width)", section)
		}
		copy(cfg.MRoPESection[:], section)
	}
	if q := top.Quantization; len(q) > 0 && string(q) != "null" {
		var err error
		if cfg.BlockFP8, err = blockfp8.ParseH3Config(q); err != nil {
			return Config{}, fmt.Errorf("qwen3vl: config quantization_config: %w", err)
		}
	}
	if cfg.HeadDim == 0 && cfg.NumHeads > 0 {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumHeads
	}
	if cfg.NumKVHeads == 0 {
		cfg.NumKVHeads = cfg.NumHeads
	}
	return modelcfg.Valid(cfg)
}

// LoadConfig reads dir/config.json (dir may also be the file itself).
func LoadConfig(path string) (Config, error) {
	return modelcfg.Read(path, ParseConfig, "qwen3vl", "")
}

// Validate checks the geometry, naming every bad field.
func (c Config) Validate() error {
	var bad modelcfg.Problems
	pos := bad.Positive
	pos("vocab_size", c.VocabSize)
	pos("hidden_size", c.HiddenSize)
	pos("intermediate_size", c.IntermediateSize)
	bad.Layers("num_hidden_layers", c.NumHiddenLayers)
	pos("num_attention_heads", c.NumHeads)
	pos("num_key_value_heads", c.NumKVHeads)
	pos("head_dim", c.HeadDim)
	if c.NumHeads > 0 && c.NumKVHeads > 0 && c.NumHeads%c.NumKVHeads != 0 {
		bad.Add("num_attention_heads = %d must be a multiple of num_key_value_heads = %d (GQA groups)", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim%2 != 0 {
		bad.Add("head_dim = %d must be even for the half-split rotary embedding", c.HeadDim)
	}
	bad.PositiveFloat("rms_norm_eps", c.RMSNormEps)
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		bad.Add("rope_theta = %g must be a finite number > 1", c.RopeTheta)
	}
	if s := c.MRoPESection; s != [3]int{} {
		if s[0] < 0 || s[1] < 0 || s[2] < 0 || 2*(s[0]+s[1]+s[2]) != c.HeadDim {
			bad.Add("mrope_section %v must be non-negative and sum to head_dim/2 = %d", s, c.HeadDim/2)
		}
	}
	if c.AttentionBias {
		bad.Add("attention_bias = true is not supported: Qwen3-VL text layers have no projection biases")
	}
	if c.OutputHiddenStateIndex < 0 || c.OutputHiddenStateIndex > c.NumHiddenLayers {
		bad.Add("output_hidden_state_index = %d must be in [0, num_hidden_layers = %d]", c.OutputHiddenStateIndex, c.NumHiddenLayers)
	}
	return bad.Err("qwen3vl")
}

// Q32B is the text geometry of the Qwen3-VL-32B-class encoder shipped with MiniMax
// H3 (fastvideo/configs/models/encoders/minimax_h3_qwen3_vl.py), with H3's output index. It exists for benchmarks and
// memory estimates with random weights; real runs read the snapshot's config.json.
func Q32B() Config {
	return Config{
		VocabSize: 151936, HiddenSize: 5120, IntermediateSize: 25600, NumHiddenLayers: 64,
		NumHeads: 64, NumKVHeads: 8, HeadDim: 128, RMSNormEps: 1e-6, RopeTheta: 5e6,
		MRoPESection: [3]int{24, 20, 20}, MRoPEInterleaved: true, OutputHiddenStateIndex: H3HiddenStateIndex,
	}
}
