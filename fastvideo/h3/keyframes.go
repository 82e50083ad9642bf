package h3

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/imageops"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/tokenizer"
	"fastvideo/vae/h3video"
)

// H3 FL2VA (first and/or last keyframe) as FastVideo runs it
// (fastvideo/pipelines/basic/minimax_h3/stages/):
//   - minimax_h3_input_preparation.py: without a size the canvas follows the first keyframe's
//     aspect (resolve_canvas_size); each keyframe is fitted to the canvas by
//     prepare_keyframe_image (packing.py): the first one given stretched, a second covered and
//     center-cropped, both with PIL's LANCZOS.
//   - minimax_h3_conditioning.py: the Qwen3-VL image processor and vision tower see the fitted
//     keyframes; the prompt is "<Picture k>: " labels, each followed by its vision block, then the
//     prompt text; vision tokens are tagged as video rows.
//   - minimax_h3_latent_preparation.py: each keyframe is VAE-encoded alone, its posterior sampled
//     with a generator seeded 42 (restarted per keyframe), rounded through float16 and
//     normalized; the rows are mixed with the request generator's noise at 0.999 before the
//     video noise is drawn, and sit before the target video rows.
//   - minimax_h3_denoising.py: condition rows take max(t_video, 0.999) and are never stepped.

// keyframe is one resolved keyframe: its anchor, the image and its way onto the canvas.
type keyframe struct {
	anchor packing.Anchor
	image  *api.Keyframe
	resize packing.KeyframeResize
}

// givenKeyframes are the request's keyframes in upstream's order (first, then last).
func (r *resolved) givenKeyframes() []*api.Keyframe {
	var out []*api.Keyframe
	for _, k := range []*api.Keyframe{r.FirstImage, r.LastImage} {
		if k != nil {
			out = append(out, k)
		}
	}
	return out
}

// keyframeCanvas is the canvas of a keyframe request without a size: the first keyframe's aspect
// through resolve_canvas_size.
func (r *resolved) keyframeCanvas(req *api.Request) error {
	given := r.givenKeyframes()
	if len(given) == 0 || !r.spec.KeyframeCanvas || req.Height != 0 || req.Width != 0 {
		return nil
	}
	k := given[0]
	h, w, err := packing.ResolveCanvasSize(float64(k.Pixels.Width), float64(k.Pixels.Height))
	if err != nil {
		return &api.RequestError{Field: k.Field, Value: fmt.Sprintf("a %dx%d image", k.Pixels.Width, k.Pixels.Height),
			Allowed: fmt.Sprintf("an image with an aspect ratio from 1:4 to 4:1, or an explicit height and width (%v)", err)}
	}
	req.Height, req.Width = h, w
	return nil
}

// resolveKeyframes plans every keyframe's resize onto the denoise canvas and the vision tokens
// each becomes.
func (r *resolved) resolveKeyframes(_ api.Request, _ family.Preset) error {
	r.keyframes, r.visionTokens = nil, 0
	given := r.givenKeyframes()
	if len(given) == 0 {
		return nil
	}
	first := given[0]
	if r.FastTemporal != nil || r.FastSpatial != nil {
		return &api.RequestError{Field: first.Field, Value: first.Source, Allowed: "no keyframe with the fast modes: FL2VA runs at the full canvas and frame count"}
	}
	if r.spec.AdaLN != nil {
		return &api.RequestError{Field: first.Field, Value: first.Source, Allowed: "no keyframe with this checkpoint: its fixed AdaLN cache lacks the condition rows' timestep max(t, 0.999); use the released transformer"}
	}
	g := r.Denoise
	anchors := packing.KeyframeAnchors(r.FirstImage != nil, r.LastImage != nil)
	for i, k := range given {
		rz, err := packing.PlanKeyframeResize(k.Pixels.Width, k.Pixels.Height, g.Width, g.Height, i == 0)
		if err != nil {
			return &api.RequestError{Field: k.Field, Value: k.Source, Allowed: err.Error()}
		}
		r.keyframes = append(r.keyframes, keyframe{anchor: anchors[i], image: k, resize: rz})
	}
	pc := r.spec.Processor
	h, w, err := pc.SmartResize(g.Height, g.Width)
	if err != nil {
		return &api.RequestError{Field: "height", Value: g.Height, Allowed: err.Error()}
	}
	r.visionTokens = pc.Tokens([3]int{1, h / pc.PatchSize, w / pc.PatchSize})
	return nil
}

