package wan

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes/bfloat16"

	"fastvideo/fastvideo/api"
	"fastvideo/internal/imageops"
)

// Wan2.2 TI2V image-to-video, as FastVideo runs it:
//   - fastvideo/pipelines/stages/input_validation.py: the image picks the canvas,
//     best_output_size(w, h, 32, 32, 480·832) (fastvideo/utils.py), is scaled by
//     max(ow/iw, oh/ih) to (round(iw·s), round(ih·s)) with PIL's LANCZOS, center-cropped, and
//     mapped to [-1, 1] (to_tensor, -0.5, /0.5). Requested sizes are ignored upstream; here they
//     are refused so that nobody is surprised.
//   - fastvideo/pipelines/stages/denoising.py (DenoisingStage, ti2v_task): the VAE encoder's
//     posterior mean, normalized ((z − mean)·(1/std)), replaces the first latent frame before the
//     loop and after every scheduler step; the DiT gets one timestep per token, 0 on the first
//     latent frame's tokens. Upstream builds that mask from latents cast to its hard-coded
//     bfloat16, so the per-token timesteps are bfloat16 values (999 is fed as 1000) and the
//     initial noise is rounded to bfloat16; the UniPC path reproduces both.
//   - FastVideo's torch DMD stage ignores the image; the DMD path follows the MLX runtime's
//     construction instead (fastvideo/mlx_runtime/wan22_i2v.py build_i2v_inputs: frame 0
//     replaced, float32 per-token timesteps with frame 0 at 0), re-applied after every update.

// releasedImageArea is the area input_validation.py fits the canvas to (max_area = 480 * 832).
const releasedImageArea = 480 * 832

// imageCondition is a resolved first-frame condition: the image, the canvas it picked and the
// size it is scaled to before the center crop.
type imageCondition struct {
	keyframe                  *api.Keyframe
	width, height             int // the canvas (= the output size)
	scaledWidth, scaledHeight int // after the resize, before the crop
}

// resolveImage sets the canvas from the first-frame image, which must come without a size.
func (r *resolved) resolveImage(req *api.Request) error {
	k := r.FirstImage
	if k == nil {
		return nil
	}
	if req.Height != 0 || req.Width != 0 {
		return &api.RequestError{Field: "height", Value: fmt.Sprintf("%dx%d", req.Height, req.Width), Allowed: fmt.Sprintf(
			"unset with an image: Wan2.2 TI2V sizes the video from the image (the %s-aligned size of its aspect ratio with an area of at most %d pixels)",
			"32", r.spec.ImageMaxArea)}
	}
	vae := geometryVAE(r.spec.VAE)
	dh, dw := r.spec.DiT.PatchSize[1]*vae.SpatialRatio, r.spec.DiT.PatchSize[2]*vae.SpatialRatio
	iw, ih := k.Pixels.Width, k.Pixels.Height
	ow, oh, ok := BestOutputSize(iw, ih, dw, dh, r.spec.ImageMaxArea)
	if !ok {
		return &api.RequestError{Field: k.Field, Value: fmt.Sprintf("a %dx%d image", iw, ih), Allowed: fmt.Sprintf(
			"an image whose aspect ratio leaves at least %dx%d pixels at an area of %d (this one is too narrow)", dw, dh, r.spec.ImageMaxArea)}
	}
	sw, sh := scaledSize(iw, ih, ow, oh)
	r.image = &imageCondition{keyframe: k, width: ow, height: oh, scaledWidth: sw, scaledHeight: sh}
	req.Height, req.Width = oh, ow
	return nil
}

