// Package packing holds MiniMax H3's geometry in one place: canvas and frame
// alignment, latent counts, the packed joint sequence layout
// ([text | condition video | audio ch0 | audio ch1 | target video]), token
// tags, index lists, the 3-axis RoPE coordinates and the per-row timesteps,
// plus the MLX fast-mode plans (temporal and spatial).
//
// It is plain Go (no graphs): the DiT builds its inputs from a Layout, and the
// pipeline plans a request with the same functions, so the two can never
// disagree. Every float64 formula reproduces the reference's NumPy/PyTorch
// evaluation order bit for bit (FastVideo
// fastvideo/pipelines/basic/minimax_h3/packing.py); products that feed a sum
// are wrapped in explicit conversions so that the Go compiler never fuses them
// into an FMA on architectures where it may.
package packing

import (
	"fmt"
	"math"
)

// Token tags: the modality of a packed row, which also selects its AdaLN
// table (adaln_index = timestep_index*3 + tag).
const (
	TagVideo uint8 = 0
	TagText  uint8 = 1
	TagAudio uint8 = 2
)

// Released H3 constants.
const (
	FPS                   = 24
	CanvasMultiple        = 32 // height and width must be multiples of this
	VAESpatialRatio       = 16 // video VAE pixels per latent, each spatial axis
	FramesPerChunk        = 17 // causal video VAE clip: 17 frames ...
	LatentsPerChunk       = 5  // ... become 5 latents; valid frame counts are 17n+5
	AudioLatentsPerSecond = 40
	AudioChannels         = 2 // stereo, packed channel-major
	AudioSampleRate       = 32000
	AudioHop              = 800 // waveform samples per audio latent
	MinDurationSeconds    = 5.0
	MaxDurationSeconds    = 15.0
	ShortEdge             = 768
	MaxPixels             = 768 * 1344
	// KeyframeNoiseAug is the clean time of FL2VA condition rows: they are built
	// with scale_noise(clean, 0.999, noise) and fed max(t_video, 0.999).
	KeyframeNoiseAug = 0.999
)

// DefaultPatchSize is the released DiT patch (t, h, w).
var DefaultPatchSize = [3]int{1, 2, 2}

// Input bounds of every entry point. They lie far above the released limits
// (5-15 s clips; the upstream examples stop at a 1080x1920 output) and exist
// so that absurd inputs fail with an error instead of overflowing, looping or
// allocating without bound.
const (
	// MaxNumFrames is the longest clip whose RoPE times stay distinct: the
	// largest 17n+5 count whose span (5/3 units a frame) fits in one turn of
	// the time axis's slowest rotary frequency, 2*pi*10000^(15/16) ~ 35,333
	// units (rope_theta 10000, 16 frequencies per axis in
	// fastvideo/models/dits/minimax_h3.py). Longer clips repeat positions.
	MaxNumFrames = 21187
	// MaxCanvasSide bounds a canvas side in pixels (a memory guard).
	MaxCanvasSide = 4096
	// MaxTextTokens is Qwen3-VL's max_position_embeddings: the text encoder
	// places no longer prompt.
	MaxTextTokens = 262144
	// MaxSequenceLength bounds the packed rows a Layout may hold (about 120
	// MiB of layout; the released 768x1344x345 clip packs about 104,000).
	MaxSequenceLength = 1 << 22
)

// AlignNumFrames rounds a frame count (1..MaxNumFrames) up to the next 17n+5,
// the only lengths the causal video VAE produces.
func AlignNumFrames(n int) (int, error) {
	if n < 1 || n > MaxNumFrames {
		return 0, fmt.Errorf("num_frames must be 1 to %d, got %d", MaxNumFrames, n)
	}
	short := (LatentsPerChunk - n%FramesPerChunk + FramesPerChunk) % FramesPerChunk
	return n + short, nil
}

// VideoLatentFrames is the latent frame count of an aligned frame count
// (5 latents per 17-frame chunk, plus 2 for the leading 5 frames).
func VideoLatentFrames(numFrames int) (int, error) {
	if numFrames < LatentsPerChunk || numFrames > MaxNumFrames || numFrames%FramesPerChunk != LatentsPerChunk {
		return 0, fmt.Errorf("num_frames must be of the form 17n+5 up to %d, got %d (align it with AlignNumFrames)",
			MaxNumFrames, numFrames)
	}
	return (numFrames-LatentsPerChunk)/FramesPerChunk*LatentsPerChunk + 2, nil
}

