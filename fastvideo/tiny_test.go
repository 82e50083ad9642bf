package fastvideo

import (
	"bytes"
	"context"
	"errors"
	"image"
	_ "image/jpeg"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/safetensors"
	"fastvideo/vae/taehv"
)

// writeTAEHV writes the formula weights of cfg as a safetensors file, as a user's download would be.
func writeTAEHV(t *testing.T, name string, cfg taehv.Config) string {
	t.Helper()
	var ts []safetensors.Tensor
	for n, info := range taehv.FormulaSource(cfg) {
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	path := filepath.Join(t.TempDir(), name)
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// previews collects the preview of every step event, and counts the step events.
type previews struct {
	steps int
	got   []*Preview
}

func (p *previews) progress(e Event) {
	if e.Kind == DenoiseStep {
		p.steps++
		if e.Preview != nil {
			p.got = append(p.got, e.Preview)
		}
	} else if e.Preview != nil {
		p.got = append(p.got, &Preview{Step: -1})
	}
}

// TestTinyDecoder: Decoder "tiny" decodes the tiny models with their built-in TAEHV (no video VAE
// loads) into the plan's frame count (H3: 17k+5 from 5k+2 latents; Wan: 4T−3), the plan names it
// and counts it instead of the video VAE; previews come once per step as valid JPEGs, a run without
// them carries none, and a warm call with both compiles and loads nothing.
func TestTinyDecoder(t *testing.T) {
	for _, m := range []struct {
		name    string
		open    func(...Option) (*VideoGenerator, error)
		variant string
		frames  func(latents int) int
	}{
		{"tiny-h3", newTiny, "taeh3", func(l int) int { return 17*((l-2)/5) + 5 }},
		{"tiny-wan", newTinyWan, "taew2_1", func(l int) int { return 4*l - 3 }},
	} {
		t.Run(m.name, func(t *testing.T) {
			g := openGenerator(t, m.open)
			var loads []string
			g.loadHook = func(c string) { loads = append(loads, c) }
			req := Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true, Decoder: "tiny"}
			plan, err := g.Plan(req)
			if err != nil {
				t.Fatal(err)
			}
			names := memoryNames(plan.Memory)
			if plan.Decoder != "tiny" || plan.TinyDecoder != m.variant || slices.Contains(names, family.CompVideoVAE) ||
				!slices.Contains(names, family.CompTinyDecoder) {
				t.Fatalf("plan decoder %q (%q), memory %v", plan.Decoder, plan.TinyDecoder, names)
			}
			full, err := g.Plan(Request{Prompt: "a red fox"})
			if err != nil {
				t.Fatal(err)
			}
			if names := memoryNames(full.Memory); full.Decoder != "full" || full.TinyDecoder != "" || slices.Contains(names, family.CompTinyDecoder) ||
				!slices.Contains(names, family.CompVideoVAE) {
				t.Fatalf("full plan decoder %q (%q), memory %v", full.Decoder, full.TinyDecoder, names)
			}
			var pv previews
			req.Preview, req.Progress = true, pv.progress
			res, err := g.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want := m.frames(plan.VideoLatentFrames)
			if res.NumFrames != want || len(res.Frames) != want || len(res.Frames[0]) != 3*plan.Width*plan.Height {
				t.Errorf("%d frames (%d returned) from %d latents, want %d", res.NumFrames, len(res.Frames), plan.VideoLatentFrames, want)
			}
			if slices.Contains(loads, family.CompVideoVAE) || !slices.Contains(loads, family.CompTinyDecoder) {
				t.Errorf("loads %v: want the tiny decoder, not the video VAE", loads)
			}
			checkPreviews(t, pv, plan)

			// Warm: nothing compiles or loads again.
			loads = nil
			pv = previews{}
			req.Progress = pv.progress
			warm, err := g.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if warm.CompiledPrograms != 0 || len(loads) != 0 {
				t.Errorf("the warm call compiled %d programs and loaded %v", warm.CompiledPrograms, loads)
			}
			checkPreviews(t, pv, plan)

			// Preview off: no preview at all.
			pv = previews{}
			if _, err := g.Generate(context.Background(), Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true,
				Decoder: "tiny", Progress: pv.progress}); err != nil {
				t.Fatal(err)
			}
			if len(pv.got) != 0 || pv.steps != plan.Steps {
				t.Errorf("a run without previews carried %d in %d steps", len(pv.got), pv.steps)
			}
		})
	}
}

