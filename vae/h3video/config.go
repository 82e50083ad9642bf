// Package h3video is the MiniMax H3 video VAE decoder (AutoencoderKLMiniMaxH3 in FastVideo):
// a per-channel latent de-normalization, a 1×1×1 post-quant convolution and a full-attention ViT
// decoder run per temporal clip and per spatial tile, with the reference's overlap blending in
// both directions. Frames are produced one temporal clip at a time so that memory does not grow with
// the video length. The causal-CNN encoder (Encoder), needed only for FL2VA/Ref2VA conditioning, is
// here too.
//
// Layouts: latents are [1, C, T, Hl, Wl] float32 (channel-major, as the DiT unpatchifies them);
// decoded frames are [3, frames, H, W] float32 in the decoder's normalized pixel space ("sample"),
// or after Pixels in [0, 1], or after RGB24 as interleaved uint8 H×W×3 per frame.
package h3video

import (
	"encoding/json"
	"fmt"
	"math"

	"fastvideo/internal/modelcfg"
)

// Config is the released vae/config.json (diffusers field names), plus the tiling controls that
// FastVideo keeps in its runtime VAEConfig (defaults 256 px tiles, 64 px minimum overlap).
type Config struct {
	InChannels                int       `json:"in_channels"`
	OutChannels               int       `json:"out_channels"`
	LatentChannels            int       `json:"latent_channels"`
	BlockOutChannels          []int     `json:"block_out_channels"`
	LayersPerBlock            int       `json:"layers_per_block"`
	SpatialDownsampleFactors  []int     `json:"spatial_downsample_factors"`
	TemporalDownsampleFactors []int     `json:"temporal_downsample_factors"`
	NormNumGroups             int       `json:"norm_num_groups"`
	NormEps                   float64   `json:"norm_eps"`
	DecoderNumLayers          int       `json:"decoder_num_layers"`
	DecoderNumHeads           int       `json:"decoder_num_attention_heads"`
	DecoderHeadDim            int       `json:"decoder_attention_head_dim"`
	DecoderNumRegisters       int       `json:"decoder_num_register_tokens"`
	DecoderFFNMult            int       `json:"decoder_ffn_mult"`
	DecoderRopeTheta          float64   `json:"decoder_rope_theta"`
	DecoderRopeDimRatio       float64   `json:"decoder_rope_dim_ratio"`
	DecoderNormEps            float64   `json:"decoder_norm_eps"`
	ClipLength                int       `json:"clip_length"`
	TokenDrop                 int       `json:"token_drop"`
	LatentsMean               []float64 `json:"latents_mean"`
	LatentsStd                []float64 `json:"latents_std"`

	// Tiling (pixels). FastVideo's VAEConfig names; absent from the released config.json.
	TileSampleMinHeight        int `json:"tile_sample_min_height"`
	TileSampleMinWidth         int `json:"tile_sample_min_width"`
	TileSampleMinOverlapHeight int `json:"tile_sample_min_overlap_height"`
	TileSampleMinOverlapWidth  int `json:"tile_sample_min_overlap_width"`
}

// PixelMean and PixelStd are the ImageNet statistics the decoder's output is normalized with.
var (
	PixelMean = [3]float32{0.485, 0.456, 0.406}
	PixelStd  = [3]float32{0.229, 0.224, 0.225}
)

// DefaultConfig is FastVideo's MiniMaxH3VideoVAEArchConfig default (the release geometry) with
// neutral latent statistics: real use must read latents_mean/std from vae/config.json.
func DefaultConfig() Config {
	c := Config{
		InChannels: 3, OutChannels: 3, LatentChannels: 24,
		BlockOutChannels:          []int{128, 256, 256, 512, 512, 1024},
		LayersPerBlock:            2,
		SpatialDownsampleFactors:  []int{2, 2, 2, 2, 1, 1},
		TemporalDownsampleFactors: []int{1, 2, 2, 1, 1, 1},
		NormNumGroups:             32, NormEps: 1e-6,
		DecoderNumLayers: 36, DecoderNumHeads: 32, DecoderHeadDim: 64, DecoderNumRegisters: 4,
		DecoderFFNMult: 4, DecoderRopeTheta: 100, DecoderRopeDimRatio: 0.75, DecoderNormEps: 1e-5,
		ClipLength: 17, TokenDrop: 3,
	}
	c.LatentsMean = make([]float64, 24)
	c.LatentsStd = make([]float64, 24)
	for i := range c.LatentsStd {
		c.LatentsStd[i] = 1
	}
	c.fillTileDefaults()
	return c
}

func (c *Config) fillTileDefaults() {
	if c.TileSampleMinHeight == 0 {
		c.TileSampleMinHeight = 256
	}
	if c.TileSampleMinWidth == 0 {
		c.TileSampleMinWidth = 256
	}
	if c.TileSampleMinOverlapHeight == 0 {
		c.TileSampleMinOverlapHeight = 64
	}
	if c.TileSampleMinOverlapWidth == 0 {
		c.TileSampleMinOverlapWidth = 64
	}
}

