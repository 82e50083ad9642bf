// Package wan is the Wan2.1 / Wan2.2 video VAE decoder (FastVideo's AutoencoderKLWan, diffusers
// naming): a causal 3D-convolution decoder that turns Wan latents [1, z, T, h, w] into
// 1 + 4·(T−1) RGB frames.
//
// The decoder runs the way the reference's feature-cache path does: one latent frame (temporal
// chunk) at a time, every 3-tap causal convolution carrying the last two frames of its input from
// one chunk to the next. The first chunk yields 1 frame and each later chunk 4, so memory stays flat
// in the frame count and frames stream out per chunk. Wan2.1 (z=16, 8× spatial) and Wan2.2
// (z=48, residual up blocks with parameter-free DupUp3D shortcuts, 2×2 patch unpatchify, 16×
// spatial) share the code; which one runs is read from the config. The encoder (optional, for
// image conditioning) runs the same way: the first frame alone, then 4 frames per chunk.
//
// Layouts: latents are [1, z, T, h, w] float32 (channel-major); decoded frames are
// [3, frames, H, W] float32 clamped to [-1, 1] (the reference's decode output), or after Pixels in
// [0, 1], or after RGB24 as interleaved uint8 H×W×3 per frame.
package wan

import (
	"encoding/json"
	"fmt"

	"fastvideo/internal/modelcfg"
	"fastvideo/internal/modelkit"
)

// Config is the released vae/config.json of a Wan model (diffusers AutoencoderKLWan field names;
// FastVideo's WanVAEArchConfig uses the same). Fields missing from a file keep DefaultConfig's
// values, as FastVideo's loader does.
type Config struct {
	BaseDim int `json:"base_dim"`
	// DecoderBaseDim overrides BaseDim for the decoder (Wan2.2: 256 against 160); 0 or null: BaseDim.
	DecoderBaseDim     int       `json:"decoder_base_dim"`
	ZDim               int       `json:"z_dim"`
	DimMult            []int     `json:"dim_mult"`
	NumResBlocks       int       `json:"num_res_blocks"`
	AttnScales         []float64 `json:"attn_scales"`
	TemperalDownsample []bool    `json:"temperal_downsample"`
	// IsResidual selects Wan2.2's residual up blocks (DupUp3D shortcut, upsampler keeping the width).
	IsResidual  bool `json:"is_residual"`
	InChannels  int  `json:"in_channels"`
	OutChannels int  `json:"out_channels"`
	// PatchSize > 1 means the decoder emits PatchSize² sub-pixels per channel (Wan2.2: 2, 12
	// channels → 3 colours); 0 or null means no patching.
	PatchSize           int `json:"patch_size"`
	ScaleFactorTemporal int `json:"scale_factor_temporal"`
	ScaleFactorSpatial  int `json:"scale_factor_spatial"`
	// ClipOutput is carried for completeness: FastVideo's feature-cache decode clamps the output to
	// [-1, 1] whatever its value (wanvae.py decode), and so does this package.
	ClipOutput  bool      `json:"clip_output"`
	LatentsMean []float64 `json:"latents_mean"`
	LatentsStd  []float64 `json:"latents_std"`
}

// DefaultConfig is the released Wan2.1 VAE (FastVideo's WanVAEArchConfig defaults, z=16, 4×8×8),
// latent statistics included.
func DefaultConfig() Config {
	return Config{
		BaseDim: 96, ZDim: 16, DimMult: []int{1, 2, 4, 4}, NumResBlocks: 2,
		TemperalDownsample: []bool{false, true, true},
		InChannels:         3, OutChannels: 3, ScaleFactorTemporal: 4, ScaleFactorSpatial: 8, ClipOutput: true,
		LatentsMean: []float64{-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
			0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921},
		LatentsStd: []float64{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
			3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160},
	}
}

// Wan22Config is the released Wan2.2-TI2V-5B VAE (z=48, 4×16×16, residual, patch 2), latent
// statistics included (the table of the checkpoint's vae/config.json).
func Wan22Config() Config {
	return Config{
		BaseDim: 160, DecoderBaseDim: 256, ZDim: 48, DimMult: []int{1, 2, 4, 4}, NumResBlocks: 2,
		TemperalDownsample: []bool{false, true, true}, IsResidual: true,
		InChannels: 12, OutChannels: 12, PatchSize: 2, ScaleFactorTemporal: 4, ScaleFactorSpatial: 16,
		LatentsMean: []float64{-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
			-0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
			-0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
			-0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
			-0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
			0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667},
		LatentsStd: []float64{0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
			0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
			0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
			0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
			0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
			0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744},
	}
}

