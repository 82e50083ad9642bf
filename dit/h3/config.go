package h3

import (
	"encoding/json"
	"fmt"

	"fastvideo/internal/modelcfg"
)

// Modalities is the number of token tags of the packed sequence: video = 0, text = 1, audio = 2.
const Modalities = 3

// Token tags of packed rows.
const (
	TagVideo = 0
	TagText  = 1
	TagAudio = 2
)

// Config is the released transformer/config.json (the same field names as FastVideo's MiniMaxH3ArchConfig;
// the fixtures carry it under "arch_config").
type Config struct {
	NumLayers          int     `json:"num_layers"`
	NumRefinerLayers   int     `json:"num_refiner_layers"`
	HiddenSize         int     `json:"hidden_size"`
	NumAttentionHeads  int     `json:"num_attention_heads"`
	AttentionHeadDim   int     `json:"attention_head_dim"`
	FFNDim             int     `json:"ffn_dim"`
	InChannels         int     `json:"in_channels"`
	OutChannels        int     `json:"out_channels"`
	AudioInChannels    int     `json:"audio_in_channels"`
	PatchSize          []int   `json:"patch_size"`
	TextDim            int     `json:"text_dim"`
	FreqDim            int     `json:"freq_dim"`
	TimeEmbedHiddenDim int     `json:"time_embed_hidden_dim"`
	TimeEmbedDim       int     `json:"time_embed_dim"`
	AdaLNRank          int     `json:"-"` // 0: full AdaLN projections (config "adaln_rank": null)
	RopeFreqDim        int     `json:"rope_freq_dim"`
	RopeTheta          float64 `json:"rope_theta"`
	NormEps            float64 `json:"norm_eps"`
	QKNormEps          float64 `json:"qk_norm_eps"`
	FinalNormEps       float64 `json:"final_norm_eps"`
}

// ReleaseConfig is the configuration of the released 33.1B MiniMax H3 transformer (the released transformer/config.json).
func ReleaseConfig() Config {
	return Config{
		NumLayers: 50, NumRefinerLayers: 2, HiddenSize: 5376, NumAttentionHeads: 56, AttentionHeadDim: 128,
		FFNDim: 14336, InChannels: 24, OutChannels: 24, AudioInChannels: 32, PatchSize: []int{1, 2, 2},
		TextDim: 5120, FreqDim: 256, TimeEmbedHiddenDim: 5376, TimeEmbedDim: 2688,
		RopeFreqDim: 16, RopeTheta: 10000, NormEps: 1e-5, QKNormEps: 1e-5, FinalNormEps: 1e-5,
	}
}

// UnmarshalJSON decodes a config over the release defaults, so a config.json that omits a field keeps the
// released value; "adaln_rank": null means full AdaLN.
func (c *Config) UnmarshalJSON(data []byte) error {
	type plain Config
	p := plain(ReleaseConfig())
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	var extra struct {
		AdaLNRank *int `json:"adaln_rank"`
	}
	if err := json.Unmarshal(data, &extra); err != nil {
		return err
	}
	*c = Config(p)
	if extra.AdaLNRank != nil {
		c.AdaLNRank = *extra.AdaLNRank
	}
	return nil
}

// MarshalJSON writes the config.json form (adaln_rank null when 0).
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	var rank *int
	if c.AdaLNRank > 0 {
		r := c.AdaLNRank
		rank = &r
	}
	return json.Marshal(struct {
		plain
		AdaLNRank *int `json:"adaln_rank"`
	}{plain(c), rank})
}

// ParseConfig decodes and validates a transformer config.json.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("h3: config.json: %w", err)
	}
	return modelcfg.Valid(c)
}

