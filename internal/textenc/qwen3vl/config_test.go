package qwen3vl

import (
	"math"
	"strings"
	"testing"
)

// The released Qwen3-VL-32B config.json layout (transformers 4.57): text fields
// under text_config, rotary parameters in rope_scaling.
const hf32B = `{
  "architectures": ["Qwen3VLForConditionalGeneration"],
  "image_token_id": 151655,
  "model_type": "qwen3_vl",
  "text_config": {
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "intermediate_size": 25600, "max_position_embeddings": 262144,
    "model_type": "qwen3_vl_text", "num_attention_heads": 64, "num_hidden_layers": 64,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default"},
    "rope_theta": 5000000, "use_cache": true, "vocab_size": 151936
  },
  "tie_word_embeddings": false,
  "vision_config": {"deepstack_visual_indexes": [8, 16, 24], "depth": 27, "hidden_size": 1152,
    "num_heads": 16, "out_hidden_size": 5120, "patch_size": 16},
  "vision_end_token_id": 151653, "vision_start_token_id": 151652
}`

// transformers 5 writes rope_parameters and leaves the flat rope_theta null.
const hf32BV5 = `{
  "text_config": {
    "head_dim": 128, "hidden_size": 5120, "intermediate_size": 25600, "num_attention_heads": 64,
    "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "vocab_size": 151936,
    "rope_theta": null,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20], "mrope_interleaved": true}
  }
}`

func TestParseConfig(t *testing.T) {
	want := Q32B()
	want.OutputHiddenStateIndex = 0
	for name, raw := range map[string]string{"transformers4": hf32B, "transformers5": hf32BV5} {
		got, err := ParseConfig([]byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s: parsed %+v\nwant %+v", name, got, want)
		}
	}
	// Flat text config, the fixtures' layout.
	flat := `{"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
	  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-06,
	  "rope_theta": 5000000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": true, "output_hidden_state_index": 3}`
	got, err := ParseConfig([]byte(flat))
	if err != nil {
		t.Fatal(err)
	}
	if got.MRoPESection != [3]int{4, 2, 2} || !got.MRoPEInterleaved || got.RopeTheta != 5e6 || got.OutputHiddenStateIndex != 3 {
		t.Errorf("flat config parsed as %+v", got)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"text_config": {"hidden_size": 64}}`, "vocab_size = 0"},
		{strings.Replace(hf32B, `"num_key_value_heads": 8`, `"num_key_value_heads": 7`, 1), "multiple of num_key_value_heads"},
		{strings.Replace(hf32B, `[24, 20, 20]`, `[24, 20, 21]`, 1), "mrope_section"},
		{strings.Replace(hf32B, `"rope_type": "default"`, `"rope_type": "yarn"`, 1), "rope_type"},
		{`[1]`, "not valid JSON"},
	} {
		_, err := ParseConfig([]byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, err)
		}
	}
}

func TestRopeTables(t *testing.T) {
	cfg := Config{HeadDim: 16, RopeTheta: 5e6, MRoPESection: [3]int{4, 2, 2}, MRoPEInterleaved: true}
	plain := cfg
	plain.MRoPESection, plain.MRoPEInterleaved = [3]int{}, false
	// Text-only positions: interleaved M-RoPE is plain RoPE.
	c1, s1, err := RopeTables(cfg, TextPositions(7))
	if err != nil {
		t.Fatal(err)
	}
	c2, s2, _ := RopeTables(plain, TextPositions(7))
	for i := range c1 {
		if c1[i] != c2[i] || s1[i] != s2[i] {
			t.Fatalf("text-only M-RoPE differs from RoPE at %d", i)
		}
	}
	// Distinct axes: frequency slots follow the interleaved T,H,W pattern up to
	// 3*section for H and W (half = 8 slots: T H W T H W T T).
	pos := [3][]int{{3}, {5}, {11}}
	cos, sin, _ := RopeTables(cfg, pos)
	axes := []int{0, 1, 2, 0, 1, 2, 0, 0}
	inv := InvFreq(cfg.RopeTheta, cfg.HeadDim)
	for j, a := range axes {
		ang := float64(inv[j] * float32(pos[a][0]))
		for _, k := range []int{j, j + 8} {
			if math.Abs(float64(cos[k])-math.Cos(ang)) > 1e-7 || math.Abs(float64(sin[k])-math.Sin(ang)) > 1e-7 {
				t.Errorf("slot %d (axis %d): cos/sin %v/%v, want angle %v", k, a, cos[k], sin[k], ang)
			}
		}
	}
	// inv_freq_i = theta^(-2i/d).
	for i, v := range inv {
		if want := math.Pow(5e6, -float64(2*i)/16); math.Abs(float64(v)-want) > 1e-6*want {
			t.Errorf("inv_freq[%d] = %v, want %v", i, v, want)
		}
	}
	if _, _, err := RopeTables(cfg, [3][]int{{1, 2}, {1}, {1, 2}}); err == nil {
		t.Error("ragged positions: want an error")
	}
}