// ParseConfig reads a config from JSON: the released vae/config.json (fields at the top level) or
// a fixture JSON (fields under "arch_config"). Absent fields keep DefaultConfig's values.
func ParseConfig(data []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("wan: VAE config is not a JSON object: %w", err)
	}
	arch := data
	if raw, ok := top["arch_config"]; ok {
		arch = raw
	}
	c := DefaultConfig()
	// A file that sets z_dim without the statistics keeps Wan2.1's 16 values, which Validate
	// rejects by length: the statistics are never guessed.
	if err := json.Unmarshal(arch, &c); err != nil {
		return Config{}, fmt.Errorf("wan: VAE config: %w", err)
	}
	return modelcfg.Valid(c)
}

// LoadConfig reads dir/config.json (dir is the released vae/ folder).
func LoadConfig(dir string) (Config, error) {
	return modelcfg.Read(dir, ParseConfig, "wan", "pass the released vae/ folder, which holds config.json")
}

// Validate checks the fields the decoder depends on; errors name the field and the fix.
func (c Config) Validate() error {
	for _, f := range []struct {
		n string
		v int
	}{{"base_dim", c.BaseDim}, {"z_dim", c.ZDim}, {"out_channels", c.OutChannels}} {
		if f.v <= 0 {
			return fmt.Errorf("wan: config %s=%d must be positive", f.n, f.v)
		}
	}
	if c.DecoderBaseDim < 0 {
		return fmt.Errorf("wan: config decoder_base_dim=%d must be positive (or absent to use base_dim)", c.DecoderBaseDim)
	}
	if c.NumResBlocks < 0 {
		return fmt.Errorf("wan: config num_res_blocks=%d must not be negative", c.NumResBlocks)
	}
	if len(c.DimMult) < 1 {
		return fmt.Errorf("wan: config dim_mult is empty; the releases use [1, 2, 4, 4]")
	}
	for i, m := range c.DimMult {
		if m <= 0 {
			return fmt.Errorf("wan: config dim_mult[%d]=%d must be positive", i, m)
		}
	}
	if len(c.TemperalDownsample) != len(c.DimMult)-1 {
		return fmt.Errorf("wan: config temperal_downsample has %d entries, want len(dim_mult)-1 = %d (one per down/up sampling stage)",
			len(c.TemperalDownsample), len(c.DimMult)-1)
	}
	if c.PatchSize < 0 {
		return fmt.Errorf("wan: config patch_size=%d must be positive (or null for none)", c.PatchSize)
	}
	if p := c.patch(); c.OutChannels%(p*p) != 0 {
		return fmt.Errorf("wan: config out_channels=%d is not a multiple of patch_size²=%d", c.OutChannels, p*p)
	}
	for _, b := range c.upBlocks() {
		if !c.IsResidual && b.mode != upNone && b.out%2 != 0 {
			return fmt.Errorf("wan: config gives a Wan2.1 up block width %d, which its upsampler halves; it must be even", b.out)
		}
		if b.shortcut && (b.out*b.ft*4)%b.in != 0 {
			return fmt.Errorf("wan: config gives a residual up block %d→%d channels whose DupUp3D shortcut cannot repeat channels evenly",
				b.in, b.out)
		}
	}
	if c.ScaleFactorTemporal != 0 && c.ScaleFactorTemporal != c.TemporalRatio() {
		return fmt.Errorf("wan: config scale_factor_temporal=%d disagrees with temperal_downsample %v (ratio %d)",
			c.ScaleFactorTemporal, c.TemperalDownsample, c.TemporalRatio())
	}
	if c.ScaleFactorSpatial != 0 && c.ScaleFactorSpatial != c.SpatialRatio() {
		return fmt.Errorf("wan: config scale_factor_spatial=%d disagrees with dim_mult (%d stages) and patch_size %d (ratio %d)",
			c.ScaleFactorSpatial, len(c.DimMult), c.PatchSize, c.SpatialRatio())
	}
	if len(c.LatentsMean) != c.ZDim || len(c.LatentsStd) != c.ZDim {
		return fmt.Errorf("wan: config latents_mean (%d values) and latents_std (%d values) must both have z_dim=%d values; copy them from the model's vae/config.json",
			len(c.LatentsMean), len(c.LatentsStd), c.ZDim)
	}
	for i, s := range c.LatentsStd {
		if s == 0 {
			return fmt.Errorf("wan: config latents_std[%d] is 0", i)
		}
	}
	return nil
}

