package h3

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

func TestBindingListsEveryProblem(t *testing.T) {
	testutil.CheckBinding(t, testutil.Binding{
		Kind: "h3_dit",
		Declared: func(t *testing.T, fx *testutil.Fixture) *weights.Set {
			p, err := declareParams(fixtureConfig(t, fx), dtypes.Float32, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			return p.set
		},
		Open: testutil.OpenSource(fixtureConfig, FromSource),
		Gone: "transformer_blocks.1.attn.norm_k.weight", Reshaped: "audio_proj_out.weight",
		Reshape: func(s []int) []int { return []int{s[0] / 2, s[1] * 2} },
		// The VSA gate matrices of FastH3 students are optional: their absence is no error.
		Extra:   []string{"transformer_blocks.0.attn.bogus"},
		ExtraOf: "audio_proj_out.weight", Bogus: "transformer_blocks.0.attn.bogus", Ignored: "to_gate_compress",
	})
}

func TestReleaseParameterCount(t *testing.T) {
	cfg := ReleaseConfig()
	if got := testutil.ParamCount(t, Params, cfg); got != 33_122_992_896 { // upstream's "33.12B total" figure
		t.Errorf("released H3 has %d parameters, want 33,122,992,896", got)
	}
	cfg.AdaLNRank = 16
	if got := testutil.ParamCount(t, Params, cfg); got < 20_160_000_000 || got > 20_180_000_000 {
		t.Errorf("rank-16 H3 has %d parameters, want ≈20.17B", got)
	}
}

func TestConfigJSON(t *testing.T) {
	c, err := ParseConfig([]byte(`{"num_layers": 2, "hidden_size": 128, "adaln_rank": null, "patch_size": [1, 2, 2]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumLayers != 2 || c.HiddenSize != 128 || c.AdaLNRank != 0 || c.FFNDim != 14336 {
		t.Errorf("decoded %+v: want overrides over release defaults", c)
	}
	c.AdaLNRank = 8
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back.AdaLNRank != 8 || back.NumLayers != 2 {
		t.Errorf("round trip: %s -> %+v, %v", b, back, err)
	}
	if !strings.Contains(string(b), `"adaln_rank":8`) {
		t.Errorf("marshalled config lacks adaln_rank: %s", b)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"rope_freq_dim": 32}`, "rotary width 192"},
		{`{"patch_size": [2, 2]}`, "patch_size"},
		{`{"adaln_rank": 4000}`, "adaln_rank = 4000"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s): want an error about %q, got %v", tc.json, tc.want, err)
		}
	}
}

func TestForwardInputErrors(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		for _, tc := range []struct {
			name string
			edit func(in *ForwardInputs)
			want string
		}{
			{"duplicate row", func(in *ForwardInputs) { in.AudioIndices[0] = in.VideoIndices[0] }, "listed twice"},
			{"short video", func(in *ForwardInputs) { in.VideoRows = in.VideoRows[1:] }, "VideoRows"},
			{"bad tag", func(in *ForwardInputs) { in.TokenTags[3] = 7 }, "TokenTags[3] = 7"},
			{"bad timestep index", func(in *ForwardInputs) { in.TimestepIndices[0] = 9 }, "TimestepIndices[0] = 9"},
			{"positions", func(in *ForwardInputs) { in.PositionIDs = in.PositionIDs[3:] }, "PositionIDs"},
		} {
			in := fixtureInputs(t, fx)
			tc.edit(&in)
			if _, err := m.Forward(in); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: want an error mentioning %q, got %v", tc.name, tc.want, err)
			}
		}
	})
}

func TestLoadShardedFolder(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		dir := testutil.WriteReleaseFolder(t, fx, testutil.ReleaseFolder{ConfigPath: []string{"arch_config"}, Shards: 2})
		out := testutil.Run(t, func() (*Model, error) { return Load(testutil.Backend(t), dir, Options{}) },
			func(m *Model) (ForwardOutputs, error) { return m.Forward(fixtureInputs(t, fx)) })
		want, sh := fx.F32(t, "out.video")
		testutil.AssertClose(t, "out.video via Load", out.Video, want, sh, testutil.ParityTol(want))

		if _, err := Load(testutil.Backend(t), t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("Load of an empty folder: want an error naming config.json, got %v", err)
		}
	})
}

// bf16 compute (the GPU configuration) runs on the Go backend too; it is checked loosely against f32.
func TestBFloat16Forward(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{DType: dtypes.BFloat16})
		out := mustForward(t, m, fixtureInputs(t, fx))
		assertOutputsAtDType(t, fx, out, dtypes.BFloat16, "")
	})
}
