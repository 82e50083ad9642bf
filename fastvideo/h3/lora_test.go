package h3

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/testutil"
)

// TestLoRARefusesConvertedBases: a converted MLX transformer/ (quantized or block-scaled linears) and a
// checkpoint carrying a fixed AdaLN cache refuse adapters before the adapter is even opened, saying to
// load the dense release.
func TestLoRARefusesConvertedBases(t *testing.T) {
	adapter := []api.LoRA{{Path: "never-opened.safetensors", Strength: 1}}
	converted := tinySpec()
	converted.Dir = t.TempDir()
	if err := os.MkdirAll(filepath.Join(converted.Dir, familykit.DirTransformer), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(converted.Dir, familykit.DirTransformer, h3dit.ManifestFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cached := tinySpec()
	cached.Dir, cached.AdaLN = t.TempDir(), &h3dit.AdaLNManifest{}
	for _, c := range []struct {
		spec *Spec
		want string
	}{
		{converted, "converted MLX checkpoint"},
		{cached, "fixed AdaLN cache"},
	} {
		_, err := c.spec.PlanLoRA(adapter)
		var re *api.RequestError
		if !errors.As(err, &re) || re.Field != "lora" || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "dense") {
			t.Errorf("%s: %v, want a lora RequestError mentioning %q and the dense release", c.spec.Dir, err, c.want)
		}
	}
}

// TestLoRAPlanFFN: an adapter on a joint block's FFN output (in = the FFN width) plans against the
// parameter table of a built-in model.
func TestLoRAPlanFFN(t *testing.T) {
	dir := t.TempDir()
	path := testutil.WriteLoRA(t, dir, "a.safetensors", 1,
		testutil.LoRAModule{Module: "transformer_blocks.0.ff.net.2", In: tinySpec().DiT.FFNDim, Out: 128, Rank: 2, PEFT: true})
	p, err := tinySpec().PlanLoRA([]api.LoRA{{Path: path, Strength: 1}})
	if err != nil || len(p) != 1 || p[0].Tensors != 1 {
		t.Fatalf("plan %+v, %v", p, err)
	}
}
