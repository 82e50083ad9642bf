// Package taehv is the TAEHV tiny video decoder (madebyollin/taehv `taehv.py`, class TAEHV, base
// decoder): a ~9.8M-parameter convolutional stand-in for a model's full video VAE that turns raw DiT
// latents into [0, 1] frames in a fraction of the time and memory. Live previews during denoising and
// cheap final decodes of Wan2.1/2.2-A14B (taew2_1), Wan2.2-TI2V-5B (taew2_2) and MiniMax H3 (taeh3)
// latents use it; the variants differ only in the latent channels, the output patch size and H3's
// trimming.
//
// Why a parallel graph: upstream's decode_video(parallel=True) runs every latent frame through one
// layer at a time, each MemBlock reading its own input shifted one frame in time (zeros before the
// first frame). That is a plain feed-forward graph over a batch of frames, which compiles once per
// chunk shape; upstream's sequential mode computes the same values frame by frame. Carrying each
// MemBlock's last input frame across a seam makes a chunked decode equal to the one-shot one (Stream),
// which bounds memory by the chunk and lets frames come out while later latents are still being made.
//
// Layers (upstream's nn.Sequential, `decoder.N` keys; 3×3 convs pad 1, NCHW, OIHW weights):
// 0 Clamp 3·tanh(x/3) · 1 conv C→256 + ReLU · 3–5 MemBlock(256) · 6 nearest ×2 · 7 TGrow(256, 1) ·
// 8 conv 256→128 · 9–11 MemBlock(128) · 12 ×2 · 13 TGrow(128, 2) · 14 conv 128→64 · 15–17 MemBlock(64)
// · 18 ×2 · 19 TGrow(64, 2) · 20 conv 64→64 · 21 ReLU · 22 conv 64→3p²; then pixel_shuffle(p) and
// clamp to [0, 1]. MemBlock(n): ReLU(conv.4(ReLU(conv.2(ReLU(conv.0(cat[x, past]))))) + x). TGrow(n,
// s): a 1×1 conv n→n·s, frame t becoming frames t·s+j, the j-th taking channels [j·n, (j+1)·n).
//
// Time: every latent gives s₁₃·s₁₉ = 4 raw frames. Wan (TAEHV.decode_video) drops the first 3, so T
// latents give 4T−3 frames. H3 (TAEHV._decode_h3_video, upstream's port of MiniMax-H3's
// FL2VA/video_vae/klvae.py) pads the raw frames with zeros to a multiple of 20, drops the first 3 of
// every 20 and then the last 12: T = 5k+2 latents give 17k+5 frames.
//
// Layouts: latents are the raw DiT latents [1, C, T, h, w] (or [C, T, h, w]), channel-major like
// vae/wan and vae/h3video, with no latents_mean/std de-normalization (TAEHV is trained on raw latents);
// frames are handed out as [3][count][H][W] in [0, 1], H = h·8·p.
package taehv

import (
	"errors"
	"fmt"
)

// Config is one TAEHV decoder layout.
type Config struct {
	// LatentChannels is the DiT latent width C: 16 (taew2_1), 48 (taew2_2), 24 (taeh3).
	LatentChannels int
	// PatchSize is the output pixel-shuffle factor p: 1 (taew2_1) or 2 (taew2_2, taeh3).
	PatchSize int
	// H3Trim selects MiniMax H3's per-clip frame trimming (taeh3) instead of Wan's.
	H3Trim bool
	// NoTimeUpscale is upstream's decoder_time_upscale=(False, False): one frame per latent, a
	// cheaper preview. A checkpoint trained with time upscaling still loads: its TGrow layers keep
	// their last rows (upstream's patch_tgrow_layers).
	NoTimeUpscale bool
}

// Taew21 is taew2_1.safetensors (Wan2.1, Wan2.2-A14B).
func Taew21() Config { return Config{LatentChannels: 16, PatchSize: 1} }

// Taew22 is taew2_2.safetensors (Wan2.2-TI2V-5B).
func Taew22() Config { return Config{LatentChannels: 48, PatchSize: 2} }

// Taeh3 is taeh3.safetensors (MiniMax H3), with H3's trimming.
func Taeh3() Config { return Config{LatentChannels: 24, PatchSize: 2, H3Trim: true} }

