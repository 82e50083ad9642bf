package wan

import (
	"encoding/json"
	"fmt"

	"fastvideo/internal/modelcfg"
)

// Config is the released transformer/config.json of a Wan DiT (diffusers WanTransformer3DModel keys; the
// fixtures carry the same keys under "arch_config"). The hidden size is not a field: it is always
// num_attention_heads·attention_head_dim, as FastVideo derives it.
type Config struct {
	NumLayers         int     `json:"num_layers"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	AttentionHeadDim  int     `json:"attention_head_dim"`
	FFNDim            int     `json:"ffn_dim"`
	InChannels        int     `json:"in_channels"`
	OutChannels       int     `json:"out_channels"`
	PatchSize         []int   `json:"patch_size"`
	TextDim           int     `json:"text_dim"`
	FreqDim           int     `json:"freq_dim"`
	Eps               float64 `json:"eps"`
	QKNorm            string  `json:"qk_norm"`
	CrossAttnNorm     bool    `json:"cross_attn_norm"`
	RopeMaxSeqLen     int     `json:"rope_max_seq_len"`
	// ImageDim and AddedKVProjDim are set only by the image-to-video (Wan2.1 I2V) variant, which this
	// package does not implement; Validate rejects them.
	ImageDim       *int `json:"image_dim"`
	AddedKVProjDim *int `json:"added_kv_proj_dim"`
	// REmbedder is FastVideo's AnyFlow dual-timestep option (config "r_embedder"); not implemented.
	REmbedder bool `json:"r_embedder"`
}

// QKNormAcrossHeads is the only qk_norm of the released checkpoints: one RMSNorm over all heads (width D).
const QKNormAcrossHeads = "rms_norm_across_heads"

// Wan21T2V14B is the Wan2.1-T2V-14B transformer (also each Wan2.2-T2V-A14B expert). It is FastVideo's
// WanVideoArchConfig default, so a config.json that omits a field keeps this value (fastvideo/configs/models/dits/wanvideo.py).
func Wan21T2V14B() Config {
	return Config{
		NumLayers: 40, NumAttentionHeads: 40, AttentionHeadDim: 128, FFNDim: 13824,
		InChannels: 16, OutChannels: 16, PatchSize: []int{1, 2, 2}, TextDim: 4096, FreqDim: 256,
		Eps: 1e-6, QKNorm: QKNormAcrossHeads, CrossAttnNorm: true, RopeMaxSeqLen: 1024,
	}
}

// Wan21T2V1_3B is the Wan2.1-T2V-1.3B transformer (also FastWan2.1-T2V-1.3B).
func Wan21T2V1_3B() Config {
	c := Wan21T2V14B()
	c.NumLayers, c.NumAttentionHeads, c.FFNDim = 30, 12, 8960
	return c
}

// Wan22TI2V5B is the Wan2.2-TI2V-5B transformer (also FastWan2.2-TI2V-5B).
func Wan22TI2V5B() Config {
	c := Wan21T2V14B()
	c.NumLayers, c.NumAttentionHeads, c.FFNDim = 30, 24, 14336
	c.InChannels, c.OutChannels = 48, 48
	return c
}

// UnmarshalJSON decodes a config over the 14B defaults; "out_channels": null (or absent when in_channels is
// given) means out_channels = in_channels, as FastVideo's __post_init__ does.
func (c *Config) UnmarshalJSON(data []byte) error {
	type plain Config
	p := plain(Wan21T2V14B())
	p.OutChannels = 0
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*c = Config(p)
	if c.OutChannels == 0 {
		c.OutChannels = c.InChannels
	}
	return nil
}

// ParseConfig decodes and validates a transformer config.json.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("wan: config.json: %w", err)
	}
	return modelcfg.Valid(c)
}

// ReadConfig reads dir/config.json.
func ReadConfig(dir string) (Config, error) {
	return modelcfg.Read(dir, ParseConfig, "wan: reading the transformer config", fmt.Sprintf("is %s a released transformer/ folder?", dir))
}

// Validate checks the fields the forward depends on.
func (c Config) Validate() error {
	if err := modelcfg.CheckSize("wan", "num_layers", c.NumLayers, modelcfg.MaxLayers); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"num_layers", c.NumLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"attention_head_dim", c.AttentionHeadDim}, {"ffn_dim", c.FFNDim}, {"in_channels", c.InChannels},
		{"out_channels", c.OutChannels}, {"text_dim", c.TextDim}, {"freq_dim", c.FreqDim},
	} {
		if err := modelcfg.CheckSize("wan", f.name, f.v, modelcfg.MaxSize); err != nil {
			return err
		}
	}
	if len(c.PatchSize) != 3 || c.PatchSize[0] <= 0 || c.PatchSize[1] <= 0 || c.PatchSize[2] <= 0 {
		return fmt.Errorf("wan: config patch_size = %v, want three positive ints (t, h, w)", c.PatchSize)
	}
	if c.FreqDim%2 != 0 {
		return fmt.Errorf("wan: config freq_dim = %d, must be even (cosine and sine halves)", c.FreqDim)
	}
	for i, d := range c.RopeDims() {
		if d <= 0 || d%2 != 0 {
			return fmt.Errorf("wan: config attention_head_dim = %d splits into RoPE widths %v; axis %d must be even and positive (use a head width whose split [d−4·(d/6), 2·(d/6), 2·(d/6)] is even, e.g. 128)",
				c.AttentionHeadDim, c.RopeDims(), i)
		}
	}
	if c.Eps <= 0 {
		return fmt.Errorf("wan: config eps = %g, must be positive", c.Eps)
	}
	if c.QKNorm != QKNormAcrossHeads {
		return fmt.Errorf("wan: config qk_norm = %q is not supported; every released Wan DiT uses %q", c.QKNorm, QKNormAcrossHeads)
	}
	if !c.CrossAttnNorm {
		return fmt.Errorf("wan: config cross_attn_norm = false is not supported (FastVideo asserts it is true)")
	}
	if c.ImageDim != nil || c.AddedKVProjDim != nil {
		return fmt.Errorf("wan: config image_dim/added_kv_proj_dim are set: this is an image-to-video (I2V) transformer, which package wan does not implement; use a T2V or TI2V checkpoint")
	}
	if c.REmbedder {
		return fmt.Errorf("wan: config r_embedder = true (AnyFlow dual timestep) is not supported")
	}
	return nil
}

// HiddenSize is D = num_attention_heads·attention_head_dim.
func (c Config) HiddenSize() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// PatchVolume is pt·ph·pw.
func (c Config) PatchVolume() int { return c.PatchSize[0] * c.PatchSize[1] * c.PatchSize[2] }

// RopeDims is the split of a head into the rotary widths of the (t, h, w) axes:
// [d − 4·(d/6), 2·(d/6), 2·(d/6)] (44, 42, 42 for d = 128).
func (c Config) RopeDims() [3]int {
	d := c.AttentionHeadDim
	return [3]int{d - 4*(d/6), 2 * (d / 6), 2 * (d / 6)}
}

// Tokens returns the token grid (T', H', W') of a latent of T×H×W frames/rows/columns, or an error when
// the latent is not a whole number of patches.
func (c Config) Tokens(frames, height, width int) (t, h, w int, err error) {
	if frames <= 0 || height <= 0 || width <= 0 ||
		frames%c.PatchSize[0] != 0 || height%c.PatchSize[1] != 0 || width%c.PatchSize[2] != 0 {
		return 0, 0, 0, fmt.Errorf("wan: latent grid %d×%d×%d (frames×height×width) is not a positive multiple of patch_size %v",
			frames, height, width, c.PatchSize)
	}
	return frames / c.PatchSize[0], height / c.PatchSize[1], width / c.PatchSize[2], nil
}

// ForwardFLOPs counts one forward's matmul FLOPs (2 per multiply-add) (computed, not measured): every
// linear (patch embedding, condition embedder, Q/K/V/O of both attentions, FFN, proj_out), the dense
// self-attention products QKᵀ and PV over tokens, and the cross-attention products over textTokens rows.
// Norms, activations, softmax and RoPE are left out.
func (c Config) ForwardFLOPs(tokens, textTokens int) float64 {
	l, s := float64(tokens), float64(textTokens)
	d, f := float64(c.HiddenSize()), float64(c.FFNDim)
	block := 2*l*d*d*6 + // self Q, K, V, O; cross Q, O
		2*s*d*d*2 + // cross K, V over the text
		2*l*d*f*2 + // FFN in and out
		4*l*l*d + // self QKᵀ and PV
		4*l*s*d // cross QKᵀ and PV
	cp := float64(c.InChannels * c.PatchVolume())
	top := 2*l*cp*d + // patch embedding
		2*s*(float64(c.TextDim)*d+d*d) + // text embedder
		2*l*d*float64(c.OutChannels*c.PatchVolume()) // proj_out
	return float64(c.NumLayers)*block + top
}
