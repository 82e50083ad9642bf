package wan

import (
	"math"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// TestBindingListsEveryProblem: biases are declared parameters too; VSA gate projections of FastWan
// students are not unexpected.
func TestBindingListsEveryProblem(t *testing.T) {
	testutil.CheckBinding(t, testutil.Binding{
		Kind: "wan_dit",
		Declared: func(t *testing.T, fx *testutil.Fixture) *weights.Set {
			return declareParams(fixtureConfig(t, fx)).set
		},
		Open: testutil.OpenSource(fixtureConfig, FromSource),
		Gone: "blocks.1.attn2.norm_k.weight", Reshaped: "blocks.0.ffn.net.2.weight",
		Reshape: func(s []int) []int { return []int{s[1], s[0]} },
		Extra:   []string{"blocks.0.to_gate_compress.weight", "blocks.1.attn1.to_gate_compress.weight", "blocks.0.attn1.bogus"},
		ExtraOf: "blocks.0.attn1.to_q.weight", Bogus: "blocks.0.attn1.bogus", Ignored: "to_gate_compress",
	})
}

// TestMissingBiasesAreZero: a bias-free export binds, and equals the full checkpoint with that bias
// zeroed.
func TestMissingBiasesAreZero(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		cfg := fixtureConfig(t, fx)
		in := fixtureInputs(t, fx)
		const b = "blocks.0.attn1.to_out.0.bias"
		info, _ := fx.Weights().Tensor(b)
		zero := info
		zero.Data = make([]byte, len(info.Data))
		run := func(src weights.Source) []float32 {
			return testutil.Run(t, func() (*Model, error) { return FromSource(testutil.Backend(t), cfg, src, Options{}) },
				func(m *Model) ([]float32, error) { return m.Forward(in) })
		}
		without := run(&testutil.EditSource{Base: fx.Weights(), Hide: func(n string) bool { return n == b }})
		zeroed := run(&testutil.EditSource{Base: fx.Weights(), Replace: map[string]safetensors.Info{b: zero}})
		testutil.AssertClose(t, "missing bias vs zero bias", without, zeroed, nil, 0)
	})
}

// TestLoadFolder writes the fixture weights as a released transformer/ folder (config.json, two shards
// and an index) and checks Load against the fixture output.
func TestLoadFolder(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		dir := testutil.WriteReleaseFolder(t, fx, testutil.ReleaseFolder{ConfigPath: []string{"arch_config"},
			Extra: map[string]any{"_class_name": "WanTransformer3DModel"}, Shards: 2})
		out := testutil.Run(t, func() (*Model, error) { return Load(testutil.Backend(t), dir, Options{}) },
			func(m *Model) ([]float32, error) { return m.Forward(fixtureInputs(t, fx)) })
		want, sh := fx.F32(t, "out.sample")
		testutil.AssertClose(t, "out.sample via Load", out, want, sh, testutil.ParityTol(want))
	})
}

func TestReleaseParameterCounts(t *testing.T) {
	testutil.AssertParamCounts(t, Params, []testutil.ParamCase[Config]{ // computed from the released configs
		{Name: "Wan2.1-1.3B", Cfg: Wan21T2V1_3B(), Want: 1_418_996_800},
		{Name: "Wan2.2-TI2V-5B", Cfg: Wan22TI2V5B(), Want: 4_999_787_712},
		{Name: "Wan2.1-14B", Cfg: Wan21T2V14B(), Want: 14_288_491_584},
	})
}

func TestForwardFLOPs(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    Config
		tokens int
		want   float64 // TFLOP, computed from the released configs
	}{
		{"1.3B 480x832x81", Wan21T2V1_3B(), 32760, 283.0},
		{"1.3B 448x832x61", Wan21T2V1_3B(), 23296, 160.7},
		{"5B 480x832x81", Wan22TI2V5B(), 8190, 98.0},
		{"5B 704x1280x121", Wan22TI2V5B(), 27280, 517.0},
		{"14B 480x832x81", Wan21T2V14B(), 32760, 1678.4},
		{"14B 720x1280x81", Wan21T2V14B(), 75600, 6523.4},
	} {
		got := c.cfg.ForwardFLOPs(c.tokens, 512) / 1e12
		if math.Abs(got-c.want) > 0.06 {
			t.Errorf("%s: %.2f TFLOP per forward, want %.1f", c.name, got, c.want)
		}
	}
}

func TestConfigJSON(t *testing.T) {
	// A released diffusers config.json (Wan2.1-T2V-1.3B-Diffusers/transformer).
	released := `{"_class_name": "WanTransformer3DModel", "_diffusers_version": "0.33.0.dev0",
	  "added_kv_proj_dim": null, "attention_head_dim": 128, "cross_attn_norm": true, "eps": 1e-06,
	  "ffn_dim": 8960, "freq_dim": 256, "image_dim": null, "in_channels": 16, "num_attention_heads": 12,
	  "num_layers": 30, "out_channels": 16, "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads",
	  "rope_max_seq_len": 1024, "text_dim": 4096}`
	c, err := ParseConfig([]byte(released))
	if err != nil {
		t.Fatal(err)
	}
	want := Wan21T2V1_3B()
	if c.NumLayers != want.NumLayers || c.HiddenSize() != 1536 || c.FFNDim != want.FFNDim || c.OutChannels != 16 {
		t.Errorf("decoded %+v, want the 1.3B geometry", c)
	}
	if d := c.RopeDims(); d != [3]int{44, 42, 42} {
		t.Errorf("RoPE split %v, want [44 42 42] (WanRotaryPosEmbed)", d)
	}
	c, err = ParseConfig([]byte(`{"in_channels": 48, "out_channels": null}`))
	if err != nil || c.OutChannels != 48 || c.NumLayers != 40 {
		t.Errorf("out_channels null: %+v, %v; want out = in = 48 over the 14B defaults", c, err)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"image_dim": 1280, "added_kv_proj_dim": 5120}`, "image-to-video"},
		{`{"qk_norm": "rms_norm"}`, "qk_norm"},
		{`{"patch_size": [2, 2]}`, "patch_size"},
		{`{"attention_head_dim": 4}`, "RoPE widths"}, {`{"attention_head_dim": 31}`, "RoPE widths"},
		{`{"r_embedder": true}`, "r_embedder"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s): want an error about %q, got %v", tc.json, tc.want, err)
		}
	}
}

// TestRopeTables checks the first rows of the tables against the formula in float64 and the pair layout.
func TestRopeTables(t *testing.T) {
	cfg := Wan21T2V1_3B()
	cos, sin := RopeTables(cfg, 2, 3, 4)
	half := cfg.AttentionHeadDim / 2
	// Token (t=1, h=2, w=3) is row (1·3+2)·4+3 = 23; pair 0 is t, pair 22 the first h pair, 43 the first w.
	row := 23 * half
	for _, c := range []struct {
		pair int
		pos  float64
		freq float64
	}{{0, 1, 1}, {1, 1, math.Pow(10000, -2.0/44)}, {22, 2, 1}, {43, 3, 1}, {63, 3, math.Pow(10000, -40.0/42)}} {
		if got, want := cos[row+c.pair], float32(math.Cos(c.pos*c.freq)); got != want {
			t.Errorf("cos pair %d = %v, want %v", c.pair, got, want)
		}
		if got, want := sin[row+c.pair], float32(math.Sin(c.pos*c.freq)); got != want {
			t.Errorf("sin pair %d = %v, want %v", c.pair, got, want)
		}
	}
}
