// Package h3audio is MiniMax H3's waveform VAE (`AutoencoderKLMiniMaxH3Audio`):
// a BigVGAN decoder that turns the DiT's audio latents into 32 kHz stereo PCM,
// and the DAC-style encoder used by the reference-audio modes.
//
// Stereo is two independent mono signals: latents are [2, C, N] with the batch
// axis as the audio channel, and the output is one []float32 of hop·N samples
// per channel, clamped to [-1, 1].
//
// Whole-signal decode, no streaming: an H3 clip has 207 latents (5.175 s), the
// decoder's largest activation is 2 items x 8 channels x 165,600 samples
// (10.6 MB f32; every stage holds about 1.3 M values per item), and the
// f32 decoder weights are 260 MB (65 M parameters). The decoder's receptive field
// spans several latents on each side and BigVGAN pads by replicating edge
// samples, so a chunked decode would need overlap and would still differ from
// the reference at the seams, to save memory that is not scarce. Measured on
// the pure-Go backend, peak RSS (random weights held twice on the host
// included) is 1.52 GB for 1 latent and 1.65 GB for 8 (about 18 MB per extra
// latent, an upper bound: XLA assigns buffers more tightly).
package h3audio

import (
	"encoding/json"
	"fmt"

	"fastvideo/internal/modelcfg"
)

// Config is the audio VAE architecture, as stored in the release's
// audio_vae/config.json (same field names as FastVideo's
// MiniMaxH3AudioVAEArchConfig). Fields missing from a config file keep the
// release values of DefaultConfig, which is what FastVideo's loader does.
type Config struct {
	EncoderDim        int   `json:"encoder_dim"`
	EncoderRates      []int `json:"encoder_rates"`
	LatentDim         int   `json:"latent_dim"`
	LatentChannels    int   `json:"latent_channels"`
	NumAttentionHeads int   `json:"num_attention_heads"`

	DecoderDim            int     `json:"decoder_dim"`
	DecoderRates          []int   `json:"decoder_rates"`
	DecoderKernelSizes    []int   `json:"decoder_kernel_sizes"`
	ResblockKernelSizes   []int   `json:"resblock_kernel_sizes"`
	ResblockDilationSizes [][]int `json:"resblock_dilation_sizes"`

	SamplingRate int `json:"sampling_rate"`
	// LatentsMean / LatentsStd de-normalize the DiT's latents per channel
	// (z·std + mean). Absent in a config means mean 0 and std 1, as upstream.
	LatentsMean []float64 `json:"latents_mean"`
	LatentsStd  []float64 `json:"latents_std"`
}

// DefaultConfig returns the released H3 audio VAE architecture (fastvideo/models/vaes/minimax_h3_audio.py).
// The latent statistics are not part of it: they come from the config file.
func DefaultConfig() Config {
	return Config{
		EncoderDim:            64,
		EncoderRates:          []int{2, 4, 4, 5, 5},
		LatentDim:             2048,
		LatentChannels:        32,
		NumAttentionHeads:     8,
		DecoderDim:            1024,
		DecoderRates:          []int{5, 5, 2, 2, 2, 2, 2},
		DecoderKernelSizes:    []int{9, 9, 4, 4, 4, 4, 4},
		ResblockKernelSizes:   []int{3, 7, 11},
		ResblockDilationSizes: [][]int{{1, 3, 5}, {1, 3, 5}, {1, 3, 5}},
		SamplingRate:          32000,
	}
}

// ParseConfig reads a config JSON (the release's config.json, or a fixture's
// arch_config) over DefaultConfig and validates it.
func ParseConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("h3audio: config is not valid JSON for the audio VAE: %w", err)
	}
	return modelcfg.Valid(cfg)
}

// ReadConfig reads dir/config.json.
func ReadConfig(dir string) (Config, error) {
	return modelcfg.Read(dir, ParseConfig, "h3audio: reading the audio VAE config", "pass the release's audio_vae/ folder")
}

// HopLength is the number of waveform samples per latent frame (800 in the release).
func (c Config) HopLength() int {
	h := 1
	for _, r := range c.DecoderRates {
		h *= r
	}
	return h
}

// Mean returns the per-channel latent mean (zeros when the config has none).
func (c Config) Mean() []float64 {
	if c.LatentsMean == nil {
		return make([]float64, c.LatentChannels)
	}
	return c.LatentsMean
}