// AudioLatentFrames is round(n/24*40) evaluated in float64 with Python's
// round-half-to-even (ties cannot occur for integer n, but the rounding rule
// is kept).
func AudioLatentFrames(numFrames int) int {
	v := float64(numFrames) / FPS
	v = v * AudioLatentsPerSecond
	return int(math.RoundToEven(v))
}

// AudioSamples is the decoded waveform length per channel.
func AudioSamples(audioLatents int) int { return audioLatents * AudioHop }

// ResolveCanvasSize derives the canvas (height, width) from an aspect ratio as
// the reference does when no size is given: short edge 768, area capped at
// 768*1344, each side rounded half-to-even to a multiple of 32 (minimum 32).
// Ratios outside 1:4..4:1 are rejected.
func ResolveCanvasSize(aspectWidth, aspectHeight float64) (height, width int, err error) {
	if !(aspectWidth > 0) || !(aspectHeight > 0) {
		return 0, 0, fmt.Errorf("the aspect ratio must be positive, got %g:%g", aspectWidth, aspectHeight)
	}
	ratio := aspectWidth / aspectHeight
	if ratio < 0.25 || ratio > 4 {
		return 0, 0, fmt.Errorf("MiniMax-H3 supports aspect ratios from 1:4 to 4:1, got %g:%g", aspectWidth, aspectHeight)
	}
	var w, h float64
	if ratio >= 1 {
		w, h = ShortEdge*ratio, ShortEdge
	} else {
		w, h = ShortEdge, ShortEdge/ratio
	}
	area := w * h
	if area > MaxPixels {
		scale := math.Sqrt(MaxPixels / area)
		w, h = w*scale, h*scale
	}
	round32 := func(x float64) int {
		return max(CanvasMultiple, int(math.RoundToEven(x/CanvasMultiple))*CanvasMultiple)
	}
	return round32(h), round32(w), nil
}

// ResolveTargetCanvas applies the CUDA pipeline's canvas rule: height and
// width are given together (both zero selects the canvas of defaultAspect,
// width:height) and must be positive multiples of 32 and of the VAE ratio.
func ResolveTargetCanvas(height, width int, defaultAspect [2]float64, vaeRatio int) (int, int, error) {
	if (height == 0) != (width == 0) {
		return 0, 0, fmt.Errorf("height and width must be passed together, or neither (got %dx%d)", height, width)
	}
	if height == 0 {
		h, w, err := ResolveCanvasSize(defaultAspect[0], defaultAspect[1])
		if err != nil {
			return 0, 0, err
		}
		height, width = h, w
	}
	if !canvasSideInRange(height) || !canvasSideInRange(width) || height%CanvasMultiple != 0 || width%CanvasMultiple != 0 {
		return 0, 0, fmt.Errorf("height and width must be multiples of %d from %d to %d, got %dx%d",
			CanvasMultiple, CanvasMultiple, MaxCanvasSide, height, width)
	}
	if vaeRatio <= 0 || height%vaeRatio != 0 || width%vaeRatio != 0 {
		return 0, 0, fmt.Errorf("canvas %dx%d is not divisible by the VAE ratio %d", height, width, vaeRatio)
	}
	return height, width, nil
}

// CeilCanvas rounds an output size up to the 32-pixel model grid, as the MLX
// runtime does for sizes the CUDA path would reject; decoded frames are then
// center-cropped back (see CropOffsets).
func CeilCanvas(height, width int) (int, int, error) {
	if !canvasSideInRange(height) || !canvasSideInRange(width) {
		return 0, 0, fmt.Errorf("output size must be 1 to %d pixels a side, got %dx%d", MaxCanvasSide, height, width)
	}
	return ceilDiv(height, CanvasMultiple) * CanvasMultiple, ceilDiv(width, CanvasMultiple) * CanvasMultiple, nil
}

