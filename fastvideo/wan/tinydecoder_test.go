package wan_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/fvtest"
	"fastvideo/internal/safetensors"
	"fastvideo/vae/taehv"
)

// TestTinyDecoderFolder: a model folder's tiny decoder is <dir>/taehv/taew2_1.safetensors; without
// it Decoder "tiny" and Preview are invalid input naming the file to download, a file for other
// latents (taew2_2's 48 channels) is invalid input naming tiny_decoder, and the right one plans.
func TestTinyDecoderFolder(t *testing.T) {
	dir := tinyWanFolder(t, "WanPipeline")
	g := fvtest.Open(t, dir)
	want := filepath.Join(dir, "taehv", "taew2_1.safetensors")
	for _, req := range []fastvideo.Request{{Prompt: "a red fox", Decoder: "tiny"}, {Prompt: "a red fox", Preview: true}} {
		_, err := g.Plan(req)
		var re *fastvideo.RequestError
		if !errors.As(err, &re) || (re.Field != "decoder" && re.Field != "preview") || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "madebyollin/taehv") {
			t.Errorf("%+v without the file: %v", req, err)
		}
	}
	if p, err := g.Plan(fastvideo.Request{Prompt: "a red fox"}); err != nil || p.Decoder != "full" {
		t.Fatalf("full decoder plan: %v", err)
	}
	writeTAEHV(t, want, taehv.Taew22())
	_, err := g.Plan(fastvideo.Request{Prompt: "a red fox", Decoder: "tiny"})
	var re *fastvideo.RequestError
	if !errors.As(err, &re) || re.Field != "tiny_decoder" || !strings.Contains(err.Error(), "48 latent channels") {
		t.Errorf("a taew2_2 file as taew2_1: %v", err)
	}
	writeTAEHV(t, want, taehv.Taew21())
	p, err := g.Plan(fastvideo.Request{Prompt: "a red fox", Decoder: "tiny"})
	if err != nil || p.Decoder != "tiny" || p.TinyDecoder != "taew2_1" {
		t.Errorf("with the file: %+v, %v", p, err)
	}
}

func writeTAEHV(t *testing.T, path string, cfg taehv.Config) {
	t.Helper()
	var ts []safetensors.Tensor
	for n, info := range taehv.FormulaSource(cfg) {
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
}

// TestTinyDecoderVariants: each model plans the TAEHV variant that decodes its latents, and counts it
// instead of the full video VAE.
func TestTinyDecoderVariants(t *testing.T) {
	for model, want := range map[string]string{"tiny-wan": "taew2_1", "tiny-wan2.2": "taew2_2", "wan2.1-t2v-1.3b": "taew2_1",
		"wan2.2-ti2v-5b": "taew2_2", "tiny-h3": "taeh3", "fasth3": "taeh3"} {
		p, err := fastvideo.Plan(model, fastvideo.Request{Decoder: "tiny"})
		if err != nil {
			t.Fatal(model, err)
		}
		var names []string
		for _, m := range p.Memory {
			names = append(names, m.Name)
		}
		if p.TinyDecoder != want || p.Decoder != "tiny" || !strings.Contains(strings.Join(names, " "), "tiny_decoder") ||
			strings.Contains(strings.Join(names, " "), "video_vae ") {
			t.Errorf("%s: tiny decoder %q (want %q), memory %v", model, p.TinyDecoder, want, names)
		}
	}
}