func (c Config) patch() int { return max(c.PatchSize, 1) }

// decoderDim is the decoder's base width.
func (c Config) decoderDim() int {
	if c.DecoderBaseDim > 0 {
		return c.DecoderBaseDim
	}
	return c.BaseDim
}

// SpatialRatio is pixels per latent along H and W (8 for Wan2.1, 16 for Wan2.2).
func (c Config) SpatialRatio() int { return (1 << (len(c.DimMult) - 1)) * c.patch() }

// TemporalRatio is the temporal compression (4 for both releases).
func (c Config) TemporalRatio() int {
	r := 1
	for _, t := range c.TemperalDownsample {
		if t {
			r *= 2
		}
	}
	return r
}

// PixelChannels is the number of colour channels of a decoded frame (3).
func (c Config) PixelChannels() int { return c.OutChannels / (c.patch() * c.patch()) }

// NumFrames is the number of frames decoded from latentFrames latent frames: 1 + ratio·(T−1).
func (c Config) NumFrames(latentFrames int) int { return 1 + c.TemporalRatio()*(latentFrames-1) }

// LatentDims checks a latent shape [1, z, T, h, w] (or [z, T, h, w]) against the config and the
// number of values n, and returns T, h, w.
func (c Config) LatentDims(shape []int, n int) (t, h, w int, err error) {
	s := shape
	if len(s) == 5 {
		if s[0] != 1 {
			return 0, 0, 0, fmt.Errorf("wan: latent batch %d is not supported: decode one video (batch 1) at a time", s[0])
		}
		s = s[1:]
	}
	if len(s) != 4 {
		return 0, 0, 0, fmt.Errorf("wan: latent shape %v must be [1, z, T, h, w]", shape)
	}
	if s[0] != c.ZDim {
		return 0, 0, 0, fmt.Errorf("wan: latents have %d channels, the VAE config has z_dim=%d (Wan2.1: 16, Wan2.2: 48)", s[0], c.ZDim)
	}
	for _, v := range s[1:] {
		if v <= 0 {
			return 0, 0, 0, fmt.Errorf("wan: latent shape %v has a non-positive dimension", shape)
		}
	}
	if got := s[0] * s[1] * s[2] * s[3]; got != n {
		return 0, 0, 0, fmt.Errorf("wan: latent shape %v holds %d values, the slice has %d", shape, got, n)
	}
	return s[1], s[2], s[3], nil
}

// OutputShape is the decoded video's shape [1, 3, frames, H, W] for a latent shape.
func (c Config) OutputShape(latentShape []int) ([]int, error) {
	t, h, w, err := c.LatentDims(latentShape, modelkit.Elements(latentShape))
	if err != nil {
		return nil, err
	}
	r := c.SpatialRatio()
	return []int{1, c.PixelChannels(), c.NumFrames(t), h * r, w * r}, nil
}

// DenormalizeLatents maps DiT-space latents to VAE space, z·latents_std[c] + latents_mean[c], in
// float32 per operation like the reference pipeline's decoding stage.
func (c Config) DenormalizeLatents(latents []float32, shape []int) ([]float32, error) {
	return c.perChannel(latents, shape, func(k int) func(float32) float32 {
		std, mean := float32(c.LatentsStd[k]), float32(c.LatentsMean[k])
		return func(v float32) float32 { return float32(v*std) + mean }
	})
}

// NormalizeLatents maps VAE latents [1, z, T, H, W] to the diffusion space as FastVideo's pipelines
// do after encoding: (z − shift_factor) · scaling_factor in float32, with shift_factor = mean and
// scaling_factor = 1/std (fastvideo/configs/models/vaes/wanvae.py).
func (c Config) NormalizeLatents(latents []float32, shape []int) ([]float32, error) {
	return c.perChannel(latents, shape, func(k int) func(float32) float32 {
		scale, mean := 1/float32(c.LatentsStd[k]), float32(c.LatentsMean[k])
		return func(v float32) float32 { return (v - mean) * scale }
	})
}

// perChannel applies channel k's map to every value of channel k of latents [1, z, T, H, W].
func (c Config) perChannel(latents []float32, shape []int, channel func(k int) func(float32) float32) ([]float32, error) {
	t, h, w, err := c.LatentDims(shape, len(latents))
	if err != nil {
		return nil, err
	}
	return modelkit.MapChannels(latents, c.ZDim, t*h*w, channel), nil
}