// anchors lists the keyframes' anchors.
func (r *resolved) anchors() []packing.Anchor {
	var out []packing.Anchor
	for _, k := range r.keyframes {
		out = append(out, k.anchor)
	}
	return out
}

// estimatedTextTags are the prompt rows' tags before tokenizing: each label's estimated tokens,
// its vision block (start, placeholders, end), then the prompt's.
func (r *resolved) estimatedTextTags() []uint8 {
	var tags []uint8
	add := func(tag uint8, n int) {
		for i := 0; i < n; i++ {
			tags = append(tags, tag)
		}
	}
	for k := range r.keyframes {
		add(packing.TagText, tokenizer.EstimateQwenTokens(qwen3vl.PictureLabel(k+1)))
		add(packing.TagVideo, r.visionTokens+2)
	}
	add(packing.TagText, r.PromptTokens)
	return tags
}

// fitKeyframe is prepare_keyframe_image: LANCZOS resize, then the crop (none for an image of the
// canvas size).
func fitKeyframe(k keyframe, width, height int) (imageops.Image, error) {
	z := k.resize
	if z.Identity {
		return k.image.Pixels, nil
	}
	scaled, err := imageops.ResizePIL(k.image.Pixels, z.ResizeWidth, z.ResizeHeight)
	if err != nil {
		return imageops.Image{}, err
	}
	out := imageops.NewImage(width, height)
	for y := 0; y < height; y++ {
		copy(out.Pix[y*width*3:(y+1)*width*3], scaled.Pix[((z.CropTop+y)*scaled.Width+z.CropLeft)*3:][:width*3])
	}
	return out, nil
}

// conditionKeyframes conditions the FL2VA prompt: the keyframes fitted to the canvas, the labeled
// prompt with its vision blocks, and (on a prompt-cache miss) the vision tower and the multimodal
// text stack. It sets the prompt rows' tags and keeps the fitted keyframes for the VAE encoder.
func (p *run) conditionKeyframes(ctx context.Context, cond *textenc.Conditioner, promptIDs []int) (textenc.Result, error) {
	r, vc := p.r, *p.c.spec.Vision
	p.frames = nil
	labels, tokens := make([][]int, len(r.keyframes)), make([]int, len(r.keyframes))
	for i, k := range r.keyframes {
		f, err := fitKeyframe(k, r.Denoise.Width, r.Denoise.Height)
		if err != nil {
			return textenc.Result{}, fmt.Errorf("fastvideo: keyframe %d: %w", i+1, err)
		}
		p.frames = append(p.frames, f)
		if labels[i], err = cond.Tokenizer.Encode(qwen3vl.PictureLabel(i + 1)); err != nil {
			return textenc.Result{}, err
		}
		tokens[i] = r.visionTokens
	}
	ids, vision, err := qwen3vl.ImagePrompt(vc, labels, tokens, promptIDs)
	if err != nil {
		return textenc.Result{}, err
	}
	if err := checkPromptTokens(len(promptIDs), len(ids), r.Prompt); err != nil {
		return textenc.Result{}, err
	}
	r.textTags = make([]uint8, len(ids))
	for i, v := range vision {
		r.textTags[i] = packing.TagText
		if v {
			r.textTags[i] = packing.TagVideo
		}
	}
	return cond.ConditionWith(ctx, r.Prompt, p.keyframeDigest(), func(ctx context.Context, enc textenc.Encoder) ([]float32, []int, error) {
		mm, ok := textenc.Unwrap(enc).(*qwen3vl.Encoder)
		if !ok {
			return nil, nil, fmt.Errorf("fastvideo: FL2VA needs the Qwen3-VL text stack, the conditioner holds %T", textenc.Unwrap(enc))
		}
		feats, grids, err := p.visionFeatures(ctx)
		if err != nil {
			return nil, nil, err
		}
		pos, err := qwen3vl.RopeIndex(vc, ids, grids)
		if err != nil {
			return nil, nil, err
		}
		return mm.EncodeMultimodal(ctx, ids, vc.ImageTokenID, &qwen3vl.Multimodal{Positions: pos, Images: feats})
	})
}