// CropOffsets is the (top, left) of a center crop of height x width out of a
// canvasHeight x canvasWidth frame.
func CropOffsets(canvasHeight, canvasWidth, height, width int) (top, left int) {
	return (canvasHeight - height) / 2, (canvasWidth - width) / 2
}

// ResolveTargetNumFrames aligns a frame count to 17n+5 and requires the
// aligned clip to last 5 to 15 seconds at 24 fps (the CUDA rule: 124..345
// frames; 362 is rejected there although the MLX runtime accepts it).
func ResolveTargetNumFrames(numFrames int) (int, error) {
	aligned, err := AlignNumFrames(numFrames)
	if err != nil {
		return 0, err
	}
	d := float64(aligned) / FPS
	if d < MinDurationSeconds || d > MaxDurationSeconds {
		return 0, fmt.Errorf("MiniMax-H3 generates %g-%g seconds at %d fps; num_frames=%d aligns to %d (%.3f s)",
			MinDurationSeconds, MaxDurationSeconds, FPS, numFrames, aligned, d)
	}
	return aligned, nil
}

// Geometry is a target clip and its latent grid.
type Geometry struct {
	Height, Width int // canvas in pixels
	NumFrames     int // aligned pixel frames (17n+5)
	LatentFrames  int
	LatentHeight  int
	LatentWidth   int
	AudioLatents  int // per stereo channel
	PatchSize     [3]int
}

// NewGeometry derives the latent grid of an H3 canvas and an aligned frame
// count. Durations are not checked here (see ResolveTargetNumFrames); the
// rows it implies must fit MaxSequenceLength.
func NewGeometry(height, width, numFrames int) (Geometry, error) {
	if !canvasSideInRange(height) || !canvasSideInRange(width) || height%CanvasMultiple != 0 || width%CanvasMultiple != 0 {
		return Geometry{}, fmt.Errorf("canvas must be multiples of %d from %d to %d, got %dx%d",
			CanvasMultiple, CanvasMultiple, MaxCanvasSide, height, width)
	}
	lt, err := VideoLatentFrames(numFrames)
	if err != nil {
		return Geometry{}, err
	}
	g := Geometry{
		Height: height, Width: width, NumFrames: numFrames,
		LatentFrames: lt, LatentHeight: height / VAESpatialRatio, LatentWidth: width / VAESpatialRatio,
		AudioLatents: AudioLatentFrames(numFrames), PatchSize: DefaultPatchSize,
	}
	if rows := g.NonTextRows(); rows > MaxSequenceLength {
		return Geometry{}, fmt.Errorf("a %dx%d canvas of %d frames packs %d rows, above the %d a layout may hold",
			height, width, numFrames, rows, MaxSequenceLength)
	}
	return g, nil
}

// RowsPerFrame is the number of video tokens per latent frame.
func (g Geometry) RowsPerFrame() int {
	p := patchOrDefault(g.PatchSize)
	return (g.LatentHeight / p[1]) * (g.LatentWidth / p[2])
}

// VideoRows is the number of target video rows.
func (g Geometry) VideoRows() int {
	p := patchOrDefault(g.PatchSize)
	return g.LatentFrames / p[0] * g.RowsPerFrame()
}

// AudioRows is the number of audio rows (both channels).
func (g Geometry) AudioRows() int { return g.AudioLatents * AudioChannels }

// NonTextRows is the sequence length without text and condition rows.
func (g Geometry) NonTextRows() int { return g.VideoRows() + g.AudioRows() }

// Request turns the geometry into a layout request for a prompt of the given
// token tags (nil tags: numTextTokens text rows) and keyframe anchors.
func (g Geometry) Request(textTags []uint8, numTextTokens int, anchors ...Anchor) Request {
	return Request{
		TextTokenTags: textTags, NumTextTokens: numTextTokens,
		LatentFrames: g.LatentFrames, LatentHeight: g.LatentHeight, LatentWidth: g.LatentWidth,
		AudioLatents: g.AudioLatents, PatchSize: g.PatchSize, Keyframes: anchors,
	}
}

func patchOrDefault(p [3]int) [3]int {
	if p == ([3]int{}) {
		return DefaultPatchSize
	}
	return p
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func canvasSideInRange(side int) bool { return side >= 1 && side <= MaxCanvasSide }
