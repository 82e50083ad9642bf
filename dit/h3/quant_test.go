package h3_test

// Quantized H3 forwards (owned by the quant helper). Until the model runs its linears through
// quant.Linear, a quantized checkpoint reaches the dense model through quant.Checkpoint.Dequantized()
// (host dequantization, scale·q + bias in float32). In f32 that forward equals the in-graph
// PathDequantGEMM route bit for bit: quant's tests show the graph dequantization equals the host one
// exactly and that PathDequantGEMM is the dense GEMM on those values.

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"testing"

	"fastvideo/dit/h3"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/quant"
)

type qMemSource map[string]safetensors.Info

func (m qMemSource) Names() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (m qMemSource) Tensor(name string) (safetensors.Info, bool) { i, ok := m[name]; return i, ok }

func quantInputs(t *testing.T, fx *testutil.Fixture) h3.ForwardInputs {
	t.Helper()
	i32 := func(name string) []int32 {
		v, _ := fx.I64(t, name)
		out := make([]int32, len(v))
		for i, x := range v {
			out[i] = int32(x)
		}
		return out
	}
	video, _ := fx.F32(t, "in.hidden_states")
	audio, _ := fx.F32(t, "in.audio_hidden_states")
	text, _ := fx.F32(t, "in.encoder_hidden_states")
	ts, _ := fx.F32(t, "in.timestep")
	pos, _ := fx.F64(t, "in.position_ids")
	return h3.ForwardInputs{
		VideoRows: video, AudioRows: audio, Text: text, Timesteps: ts,
		TimestepIndices: i32("in.timestep_indices"), TokenTags: i32("in.token_tags"), PositionIDs: pos,
		VideoIndices: i32("in.video_indices"), AudioIndices: i32("in.audio_indices"), TextIndices: i32("in.text_indices"),
	}
}

func quantForward(t *testing.T, cfg h3.Config, src interface {
	Names() []string
	Tensor(string) (safetensors.Info, bool)
}, in h3.ForwardInputs) h3.ForwardOutputs {
	t.Helper()
	m, err := h3.FromSource(testutil.Backend(t), cfg, src, h3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func qSNRdB(got, ref []float32) float64 {
	var s, n float64
	for i := range ref {
		d := float64(got[i]) - float64(ref[i])
		s += float64(ref[i]) * float64(ref[i])
		n += d * d
	}
	return 10 * math.Log10(s/n)
}

func qSameFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestQuantizedForward: for 8, 6 and 4 bits (group 64, BF16 scales and biases as in MLX checkpoints),
// convert the tiny DiT, save it, load it, and run the forward; it must equal the forward of the
// in-memory quantized model bit for bit, and its SNR against the f32 forward must reach 40/30/18 dB.
func TestQuantizedForward(t *testing.T) {
	minSNR := map[int]float64{8: 40, 6: 30, 4: 18}
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		var cfg h3.Config
		if err := fx.DecodeConfig(&cfg, "arch_config"); err != nil {
			t.Fatal(err)
		}
		var arch map[string]any
		if err := fx.DecodeConfig(&arch, "arch_config"); err != nil {
			t.Fatal(err)
		}
		config, _ := json.Marshal(arch)
		in := quantInputs(t, fx)
		src := fx.Weights()
		ref := quantForward(t, cfg, src, in)
		for _, bits := range []int{8, 6, 4} {
			t.Run(fmt.Sprintf("int%d", bits), func(t *testing.T) {
				// In memory: every quantized linear replaced by its dequantization.
				mem := qMemSource{}
				nq := 0
				for _, name := range src.Names() {
					info, _ := src.Tensor(name)
					mem[name] = info
					if !qIsQuantized(name) {
						continue
					}
					w, err := info.Float32s()
					if err != nil {
						t.Fatal(err)
					}
					a, err := quant.Quantize(w, info.Shape[0], info.Shape[1], bits, 64, safetensors.BF16)
					if err != nil {
						t.Fatal(err)
					}
					deq, err := a.Dequantize()
					if err != nil {
						t.Fatal(err)
					}
					mem[name] = safetensors.Info{Name: name, DType: safetensors.F32, Shape: info.Shape, Data: safetensors.F32Bytes(deq)}
					nq++
				}
				if nq != 6*(cfg.NumLayers+cfg.NumRefinerLayers) {
					t.Fatalf("%d quantized linears, want %d", nq, 6*(cfg.NumLayers+cfg.NumRefinerLayers))
				}
				inMemory := quantForward(t, cfg, mem, in)

				// Save -> load.
				ts, man, err := quant.Convert(src, config, quant.ConvertOptions{
					Scheme: quant.Scheme{Bits: bits, GroupSize: 64}, ScaleDType: safetensors.BF16})
				if err != nil {
					t.Fatal(err)
				}
				dir := t.TempDir()
				if err := quant.WriteCheckpoint(dir, ts, man); err != nil {
					t.Fatal(err)
				}
				ck, err := quant.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				var loadedCfg h3.Config
				if err := json.Unmarshal(ck.Manifest.Config, &loadedCfg); err != nil {
					t.Fatal(err)
				}
				loaded := quantForward(t, loadedCfg, ck.Dequantized(), in)
				if !qSameFloats(loaded.Video, inMemory.Video) || !qSameFloats(loaded.Audio, inMemory.Audio) {
					t.Fatal("save -> load -> forward differs from the in-memory quantized forward")
				}
				sv, sa := qSNRdB(loaded.Video, ref.Video), qSNRdB(loaded.Audio, ref.Audio)
				t.Logf("int%d: saved = in-memory bit for bit; SNR vs f32: video %.1f dB, audio %.1f dB", bits, sv, sa)
				if min(sv, sa) < minSNR[bits] {
					t.Fatalf("int%d: SNR %.1f dB below %.0f dB", bits, min(sv, sa), minSNR[bits])
				}
			})
		}
	})
}

func qIsQuantized(name string) bool {
	for _, s := range quant.QuantizedSuffixes {
		if len(name) > len(s) && name[len(name)-len(s)-1:] == "."+s {
			return true
		}
	}
	return false
}