// checkPreviews: one preview per step, in order, each a JPEG of the size it claims showing the
// first, middle and last frame.
func checkPreviews(t *testing.T, pv previews, plan *GenerationPlan) {
	t.Helper()
	if pv.steps != plan.Steps || len(pv.got) != plan.Steps {
		t.Fatalf("%d previews in %d step events, want one per step (%d)", len(pv.got), pv.steps, plan.Steps)
	}
	for i, p := range pv.got {
		img, format, err := image.Decode(bytes.NewReader(p.Data))
		if err != nil || format != "jpeg" || p.MIME != "image/jpeg" {
			t.Fatalf("preview %d: %s %q: %v", i, p.MIME, format, err)
		}
		if p.Step != i+1 || img.Bounds().Dx() != p.Width || img.Bounds().Dy() != p.Height || p.Height != plan.CanvasHeight ||
			p.Width != len(p.Frames)*plan.CanvasWidth || p.Frames[0] != 0 || p.Frames[len(p.Frames)-1] != plan.NumFrames-1 {
			t.Errorf("preview %d: step %d, %dx%d image claiming %dx%d, frames %v (canvas %dx%d, %d frames)", i, p.Step,
				img.Bounds().Dx(), img.Bounds().Dy(), p.Width, p.Height, p.Frames, plan.CanvasWidth, plan.CanvasHeight, plan.NumFrames)
		}
	}
}

func memoryNames(rs []api.ComponentResidency) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

// TestTinyDecoderFile: WithTinyDecoder loads a TAEHV file whose layout fits the model and decodes
// with it; a missing file or one for other latents is invalid input before anything loads, and an
// unknown Request.Decoder too.
func TestTinyDecoderFile(t *testing.T) {
	good := writeTAEHV(t, "taeh3.safetensors", taehv.Taeh3())
	g, err := newTiny(WithTinyDecoder(good))
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Generate(context.Background(), Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true, Decoder: "tiny"})
	g.Close()
	if err != nil || len(res.Frames) != res.NumFrames {
		t.Fatalf("decoding with %s: %v", good, err)
	}
	for _, c := range []struct{ name, path, want string }{
		{"missing", filepath.Join(t.TempDir(), "taeh3.safetensors"), "no such file"},
		{"mismatched", writeTAEHV(t, "taew2_1.safetensors", taehv.Taew21()), "16 latent channels"},
	} {
		_, err := newTiny(WithTinyDecoder(c.path))
		var re *RequestError
		if !errors.As(err, &re) || re.Field != "tiny_decoder" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s file: %v, want a tiny_decoder RequestError mentioning %q", c.name, err, c.want)
		}
	}
	g = openGenerator(t, newTiny)
	var loads []string
	g.loadHook = func(c string) { loads = append(loads, c) }
	_, err = g.Generate(context.Background(), Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true, Decoder: "fast"})
	var re *RequestError
	if !errors.As(err, &re) || re.Field != "decoder" || len(loads) != 0 {
		t.Errorf("decoder \"fast\": %v (loads %v), want a decoder RequestError before any load", err, loads)
	}
}

// TestTinyDecoderWan22: tiny-wan2.2's 48-channel latents decode with taew2_2's layout (patch 2) into
// the plan's 4T−3 frames at the plan's size.
func TestTinyDecoderWan22(t *testing.T) {
	g := openGenerator(t, opener("tiny-wan2.2"))
	res, err := g.Generate(context.Background(), Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true, Decoder: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Plan
	if p.TinyDecoder != "taew2_2" || res.NumFrames != 4*p.VideoLatentFrames-3 || len(res.Frames) != res.NumFrames ||
		len(res.Frames[0]) != 3*p.Width*p.Height {
		t.Errorf("plan %s/%s: %d frames (%d returned) of %d bytes from %d latents at %dx%d", p.Decoder, p.TinyDecoder, res.NumFrames,
			len(res.Frames), len(res.Frames[0]), p.VideoLatentFrames, p.Width, p.Height)
	}
}