// ParseConfig reads a config from JSON. It accepts the released vae/config.json (fields at the top
// level) and the fixture JSON (fields under "arch_config", tiling under "vae_config"). Fields that
// are absent keep FastVideo's defaults (DefaultConfig), except latents_mean/std, which are required
// because the defaults (0/1) silently produce wrong colours.
func ParseConfig(data []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("h3video: config is not a JSON object: %w", err)
	}
	c := DefaultConfig()
	c.LatentsMean, c.LatentsStd = nil, nil
	arch := data
	if raw, ok := top["arch_config"]; ok {
		arch = raw
	}
	if err := json.Unmarshal(arch, &c); err != nil {
		return Config{}, fmt.Errorf("h3video: config: %w", err)
	}
	if raw, ok := top["vae_config"]; ok {
		if err := json.Unmarshal(raw, &c); err != nil {
			return Config{}, fmt.Errorf("h3video: config vae_config: %w", err)
		}
	}
	c.fillTileDefaults()
	return modelcfg.Valid(c)
}

// LoadConfig reads dir/config.json (dir is the released vae/ folder, or the config file itself).
func LoadConfig(dir string) (Config, error) {
	return modelcfg.Read(dir, ParseConfig, "h3video", "pass the released vae/ folder, which holds config.json")
}

// maxClipLength bounds clip_length (17 released).
const maxClipLength = 1024

// Validate checks the fields the decoder depends on.
func (c Config) Validate() error {
	pos := func(name string, v int) error { return modelcfg.CheckSize("h3video", name, v, modelcfg.MaxSize) }
	if err := modelcfg.CheckSize("h3video", "decoder_num_layers", c.DecoderNumLayers, modelcfg.MaxLayers); err != nil {
		return err
	}
	// A clip is 17 frames released; the decode plan walks clips frame by frame.
	if err := modelcfg.CheckSize("h3video", "clip_length", c.ClipLength, maxClipLength); err != nil {
		return err
	}
	for _, f := range []struct {
		n string
		v int
	}{
		{"out_channels", c.OutChannels}, {"latent_channels", c.LatentChannels},
		{"decoder_num_layers", c.DecoderNumLayers}, {"decoder_num_attention_heads", c.DecoderNumHeads},
		{"decoder_attention_head_dim", c.DecoderHeadDim}, {"decoder_ffn_mult", c.DecoderFFNMult},
		{"clip_length", c.ClipLength},
		{"tile_sample_min_height", c.TileSampleMinHeight}, {"tile_sample_min_width", c.TileSampleMinWidth},
		{"tile_sample_min_overlap_height", c.TileSampleMinOverlapHeight},
		{"tile_sample_min_overlap_width", c.TileSampleMinOverlapWidth},
	} {
		if err := pos(f.n, f.v); err != nil {
			return err
		}
	}
	if c.OutChannels != 3 {
		return fmt.Errorf("h3video: config out_channels=%d: the decoder's output is de-normalized with 3-channel (RGB) "+
			"ImageNet statistics, so it must be 3", c.OutChannels)
	}
	if c.DecoderNumRegisters < 0 || c.TokenDrop < 0 {
		return fmt.Errorf("h3video: config decoder_num_register_tokens=%d and token_drop=%d must not be negative",
			c.DecoderNumRegisters, c.TokenDrop)
	}
	if len(c.SpatialDownsampleFactors) == 0 || len(c.TemporalDownsampleFactors) != len(c.SpatialDownsampleFactors) {
		return fmt.Errorf("h3video: config spatial_downsample_factors %v and temporal_downsample_factors %v "+
			"must be non-empty and of equal length", c.SpatialDownsampleFactors, c.TemporalDownsampleFactors)
	}
	if len(c.LatentsMean) != c.LatentChannels || len(c.LatentsStd) != c.LatentChannels {
		return fmt.Errorf("h3video: config latents_mean (%d values) and latents_std (%d values) must have "+
			"latent_channels=%d entries each; read them from the released vae/config.json",
			len(c.LatentsMean), len(c.LatentsStd), c.LatentChannels)
	}
	rot := c.RotaryDim()
	if rot%6 != 0 || rot > c.DecoderHeadDim {
		return fmt.Errorf("h3video: rotary width int(decoder_attention_head_dim %d × decoder_rope_dim_ratio %g)=%d "+
			"must be a multiple of 6 and at most the head width", c.DecoderHeadDim, c.DecoderRopeDimRatio, rot)
	}
	if c.DecoderRopeTheta <= 0 {
		return fmt.Errorf("h3video: config decoder_rope_theta=%g must be positive", c.DecoderRopeTheta)
	}
	if c.TokensChunkSize()*c.TemporalRatio()-c.FramePrePadding() <= 0 {
		return fmt.Errorf("h3video: config clip_length=%d gives an empty temporal chunk", c.ClipLength)
	}
	return nil
}

// SpatialRatio is the pixel size of one latent (product of the spatial downsample factors): the
// decoder's spatial patch size.
func (c Config) SpatialRatio() int { return prod(c.SpatialDownsampleFactors) }