// Upsampling mode of an up block.
const (
	upNone = iota
	up2D   // nearest 2× in H, W then a 3×3 conv, per frame
	up3D   // causal time conv doubling the frames, then the 2D upsample
)

// upBlock is one decoder up block as WanDecoder3d builds it.
type upBlock struct {
	in, out  int // input and output channels of the residual stack
	mode     int
	upOut    int  // channels after the upsampler's 3×3 conv (Wan2.1: out/2; Wan2.2: out)
	ft       int  // temporal factor of the DupUp3D shortcut (1 or 2)
	shortcut bool // Wan2.2 DupUp3D shortcut from the block input
}

// dims are the decoder widths: [dim·mult[-1]] + [dim·m for m in reversed(mult)].
func (c Config) dims() []int {
	d := c.decoderDim()
	n := len(c.DimMult)
	out := []int{d * c.DimMult[n-1]}
	for i := n - 1; i >= 0; i-- {
		out = append(out, d*c.DimMult[i])
	}
	return out
}

// upBlocks lists the up blocks with their widths, as WanDecoder3d.__init__ derives them.
func (c Config) upBlocks() []upBlock {
	dims := c.dims()
	n := len(c.DimMult)
	blocks := make([]upBlock, 0, n)
	for i := 0; i < n; i++ {
		in, out := dims[i], dims[i+1]
		if i > 0 && !c.IsResidual {
			in /= 2 // Wan2.1: the previous block's upsampler halved the width
		}
		b := upBlock{in: in, out: out, ft: 1}
		if i != n-1 { // temperal_upsample is temperal_downsample reversed
			b.mode = up2D
			if c.TemperalDownsample[len(c.TemperalDownsample)-1-i] {
				b.mode = up3D
				b.ft = 2
			}
			b.upOut = out / 2
			if c.IsResidual {
				b.upOut = out
				b.shortcut = true
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// numCacheSlots counts the causal convolutions that carry frames between chunks: conv_in, two
// per residual block, each time conv, conv_out.
func (c Config) numCacheSlots() int {
	n := 1 + 2*2 + 1
	for _, b := range c.upBlocks() {
		n += 2 * (c.NumResBlocks + 1)
		if b.mode == up3D {
			n++
		}
	}
	return n
}

// DecodeGFLOP counts the decoder's convolution and attention multiply-adds (×2) for decoding
// latentFrames × h × w latents with the chunked causal decode, in GFLOP; norms and elementwise work
// are left out. The Wan2.1 decode of 21×60×104 latents is about 275 TFLOP.
func (c Config) DecodeGFLOP(latentFrames, h, w int) float64 {
	var total float64
	conv := func(cout, cin, taps, outPositions int) {
		total += 2 * float64(cout) * float64(cin) * float64(taps) * float64(outPositions)
	}
	z := c.ZDim
	frames := latentFrames    // frames at the current stage (summed over chunks)
	conv(z, z, 1, frames*h*w) // post_quant_conv
	dims := c.dims()
	conv(dims[0], z, 27, frames*h*w)
	res := func(in, out, n int) {
		conv(out, in, 27, n)
		conv(out, out, 27, n)
		if in != out {
			conv(out, in, 1, n)
		}
	}
	c0 := dims[0]
	res(c0, c0, frames*h*w)
	hw := h * w
	conv(3*c0, c0, 1, frames*hw)
	total += 2 * 2 * float64(frames) * float64(hw) * float64(hw) * float64(c0) // q·kᵀ and p·v
	conv(c0, c0, 1, frames*hw)
	res(c0, c0, frames*h*w)
	for _, b := range c.upBlocks() {
		in := b.in
		for j := 0; j <= c.NumResBlocks; j++ {
			res(in, b.out, frames*h*w)
			in = b.out
		}
		if b.mode == up3D {
			conv(2*b.out, b.out, 3, (frames-1)*h*w) // the first chunk skips the time conv
			frames = 1 + 2*(frames-1)
		}
		if b.mode != upNone {
			h, w = 2*h, 2*w
			conv(b.upOut, b.out, 9, frames*h*w)
		}
	}
	last := c.upBlocks()[len(c.DimMult)-1].out
	conv(c.OutChannels, last, 27, frames*h*w)
	return total / 1e9
}