// Validate checks the fields.
func (c Config) Validate() error {
	if c.LatentChannels <= 0 {
		return fmt.Errorf("taehv: Config.LatentChannels = %d; want the DiT latent width (16 taew2_1, 48 taew2_2, 24 taeh3)", c.LatentChannels)
	}
	if c.PatchSize <= 0 {
		return fmt.Errorf("taehv: Config.PatchSize = %d; want 1 (taew2_1) or 2 (taew2_2, taeh3)", c.PatchSize)
	}
	return nil
}

// Stage widths of the base decoder (upstream's n_f).
var widths = [4]int{256, 128, 64, 64}

// tgrowLayers are the TGrow layer indices and the stage width each grows.
var tgrowLayers = [3]struct{ layer, width int }{{7, 256}, {13, 128}, {19, 64}}

// memLayers are the MemBlock layer indices with their widths, in order.
var memLayers = [9]struct{ layer, width int }{
	{3, 256}, {4, 256}, {5, 256}, {9, 128}, {10, 128}, {11, 128}, {15, 64}, {16, 64}, {17, 64},
}

// tgrowStride is the time stride of TGrow number i (0, 1, 2): upstream's decoder_time_upscale is
// (False, True, True) by default and (False, False, False) with NoTimeUpscale.
func (c Config) tgrowStride(i int) int {
	if i == 0 || c.NoTimeUpscale {
		return 1
	}
	return 2
}

// TimeUpscale is the raw frames per latent (4, or 1 with NoTimeUpscale).
func (c Config) TimeUpscale() int { return c.tgrowStride(0) * c.tgrowStride(1) * c.tgrowStride(2) }

// SpatialRatio is pixels per latent along H and W: 8·p.
func (c Config) SpatialRatio() int { return 8 * c.PatchSize }

// NumFrames is the frame count decoded from t latents (upstream's decode_video output length).
func (c Config) NumFrames(t int) int {
	if t <= 0 {
		return 0
	}
	u := c.TimeUpscale()
	if !c.H3Trim {
		return u*t - (u - 1)
	}
	chunk := 5 * u
	padded := (u*t + chunk - 1) / chunk * chunk
	return max(padded/chunk*(chunk-(u-1))-3*u, 0)
}

// keepRaw reports whether raw decoder frame i (counted from the first latent, in the zero-padded
// sequence for H3) is one of the frames upstream keeps, before H3's final 3u-frame drop.
func (c Config) keepRaw(i int) bool {
	u := c.TimeUpscale()
	if c.H3Trim {
		return i%(5*u) >= u-1
	}
	return i >= u-1
}

// LatentDims checks a latent shape [1, C, T, h, w] or [C, T, h, w] and returns T, h, w.
func (c Config) LatentDims(shape []int) (t, h, w int, err error) {
	s := shape
	if len(s) == 5 {
		if s[0] != 1 {
			return 0, 0, 0, fmt.Errorf("taehv: latents %v: batch %d, want 1 (decode one video at a time)", shape, s[0])
		}
		s = s[1:]
	}
	if len(s) != 4 {
		return 0, 0, 0, fmt.Errorf("taehv: latents %v: want [1, C, T, h, w] or [C, T, h, w]", shape)
	}
	if s[0] != c.LatentChannels {
		return 0, 0, 0, fmt.Errorf("taehv: latents %v have %d channels, the decoder takes %d", shape, s[0], c.LatentChannels)
	}
	for _, d := range s[1:] {
		if d <= 0 {
			return 0, 0, 0, fmt.Errorf("taehv: latents %v: every dimension must be positive", shape)
		}
	}
	return s[1], s[2], s[3], nil
}

// OutputShape is the decoded video's shape [1, 3, frames, H, W] for a latent shape.
func (c Config) OutputShape(latentShape []int) ([]int, error) {
	t, h, w, err := c.LatentDims(latentShape)
	if err != nil {
		return nil, err
	}
	n := c.NumFrames(t)
	if n == 0 {
		return nil, errors.New("taehv: these latents decode to no frame")
	}
	r := c.SpatialRatio()
	return []int{1, 3, n, h * r, w * r}, nil
}

// pipelineChunk is how many of t latents a decode runs at a time when the caller sets no chunk: all
// of them for a small video, else about a quarter, so that one run's frames cross to the host while
// the next decodes (frameBytes: one output frame's bytes on the host). The runs are whole periods of
// H3's trimming (5 latents), so that those after the first share one program.
func (c Config) pipelineChunk(t, frameBytes int) int {
	if c.NumFrames(t)*frameBytes < 64<<20 {
		return t
	}
	period := 1
	if c.H3Trim {
		period = 5
	}
	chunk := (t + 3) / 4
	return min(t, (chunk+period-1)/period*period)
}
