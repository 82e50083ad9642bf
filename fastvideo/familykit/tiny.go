package familykit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"slices"
	"time"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/weights"
	"fastvideo/vae/taehv"
)

// DirTinyDecoder is the folder of a model snapshot where the TAEHV tiny decoder is looked for:
// <model>/taehv/<variant>.safetensors, the file name as madebyollin/taehv publishes it.
const DirTinyDecoder = "taehv"

// TinyDecoder is where a model's TAEHV tiny decoder (Request.Decoder "tiny", previews) comes from:
// a checkpoint file, or built-in weights (the tiny models and random-weight runs: FormulaSource at
// the model's latent width), or nowhere (Path and Builtin empty: a run that needs it is refused).
type TinyDecoder struct {
	// Variant is the published file's stem ("taew2_1", "taew2_2", "taeh3"); Config the layout the
	// model's latents need.
	Variant string
	Config  taehv.Config
	// Path is the checkpoint; Wanted the file looked for when there is none (for the message).
	Path, Wanted string
	Builtin      bool
}

// FindTinyDecoder locates the tiny decoder of a model whose latents need cfg: e.TinyDecoderPath
// (fastvideo.WithTinyDecoder), checked now against cfg (a missing file or one of another latent
// width is a *family.RequestError for tiny_decoder), else built-in weights when builtin, else
// <modelDir>/taehv/<variant>.safetensors when that file exists (checked when a run needs it).
func FindTinyDecoder(e *family.Engine, modelDir, variant string, cfg taehv.Config, builtin bool) (*TinyDecoder, error) {
	t := &TinyDecoder{Variant: variant, Config: cfg}
	if e.TinyDecoderPath != "" {
		t.Path = e.TinyDecoderPath
		return t, t.check("tiny_decoder", t.Path)
	}
	if builtin {
		t.Builtin = true
		return t, nil
	}
	if modelDir != "" {
		t.Wanted = filepath.Join(modelDir, DirTinyDecoder, variant+".safetensors")
		if _, err := os.Stat(t.Wanted); err == nil {
			t.Path = t.Wanted
		}
	}
	return t, nil
}

// Require checks, without loading it, that a run that needs the tiny decoder (field: "decoder" or
// "preview") has one whose file fits the model: a *family.RequestError otherwise.
func (t *TinyDecoder) Require(field string, value any) error {
	if t.Builtin {
		return nil
	}
	path := t.file()
	if path == "" {
		where := "fastvideo.WithTinyDecoder(path) (-tiny-decoder PATH)"
		if t.Wanted != "" {
			where = t.Wanted + ", or " + where
		}
		return &api.RequestError{Field: field, Value: value, Allowed: fmt.Sprintf(
			"a tiny decoder's weights: %s.safetensors from huggingface.co/madebyollin/taehv, at %s", t.Variant, where)}
	}
	return t.check("tiny_decoder", path)
}

// file is the checkpoint to load: Path, or the model folder's file when it appeared since Open.
func (t *TinyDecoder) file() string {
	if t.Path == "" && t.Wanted != "" {
		if _, err := os.Stat(t.Wanted); err == nil {
			return t.Wanted
		}
	}
	return t.Path
}

// check opens path's header and compares its layout with the model's.
func (t *TinyDecoder) check(field, path string) error {
	bad := func(why string) error {
		return &api.RequestError{Field: field, Value: path, Allowed: fmt.Sprintf(
			"a TAEHV checkpoint for this model (%s.safetensors: %d latent channels, patch %d): %s",
			t.Variant, t.Config.LatentChannels, t.Config.PatchSize, why)}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return bad(err.Error())
	}
	if !fi.Mode().IsRegular() {
		return bad("not a regular file")
	}
	_, err = modelkit.LoadCheckpoint(path, "taehv", func(src weights.Source) (struct{}, error) {
		cfg, err := taehv.DetectConfig(src)
		if err != nil {
			return struct{}{}, err
		}
		if cfg.LatentChannels != t.Config.LatentChannels || cfg.PatchSize != t.Config.PatchSize {
			return struct{}{}, fmt.Errorf("it decodes %d latent channels with patch %d", cfg.LatentChannels, cfg.PatchSize)
		}
		return struct{}{}, nil
	})
	if err != nil {
		return bad(err.Error())
	}
	return nil
}

// Load builds the decoder at the engine's dtype (the model's time trimming, whatever the file is
// called).
func (t *TinyDecoder) Load(e *family.Engine) (*taehv.Decoder, error) {
	opts := taehv.Options{DType: e.DType}
	if t.Builtin {
		return taehv.FromSource(e.Backend, t.Config, taehv.FormulaSource(t.Config), opts)
	}
	path := t.file()
	if path == "" {
		return nil, t.Require("decoder", api.DecoderTiny)
	}
	return modelkit.LoadCheckpoint(path, "taehv", func(src weights.Source) (*taehv.Decoder, error) {
		return taehv.FromSource(e.Backend, t.Config, src, opts)
	})
}

// Size is the decoder's device bytes at dtype size bytes per value, for the memory plan.
func (t *TinyDecoder) Size(bytesPerValue int64) api.ComponentSize {
	return api.ComponentSize{Name: family.CompTinyDecoder, Bytes: ParamBytes(taehv.Params(t.Config))(bytesPerValue)}
}