// Validate checks the fields the forward depends on.
func (c Config) Validate() error {
	if err := modelcfg.CheckSize("h3", "num_layers", c.NumLayers, modelcfg.MaxLayers); err != nil {
		return err
	}
	pos := []struct {
		name string
		v    int
	}{
		{"num_layers", c.NumLayers}, {"hidden_size", c.HiddenSize}, {"num_attention_heads", c.NumAttentionHeads},
		{"attention_head_dim", c.AttentionHeadDim}, {"ffn_dim", c.FFNDim}, {"in_channels", c.InChannels},
		{"audio_in_channels", c.AudioInChannels}, {"text_dim", c.TextDim}, {"freq_dim", c.FreqDim},
		{"time_embed_hidden_dim", c.TimeEmbedHiddenDim}, {"time_embed_dim", c.TimeEmbedDim},
		{"rope_freq_dim", c.RopeFreqDim},
	}
	for _, f := range pos {
		if err := modelcfg.CheckSize("h3", f.name, f.v, modelcfg.MaxSize); err != nil {
			return err
		}
	}
	if c.NumRefinerLayers < 0 || c.NumRefinerLayers > modelcfg.MaxLayers {
		return fmt.Errorf("h3: config num_refiner_layers = %d, must be in 0..%d", c.NumRefinerLayers, modelcfg.MaxLayers)
	}
	if len(c.PatchSize) != 3 || c.PatchSize[0] <= 0 || c.PatchSize[1] <= 0 || c.PatchSize[2] <= 0 {
		return fmt.Errorf("h3: config patch_size = %v, want three positive ints (t, h, w)", c.PatchSize)
	}
	if c.OutChannels != 0 && c.OutChannels != c.InChannels {
		return fmt.Errorf("h3: config out_channels = %d differs from in_channels = %d; H3 predicts a velocity of the input latent", c.OutChannels, c.InChannels)
	}
	if c.FreqDim%2 != 0 {
		return fmt.Errorf("h3: config freq_dim = %d, must be even (cos and sin halves)", c.FreqDim)
	}
	if c.RotaryDim() > c.AttentionHeadDim {
		return fmt.Errorf("h3: config rope_freq_dim = %d gives a rotary width %d above attention_head_dim = %d",
			c.RopeFreqDim, c.RotaryDim(), c.AttentionHeadDim)
	}
	if c.AdaLNRank < 0 || c.AdaLNRank > c.TimeEmbedDim {
		return fmt.Errorf("h3: config adaln_rank = %d, must be null or in (0, time_embed_dim = %d]", c.AdaLNRank, c.TimeEmbedDim)
	}
	if c.RopeTheta <= 0 {
		return fmt.Errorf("h3: config rope_theta = %g, must be positive", c.RopeTheta)
	}
	for _, e := range []struct {
		name string
		v    float64
	}{{"norm_eps", c.NormEps}, {"qk_norm_eps", c.QKNormEps}, {"final_norm_eps", c.FinalNormEps}} {
		if e.v <= 0 {
			return fmt.Errorf("h3: config %s = %g, must be positive", e.name, e.v)
		}
	}
	return nil
}

// VideoPatchDim is the width of one video row: in_channels·pt·ph·pw (96 for the release).
func (c Config) VideoPatchDim() int {
	return c.InChannels * c.PatchSize[0] * c.PatchSize[1] * c.PatchSize[2]
}

// InnerDim is the attention width heads·head_dim (7168 for the release; not hidden_size).
func (c Config) InnerDim() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// RotaryDim is the rotated prefix of each head: 2·3·rope_freq_dim (96 of 128 for the release).
func (c Config) RotaryDim() int { return 6 * c.RopeFreqDim }

// AdaLNInDim is the input width of the AdaLN projections: adaln_rank when set, else time_embed_dim.
func (c Config) AdaLNInDim() int {
	if c.AdaLNRank > 0 {
		return c.AdaLNRank
	}
	return c.TimeEmbedDim
}

// ModulationWidth is the output width of one block's AdaLN projection: 6 tables × 3 modalities × hidden.
func (c Config) ModulationWidth() int { return 6 * Modalities * c.HiddenSize }