// Std returns the per-channel latent std (ones when the config has none).
func (c Config) Std() []float64 {
	if c.LatentsStd == nil {
		s := make([]float64, c.LatentChannels)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	return c.LatentsStd
}

// Validate checks the invariants the graphs rely on; errors name the field.
func (c Config) Validate() error {
	for _, check := range []func() error{c.checkSizes, c.checkDecoder, c.checkResblocks, c.checkEncoder, c.checkLatents} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) checkSizes() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"latent_channels", c.LatentChannels}, {"latent_dim", c.LatentDim},
		{"decoder_dim", c.DecoderDim}, {"encoder_dim", c.EncoderDim},
		{"num_attention_heads", c.NumAttentionHeads}, {"sampling_rate", c.SamplingRate},
	} {
		if f.v <= 0 {
			return fmt.Errorf("h3audio: config %s = %d, must be positive", f.name, f.v)
		}
	}
	return nil
}

// checkDecoder checks the upsampler stages: each transposed conv must multiply the length exactly.
func (c Config) checkDecoder() error {
	if len(c.DecoderRates) == 0 {
		return fmt.Errorf("h3audio: config decoder_rates is empty; the release uses [5,5,2,2,2,2,2]")
	}
	if len(c.DecoderKernelSizes) != len(c.DecoderRates) {
		return fmt.Errorf("h3audio: config decoder_kernel_sizes has %d entries but decoder_rates has %d; they pair up per upsampler",
			len(c.DecoderKernelSizes), len(c.DecoderRates))
	}
	for i, r := range c.DecoderRates {
		k := c.DecoderKernelSizes[i]
		if r <= 0 || k < r || (k-r)%2 != 0 {
			return fmt.Errorf("h3audio: config decoder stage %d has rate %d and kernel %d; need kernel >= rate with an even difference so the transposed conv multiplies the length exactly",
				i, r, k)
		}
	}
	if c.DecoderDim>>len(c.DecoderRates) < 1 || c.DecoderDim%(1<<len(c.DecoderRates)) != 0 {
		return fmt.Errorf("h3audio: config decoder_dim = %d is halved %d times (once per decoder rate) and must stay a positive integer",
			c.DecoderDim, len(c.DecoderRates))
	}
	return nil
}

// checkResblocks checks the AMP resblocks: odd kernels (length-preserving) and positive dilations.
func (c Config) checkResblocks() error {
	if len(c.ResblockKernelSizes) == 0 || len(c.ResblockDilationSizes) != len(c.ResblockKernelSizes) {
		return fmt.Errorf("h3audio: config resblock_kernel_sizes (%d entries) and resblock_dilation_sizes (%d entries) must be non-empty and pair up",
			len(c.ResblockKernelSizes), len(c.ResblockDilationSizes))
	}
	for j, k := range c.ResblockKernelSizes {
		if k <= 0 || k%2 == 0 {
			return fmt.Errorf("h3audio: config resblock_kernel_sizes[%d] = %d; the AMP convs need an odd kernel to keep the length", j, k)
		}
		if len(c.ResblockDilationSizes[j]) == 0 {
			return fmt.Errorf("h3audio: config resblock_dilation_sizes[%d] is empty", j)
		}
		for _, d := range c.ResblockDilationSizes[j] {
			if d <= 0 {
				return fmt.Errorf("h3audio: config resblock_dilation_sizes[%d] has dilation %d, must be positive", j, d)
			}
		}
	}
	return nil
}

// checkEncoder checks that the encoder downsamples by the hop the decoder upsamples by.
func (c Config) checkEncoder() error {
	if len(c.EncoderRates) == 0 {
		return fmt.Errorf("h3audio: config encoder_rates is empty; the release uses [2,4,4,5,5]")
	}
	hop := 1
	for i, r := range c.EncoderRates {
		if r <= 0 {
			return fmt.Errorf("h3audio: config encoder_rates[%d] = %d, must be positive", i, r)
		}
		hop *= r
	}
	if hop != c.HopLength() {
		return fmt.Errorf("h3audio: config decoder_rates multiply to %d but encoder_rates to %d; the decoder must upsample by the encoder hop",
			c.HopLength(), hop)
	}
	return nil
}

func (c Config) checkLatents() error {
	if c.LatentDim%c.LatentChannels != 0 {
		return fmt.Errorf("h3audio: config latent_dim = %d is not a multiple of latent_channels = %d", c.LatentDim, c.LatentChannels)
	}
	if c.LatentDim%c.NumAttentionHeads != 0 {
		return fmt.Errorf("h3audio: config latent_dim = %d is not a multiple of num_attention_heads = %d", c.LatentDim, c.NumAttentionHeads)
	}
	for _, s := range []struct {
		name string
		v    []float64
	}{{"latents_mean", c.LatentsMean}, {"latents_std", c.LatentsStd}} {
		if s.v != nil && len(s.v) != c.LatentChannels {
			return fmt.Errorf("h3audio: config %s has %d values, want latent_channels = %d", s.name, len(s.v), c.LatentChannels)
		}
	}
	return nil
}