// keyframeDigest identifies the vision inputs in the prompt-cache key: the processor, the vision
// tower's geometry and the fitted keyframes' pixels.
func (p *run) keyframeDigest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%+v|%+v", *p.c.spec.Processor, *p.c.spec.Vision)
	for _, f := range p.frames {
		h.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(f.Width)), uint32(f.Height)))
		h.Write(f.Pix)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// visionFeatures runs the image processor and the vision tower on every fitted keyframe.
func (p *run) visionFeatures(ctx context.Context) ([]qwen3vl.VisionFeatures, [][3]int, error) {
	c := p.c
	v, err := family.Acquire(p.s, &c.vision, "vision_encoder", func() (*qwen3vl.Vision, error) { return c.Src.loadVision(c.Engine, *c.spec.Vision) })
	if err != nil {
		return nil, nil, err
	}
	var feats []qwen3vl.VisionFeatures
	var grids [][3]int
	for i, f := range p.frames {
		pixels, grid, err := c.spec.Processor.Process(f)
		if err != nil {
			return nil, nil, fmt.Errorf("fastvideo: keyframe %d: %w", i+1, err)
		}
		feat, err := v.Forward(ctx, pixels, grid)
		if err != nil {
			return nil, nil, fmt.Errorf("fastvideo: keyframe %d: %w", i+1, err)
		}
		feats, grids = append(feats, feat), append(grids, grid)
	}
	return feats, grids, nil
}

// encodeKeyframes turns the fitted keyframes into normalized latents [C, 1, h, w]: VAE encoder,
// posterior sample (noise restarted from the fixed seed per keyframe), float16 round trip,
// normalization.
func (p *run) encodeKeyframes(ctx context.Context) error {
	c := p.c
	defer func() { p.frames = nil }()
	if len(p.frames) == 0 {
		return nil
	}
	enc, err := family.Acquire(p.s, &c.encoder, "video_vae_encoder", func() (*h3video.Encoder, error) { return c.Src.loadVideoEncoder(c.Engine) })
	if err != nil {
		return err
	}
	p.keyLatents = nil
	for i, f := range p.frames {
		pixels, err := packing.KeyframePixels(f.Pix, f.Width, f.Height)
		if err != nil {
			return err
		}
		post, err := enc.EncodeKeyframe(ctx, pixels, []int{1, 3, 1, f.Height, f.Width})
		if err != nil {
			return fmt.Errorf("fastvideo: encoding keyframe %d: %w", i+1, err)
		}
		z, err := post.Sample(familykit.GaussianNoise(packing.KeyframeEncodeSeed, familykit.KeyframeSampleNoise, len(post.Mean)))
		if err != nil {
			return err
		}
		h3video.RoundTripF16(z)
		if z, err = c.spec.VAE.NormalizeLatents(z, post.Shape); err != nil {
			return err
		}
		p.keyLatents = append(p.keyLatents, z)
	}
	return nil
}

// conditionRows are the fixed condition video rows: the keyframe latents mixed with noise drawn
// from the request seed, one keyframe after the other.
func (p *run) conditionRows() ([]float32, error) {
	if len(p.keyLatents) == 0 {
		return nil, nil
	}
	g, ch := p.r.Denoise, p.c.spec.DiT.InChannels
	stream := familykit.NewGaussianStream(p.r.Seed, familykit.KeyframeNoise)
	noise := make([][]float32, len(p.keyLatents))
	for i, z := range p.keyLatents {
		noise[i] = make([]float32, len(z))
		stream.Fill(noise[i])
	}
	return packing.KeyframeConditionRows(p.keyLatents, noise, ch, g.LatentHeight, g.LatentWidth, g.PatchSize)
}

// conditionLadder is the condition rows' timestep at every step (nil without keyframes).
func (p *run) conditionLadder() []float32 {
	if len(p.r.keyframes) == 0 {
		return nil
	}
	tv := p.r.sched.Video.Timesteps
	out := make([]float32, len(tv))
	for i, t := range tv {
		out[i] = packing.ConditionVideoTimestep(t)
	}
	return out
}
