package family

import (
	"encoding/json"
	"testing"

	h3dit "fastvideo/dit/h3"
	wandit "fastvideo/dit/wan"
	"fastvideo/internal/modelcfg"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/weights"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
	wanvae "fastvideo/vae/wan"
)

// configReader is one model's config reader and parameter table, as a folder's configs reach them.
type configReader struct {
	name   string
	parse  func([]byte) (modelcfg.Validator, error)
	params func(modelcfg.Validator) (weights.Shapes, error)
}

func reader[C modelcfg.Validator](name string, parse func([]byte) (C, error), params func(C) (weights.Shapes, error)) configReader {
	return configReader{name,
		func(b []byte) (modelcfg.Validator, error) { return parse(b) },
		func(v modelcfg.Validator) (weights.Shapes, error) { return params(v.(C)) }}
}

var configReaders = []configReader{
	reader("h3 dit", h3dit.ParseConfig, h3dit.Params),
	reader("wan dit", wandit.ParseConfig, wandit.Params),
	reader("h3 video vae", h3video.ParseConfig, h3video.Params),
	reader("h3 audio vae", h3audio.ParseConfig, h3audio.Params),
	reader("wan vae", wanvae.ParseConfig, wanvae.Params),
	reader("qwen3vl", qwen3vl.ParseConfig, qwen3vl.Params),
	reader("umt5", umt5.ParseConfig, umt5.Params),
}

// FuzzConfigReaders feeds every model config reader the same bytes: none may panic or hang, and a
// config a reader accepts must validate and give a parameter table within the bounds (so nothing
// downstream allocates what a hostile config claims).
func FuzzConfigReaders(f *testing.F) {
	for _, c := range []any{h3dit.ReleaseConfig(), wandit.Wan21T2V1_3B(), h3video.DefaultConfig(), h3audio.DefaultConfig(),
		wanvae.DefaultConfig(), qwen3vl.Q32B(), umt5.Config{}} {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	f.Add([]byte(`{"num_layers": 1000000000}`))
	f.Add([]byte(`{"clip_length": 1099511627776}`))
	f.Add([]byte(`{"num_layers": 2, "num_layers": 3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range configReaders {
			cfg, err := r.parse(data)
			if err != nil {
				continue
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("%s accepted a config its Validate refuses: %v", r.name, err)
			}
			params, err := r.params(cfg)
			if err != nil {
				continue
			}
			if n := params.Count(); n < 0 || len(params) > 64*modelcfg.MaxLayers*64 {
				t.Fatalf("%s: a parameter table of %d tensors, %d values", r.name, len(params), n)
			}
		}
	})
}