// TinyDecode decodes raw latents [1, C, T, h, w] with the tiny decoder into sink.
func TinyDecode(ctx context.Context, dec *taehv.Decoder, latents []float32, shape []int, sink family.FrameSink) error {
	return dec.DecodeRGB24(ctx, latents, shape, func(f taehv.RGBFrames) error {
		return sink(family.Frames{Width: f.Width, Height: f.Height, Count: f.Count, RGB: f.RGB})
	})
}

// PreviewHeight bounds the height of each frame of a preview strip.
const PreviewHeight = 160

// Preview decodes x0, the step's clean-latent estimate [1, C, T, h, w], with the tiny decoder and
// attaches its first, middle and last frame side by side (each at most PreviewHeight pixels high)
// as a JPEG to the running step's event; the time it takes adds up in the result's "preview" phase.
func Preview(ctx context.Context, s *family.Session, dec *taehv.Decoder, step int, x0 []float32, shape []int) error {
	defer func(t0 time.Time) { s.Result.Timings.AddPhase("preview", time.Since(t0)) }(time.Now())
	// A canvas k times taller than a preview frame decodes latents averaged over k×k first: k² less
	// decoding and host transfer for the same small picture (one more program per canvas, compiled once).
	if k := shape[3] * dec.Config().SpatialRatio() / PreviewHeight; k > 1 {
		x0, shape = poolLatents(x0, shape, k)
	}
	frames := dec.Config().NumFrames(shape[2])
	if frames < 1 {
		return errors.New("fastvideo: preview: the tiny decoder gives no frames for these latents")
	}
	picks := previewPicks(frames)
	pix, out, err := dec.DecodeFrames(ctx, x0, shape, picks)
	if err != nil {
		return fmt.Errorf("fastvideo: preview of step %d: %w", step, err)
	}
	p, err := EncodePreview(pix, picks, out[3], out[4])
	if err != nil {
		return err
	}
	p.Step = step
	s.SetPreview(p)
	return nil
}

// previewPicks is the first, middle and last of frames (fewer for a short video).
func previewPicks(frames int) []int {
	picks := []int{0}
	for _, f := range []int{frames / 2, frames - 1} {
		if f != picks[len(picks)-1] {
			picks = append(picks, f)
		}
	}
	return picks
}

// poolLatents averages latents [1, C, T, h, w] over k×k blocks (a remainder row or column dropped).
func poolLatents(x []float32, shape []int, k int) ([]float32, []int) {
	c, t, h, w := shape[1], shape[2], shape[3], shape[4]
	ph, pw := h/k, w/k
	out := make([]float32, c*t*ph*pw)
	inv := 1 / float32(k*k)
	for p := 0; p < c*t; p++ {
		src, dst := x[p*h*w:(p+1)*h*w], out[p*ph*pw:(p+1)*ph*pw]
		for y := 0; y < ph; y++ {
			for xx := 0; xx < pw; xx++ {
				var sum float32
				for dy := 0; dy < k; dy++ {
					row := src[(y*k+dy)*w+xx*k:]
					for dx := 0; dx < k; dx++ {
						sum += row[dx]
					}
				}
				dst[y*pw+xx] = sum * inv
			}
		}
	}
	return out, []int{1, c, t, ph, pw}
}

// EncodePreview draws pixels [3][len(picks)][h][w] in [0, 1], the video's frames picks, side by side,
// each scaled (nearest) to at most PreviewHeight pixels high, as a JPEG.
func EncodePreview(pixels []float32, picks []int, h, w int) (*api.Preview, error) {
	n := len(picks)
	if len(pixels) != 3*n*h*w {
		return nil, fmt.Errorf("fastvideo: preview: %d values for %d frames of %dx%d", len(pixels), n, w, h)
	}
	scale := max(1, (h+PreviewHeight-1)/PreviewHeight)
	th, tw := h/scale, w/scale
	img := image.NewRGBA(image.Rect(0, 0, tw*n, th))
	plane := h * w
	for i := range n {
		for y := 0; y < th; y++ {
			for x := 0; x < tw; x++ {
				o := i*plane + y*scale*w + x*scale
				img.SetRGBA(i*tw+x, y, color.RGBA{R: taehv.Quantize(pixels[o]), G: taehv.Quantize(pixels[n*plane+o]),
					B: taehv.Quantize(pixels[2*n*plane+o]), A: 255})
			}
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 80}); err != nil {
		return nil, fmt.Errorf("fastvideo: preview: %w", err)
	}
	return &api.Preview{MIME: "image/jpeg", Data: buf.Bytes(), Width: img.Rect.Dx(), Height: th, Frames: slices.Clone(picks)}, nil
}

// CheckRun refuses, before anything loads, a run that needs the tiny decoder (decoder "tiny", or
// previews) without its weights.
func (t *TinyDecoder) CheckRun(decoder string, preview bool) error {
	if decoder == api.DecoderTiny {
		if err := t.Require("decoder", decoder); err != nil {
			return err
		}
	}
	if preview {
		return t.Require("preview", true)
	}
	return nil
}

// Acquire loads the tiny decoder into slot as a run's component (resident as the memory policy decides).
func (t *TinyDecoder) Acquire(s *family.Session, slot **taehv.Decoder) (*taehv.Decoder, error) {
	return family.Acquire(s, slot, family.CompTinyDecoder, func() (*taehv.Decoder, error) { return t.Load(s.Engine) })
}
