package h3_test

// H3 DiT checkpoints in MLX's block-scaled float modes (mx.quantize mode "mxfp8", "mxfp4", "nvfp4";
// mlx/ops.cpp fp_quantize / fp_dequantize), in the converted-folder layout of
// fastvideo/mlx_runtime/checkpoint.py (packed words and U8 scales beside the dense tensors, no biases,
// fastvideo/mlx_runtime/quant_backends.py's mode defaults).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/dit/h3"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
	"fastvideo/quant"
)

// floatModeCase is one float-mode conversion and the SNR (dB, against the dense f32 forward, video
// and audio, f32 and bf16) its forward must reach on the tiny fixtures. Measured (f32 / bf16, lowest
// of video and audio over h3_dit_tiny and h3_dit_tiny_adaln_rank): mxfp8 31.0 / 30.7, mxfp4
// 25.9 / 25.9, nvfp4 28.0 / 28.0, nvfp4 with a global scale 27.9 / 27.9. The floors sit 3 to 4 dB
// under those, in the order of the formats' rounding (E4M3 values keep 3 mantissa bits; E2M1 one,
// nvfp4's E4M3 scale per 16 values tracks the group's range better than E8M0 per 32), so a
// conversion or loading error that costs even a few dB fails.
type floatModeCase struct {
	mode   string
	global bool
	minSNR float64
}

var floatModeCases = []floatModeCase{
	{quant.ModeMXFP8, false, 27},
	{quant.ModeMXFP4, false, 22},
	{quant.ModeNVFP4, false, 24},
	{quant.ModeNVFP4, true, 24},
}

func (c floatModeCase) String() string {
	if c.global {
		return c.mode + "_global"
	}
	return c.mode
}

// convertFloat writes the fixture's weights converted to c's float mode to a new folder.
func convertFloat(t *testing.T, fx *testutil.Fixture, c floatModeCase) string {
	t.Helper()
	ts, man, err := h3.Convert(fx.Weights(), h3.FixtureArch(t, fx), h3.ConvertOptions{FloatMode: c.mode, GlobalScale: c.global})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := h3.WriteConverted(dir, ts, man); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostFloatQuantized is src with the six core linears of every block replaced by MLX's
// dequantization of their quantization (QuantizeFloat, DequantizeFloat), computed here by hand with
// the global scale max|w| where asked: the model a float-mode folder must load as.
func hostFloatQuantized(t *testing.T, src weights.Source, c floatModeCase) weights.MapSource {
	t.Helper()
	mode, _ := quant.LookupFloatMode(c.mode)
	out := weights.MapSource{}
	for _, name := range src.Names() {
		info, _ := src.Tensor(name)
		out[name] = info
		if !qIsQuantized(name) || !mode.Fits(info.Shape[1]) {
			continue
		}
		w, err := info.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		var global float32
		if c.global {
			for _, v := range w {
				global = max(global, v, -v)
			}
		}
		rows, cols := info.Shape[0], info.Shape[1]
		words, scales, err := quant.QuantizeFloat(mode, w, rows, cols, global)
		if err != nil {
			t.Fatal(err)
		}
		deq, err := quant.DequantizeFloat(mode,
			safetensors.Info{Name: name, DType: safetensors.U32, Shape: []int{rows, cols * mode.Bits / 32}, Data: words},
			safetensors.Info{Name: name + quant.ScalesSuffix, DType: safetensors.U8, Shape: []int{rows, cols / mode.Group}, Data: scales}, global)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = safetensors.Info{Name: name, DType: safetensors.F32, Shape: info.Shape, Data: safetensors.F32Bytes(deq)}
	}
	return out
}

// TestFloatModeForward: for mxfp8, mxfp4 and nvfp4 (with and without a global scale), convert the
// tiny DiT, save it as a converted MLX folder, h3.Load it and run the forward. It must equal bit for
// bit the dense model bound to the host's MLX quantize→dequantize of the same linears (so the loader
// reads every linear of every block, under the right name, as fp_dequantize computes it), and reach
// the mode's SNR floor against the dense f32 forward, in f32 and in bf16.
func TestFloatModeForward(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := h3.FixtureConfig(t, fx)
		in := h3.FixtureInputs(t, fx)
		ref := run(t, fromSource(t, cfg, fx.Weights()), in)
		for _, c := range floatModeCases {
			t.Run(c.String(), func(t *testing.T) {
				dir := convertFloat(t, fx, c)
				loaded := run(t, load(t, dir), in)
				host := run(t, fromSource(t, cfg, hostFloatQuantized(t, fx.Weights(), c)), in)
				sameOutputs(t, "save -> h3.Load -> forward vs the host-dequantized model", loaded, host)
				requireSNRFloor(t, c.String(), dir, loaded, ref, in, c.minSNR)
			})
		}
	})
}

// TestFloatModeLoadErrors: h3.Load refuses a float-mode folder whose manifest or tensors are broken,
// with an error that wraps quant's sentinel and names the field or tensor.
func TestFloatModeLoadErrors(t *testing.T) {
	fx := h3.TinyFixture(t)
	const key = "blocks.0.attn.to_q.weight"
	cases := []struct {
		name   string
		mode   string
		edit   func(t *testing.T, dir string, man map[string]any)
		want   error
		naming string
	}{
		{"has_biases", quant.ModeMXFP8, func(t *testing.T, dir string, man map[string]any) {
			qk(man)[key].(map[string]any)["has_biases"] = true
		}, quant.ErrManifest, key},
		{"global_on_mxfp4", quant.ModeMXFP4, func(t *testing.T, dir string, man map[string]any) {
			qk(man)[key].(map[string]any)["global_scale"] = 3.0
		}, quant.ErrManifest, key},
		{"bits", quant.ModeNVFP4, func(t *testing.T, dir string, man map[string]any) {
			man["quantization"].(map[string]any)["bits"] = 8
		}, quant.ErrManifest, "bits = 8"},
		{"missing_scales", quant.ModeMXFP4, func(t *testing.T, dir string, man map[string]any) {
			rewriteTensors(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return filterTensors(ts, func(n string) bool { return n != key+quant.ScalesSuffix })
			})
		}, quant.ErrMissingScales, key + quant.ScalesSuffix},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := convertFloat(t, fx, floatModeCase{mode: c.mode})
			path := filepath.Join(dir, h3.ManifestFile)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var man map[string]any
			if err := json.Unmarshal(raw, &man); err != nil {
				t.Fatal(err)
			}
			c.edit(t, dir, man)
			if raw, err = json.Marshal(man); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = h3.Load(testutil.Backend(t), dir, h3.Options{})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.naming) {
				t.Fatalf("h3.Load: got %v, want %v naming %q", err, c.want, c.naming)
			}
			t.Log(err)
		})
	}
}

func qk(man map[string]any) map[string]any { return man["quantized_keys"].(map[string]any) }

// rewriteTensors rewrites dir's tensors file through edit.
func rewriteTensors(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	path := filepath.Join(dir, h3.CheckpointFile)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		info, _ := f.Tensor(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), info.Data...)})
	}
	f.Close()
	if err := safetensors.WriteFile(path, edit(ts), nil); err != nil {
		t.Fatal(err)
	}
}

func filterTensors(ts []safetensors.Tensor, keep func(string) bool) []safetensors.Tensor {
	var out []safetensors.Tensor
	for _, x := range ts {
		if keep(x.Name) {
			out = append(out, x)
		}
	}
	return out
}