// TemporalRatio is the frames per latent token (product of the temporal factors): the decoder's
// temporal patch size.
func (c Config) TemporalRatio() int { return prod(c.TemporalDownsampleFactors) }

// Width is the ViT width (heads × head width).
func (c Config) Width() int { return c.DecoderNumHeads * c.DecoderHeadDim }

// RotaryDim is the number of head channels that RoPE rotates (int(head_dim × ratio), as Python does).
func (c Config) RotaryDim() int { return int(float64(c.DecoderHeadDim) * c.DecoderRopeDimRatio) }

// FramePrePadding is the number of leading decoded frames of a clip that precede its first kept frame.
func (c Config) FramePrePadding() int { return mod(-c.ClipLength, c.TemporalRatio()) }

// TokensChunkSize is the latent-frame stride between temporal clips.
func (c Config) TokensChunkSize() int {
	return (c.ClipLength + c.TemporalRatio() - 1) / c.TemporalRatio()
}

// TokenOverlap is the number of extra latent frames each clip decodes past its chunk.
func (c Config) TokenOverlap() int { return mod(-c.TokenDrop, c.TokensChunkSize()) }

// FrameOverlap is the number of frames blended between consecutive clips.
func (c Config) FrameOverlap() int {
	return max(c.TokenOverlap()*c.TemporalRatio()-c.FramePrePadding(), 0)
}

// ClipTokens is the latent-frame count of every decoded clip.
func (c Config) ClipTokens() int { return c.TokensChunkSize() + c.TokenOverlap() }

// DecodePlan is the temporal schedule of a decode (FastVideo's _temporal_decode_plan).
type DecodePlan struct {
	PadTokens int // latent frames appended by repeating the last one
	Chunks    int // temporal clips decoded
	Frames    int // frames in the output
}

// Plan computes the temporal decode plan for latentFrames latent frames.
func (c Config) Plan(latentFrames int) (DecodePlan, error) {
	if latentFrames <= 0 {
		return DecodePlan{}, fmt.Errorf("h3video: latent frame count must be positive, got %d", latentFrames)
	}
	chunk, ratio := c.TokensChunkSize(), c.TemporalRatio()
	n := latentFrames + c.TokenDrop
	pad := mod(-n, chunk)
	chunks := (n+pad)/chunk - b2i(c.TokenDrop > 0)
	if chunks < 1 {
		pad += chunk
		chunks = 1
	}
	frames := chunks * (chunk*ratio - c.FramePrePadding())
	if c.TokenDrop > 0 {
		frames += c.FrameOverlap()
	}
	if pad > 0 {
		intraTail := c.ClipLength % ratio
		for o := 0; o < pad; o++ {
			if intraTail != 0 && (latentFrames+o)%chunk == 0 {
				frames -= intraTail
			} else {
				frames -= ratio
			}
		}
	}
	if frames <= 0 {
		return DecodePlan{}, fmt.Errorf("h3video: decode plan gives %d frames for %d latent frames: "+
			"clip_length=%d/token_drop=%d are inconsistent", frames, latentFrames, c.ClipLength, c.TokenDrop)
	}
	return DecodePlan{PadTokens: pad, Chunks: chunks, Frames: frames}, nil
}

// Tiles is one axis of a spatial tiling, in pixels: tile i covers [Starts[i], Starts[i]+Sizes[i])
// and overlaps tile i+1 by Overlaps[i].
type Tiles struct {
	Starts, Sizes, Overlaps []int
}

// SplitTiles reproduces FastVideo's _split_tiles: the fewest tiles of size tile that cover length
// with overlaps of at least minOverlap, the slack spread over the overlaps in steps of ratio.
func SplitTiles(length, tile, minOverlap, ratio int) (Tiles, error) {
	if tile >= length {
		return Tiles{Starts: []int{0}, Sizes: []int{length}}, nil
	}
	if minOverlap <= 0 || minOverlap >= tile {
		return Tiles{}, fmt.Errorf("h3video: tile overlap %d must be in (0, tile size %d)", minOverlap, tile)
	}
	n := (length + tile - 1) / tile
	for tile*n-minOverlap*(n-1) < length {
		n++
	}
	ov := make([]int, n-1)
	sum := 0
	for i := range ov {
		ov[i] = minOverlap
		sum += minOverlap
	}
	remaining := tile*n - sum - length
	for i := 0; i < remaining/ratio; i++ {
		ov[i%(n-1)] += ratio
	}
	t := Tiles{Starts: []int{0}, Sizes: make([]int, n), Overlaps: ov}
	for i := range t.Sizes {
		t.Sizes[i] = tile
	}
	for i := 0; i < n-1; i++ {
		t.Starts = append(t.Starts, t.Starts[i]+tile-ov[i])
	}
	return t, nil
}

func prod(v []int) int {
	p := 1
	for _, x := range v {
		p *= x
	}
	return p
}

func mod(a, m int) int { return ((a % m) + m) % m }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// f32 rounds a config float the way torch.tensor(..., dtype=float32) does.
func f32(v float64) float32 {
	if math.IsNaN(v) {
		return float32(math.NaN())
	}
	return float32(v)
}