// pyFloorDiv is Python's float // (CPython float_floor_div: fmod, then a correction), so that
// BestOutputSize rounds exactly as upstream's does.
func pyFloorDiv(a, b float64) float64 {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 && (b < 0) != (mod < 0) {
		div--
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	floordiv := math.Floor(div)
	if div-floordiv > 0.5 {
		floordiv++
	}
	return floordiv
}

// BestOutputSize is fastvideo/utils.py best_output_size (from Wan2.2's wan/utils/utils.py): the
// width and height, multiples of dw and dh with a product of at most area, whose aspect ratio is
// closest to w/h, trying the width first, then the height. ok is false where upstream would divide
// by zero (an aspect ratio so extreme that a side rounds down to 0).
func BestOutputSize(w, h, dw, dh, area int) (ow, oh int, ok bool) {
	if w <= 0 || h <= 0 || dw <= 0 || dh <= 0 || area <= 0 {
		return 0, 0, false
	}
	ratio := float64(w) / float64(h)
	owf := math.Sqrt(float64(area) * ratio) // (expected_area * ratio) ** 0.5
	ohf := float64(area) / owf
	ow1 := int(pyFloorDiv(owf, float64(dw)) * float64(dw))
	if ow1 == 0 {
		return 0, 0, false
	}
	oh1 := int(pyFloorDiv(float64(area)/float64(ow1), float64(dh)) * float64(dh))
	oh2 := int(pyFloorDiv(ohf, float64(dh)) * float64(dh))
	if oh1 == 0 || oh2 == 0 {
		return 0, 0, false
	}
	ow2 := int(pyFloorDiv(float64(area)/float64(oh2), float64(dw)) * float64(dw))
	if ow2 == 0 {
		return 0, 0, false
	}
	ratio1, ratio2 := float64(ow1)/float64(oh1), float64(ow2)/float64(oh2)
	if max(ratio/ratio1, ratio1/ratio) < max(ratio/ratio2, ratio2/ratio) {
		return ow1, oh1, true
	}
	return ow2, oh2, true
}

// scaledSize is the size the image is resized to before the crop: scale = max(ow/iw, oh/ih), then
// Python's round (half to even) of each side.
func scaledSize(iw, ih, ow, oh int) (w, h int) {
	scale := max(float64(ow)/float64(iw), float64(oh)/float64(ih))
	return int(math.RoundToEven(float64(iw) * scale)), int(math.RoundToEven(float64(ih) * scale))
}

// Preprocess turns an RGB image into the encoder's input for a width x height canvas, as
// input_validation.py does: PIL LANCZOS resize to cover the canvas, center crop, then
// to_tensor(img).sub_(0.5).div_(0.5) in float32. The result is [3][1][height][width].
func Preprocess(img imageops.Image, width, height int) ([]float32, error) {
	sw, sh := scaledSize(img.Width, img.Height, width, height)
	scaled, err := imageops.ResizePIL(img, sw, sh)
	if err != nil {
		return nil, err
	}
	crop, err := imageops.CenterCrop(scaled, width, height)
	if err != nil {
		return nil, err
	}
	plane := width * height
	out := make([]float32, 3*plane)
	for i := 0; i < plane; i++ {
		for c := 0; c < 3; c++ {
			v := float32(crop.Pix[3*i+c]) / 255
			out[c*plane+i] = (v - 0.5) / 0.5
		}
	}
	return out, nil
}

// pinFirstFrame writes the condition latent z [C][1][H][W] over the first latent frame of x
// [C][T][H][W]: upstream's (1 − mask2)·z + mask2·x, where the mask is 0 exactly there.
func pinFirstFrame(x, z []float32, channels, frames int) {
	plane := len(z) / channels
	for c := 0; c < channels; c++ {
		copy(x[c*frames*plane:c*frames*plane+plane], z[c*plane:(c+1)*plane])
	}
}

// roundBF16 rounds every value to bfloat16 (round to nearest even), as a cast there and back does.
func roundBF16(x []float32) {
	for i, v := range x {
		x[i] = bf16(v)
	}
}

// bf16 is v rounded to bfloat16 (round to nearest even).
func bf16(v float32) float32 { return bfloat16.FromFloat32(v).Float32() }

// tokenTimesteps is the per-token timestep vector of an image-conditioned forward: 0 on the
// first latent frame's tokens, t on the others.
func tokenTimesteps(t float32, firstFrameTokens, tokens int) []float32 {
	ts := make([]float32, tokens)
	for i := firstFrameTokens; i < tokens; i++ {
		ts[i] = t
	}
	return ts
}
