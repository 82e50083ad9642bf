package wan

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fastvideo/internal/lora"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// loraTestdata holds the adapters of every layout and the merges upstream computes
// (internal/lora/testdata/gen_lora.py).
const loraTestdata = "../../internal/lora/testdata"

type loraCases struct {
	Base, Expected string
	Cases          []struct {
		Name     string
		Adapters []struct {
			File     string
			Strength float64
		}
		Touched   []string
		Reference string
	}
}

func readLoRABase(t *testing.T, path string) lora.TensorMap {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return loraTensors(t, f)
}

// loraTensors copies src's tensors into the float32 map lora.Merge changes in place; the shapes are
// cloned because src may be a mapped file that closes before the map is used.
func loraTensors(t *testing.T, src weights.Source) lora.TensorMap {
	t.Helper()
	m := lora.TensorMap{}
	for _, n := range src.Names() {
		info, _ := src.Tensor(n)
		v, err := info.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		m[n] = &lora.Tensor{Shape: slices.Clone(info.Shape), Data: v}
	}
	return m
}

// TestLoRAMergeMatchesUpstream: each layout's adapter, merged through the Wan name map, gives the weights
// diffusers' converters and PEFT's fuse give (ComfyUI's formula for dense payloads), within the f32 parity
// tolerance; every tensor the case does not change stays bit-identical (the base holds -0.0 entries).
func TestLoRAMergeMatchesUpstream(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(loraTestdata, "lora_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases loraCases
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	want := readLoRABase(t, filepath.Join(loraTestdata, cases.Expected))
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			base := readLoRABase(t, filepath.Join(loraTestdata, cases.Base))
			w := readLoRABase(t, filepath.Join(loraTestdata, cases.Base))
			var ads []lora.Weighted
			for _, a := range c.Adapters {
				ad, err := lora.Open(filepath.Join(loraTestdata, a.File))
				if err != nil {
					t.Fatal(err)
				}
				defer ad.Close()
				ads = append(ads, lora.Weighted{Adapter: ad, Strength: a.Strength})
			}
			touched, err := lora.Merge(ads, LoRANames(), w)
			if err != nil {
				t.Fatal(err)
			}
			all := map[string]bool{}
			for _, tc := range touched {
				for _, n := range tc.Tensors {
					all[n] = true
				}
			}
			for _, n := range c.Touched {
				if !all[n] {
					t.Errorf("upstream changes %s, the merge reports no change to it", n)
				}
			}
			checkLoRAWeights(t, c.Name, c.Touched, base, w, want)
		})
	}
}

func checkLoRAWeights(t *testing.T, name string, changed []string, base, got, want lora.TensorMap) {
	t.Helper()
	for n, g := range got {
		ref := base[n].Data
		if slices.Contains(changed, n) {
			ref = want[name+":"+n].Data
			if d, tol := testutil.MaxAbsDiff(g.Data, ref), testutil.ParityTol(ref); d > tol {
				t.Errorf("%s: max abs err %g > %g", n, d, tol)
			}
			continue
		}
		for i := range ref {
			if math.Float32bits(g.Data[i]) != math.Float32bits(ref[i]) {
				t.Errorf("%s[%d] = %g, want the base's %g bit for bit (upstream leaves it unchanged)", n, i, g.Data[i], ref[i])
				break
			}
		}
	}
}

// TestLoRANamesMatchCheckpoint: every module the map produces for a T2V model is a tensor Params lists,
// except the I2V image layers the T2V DiT lacks.
func TestLoRANamesMatchCheckpoint(t *testing.T) {
	shapes, err := Params(Wan21T2V1_3B())
	if err != nil {
		t.Fatal(err)
	}
	have := shapes.Map()
	modules := []string{"head.head", "head.modulation", "text_embedding.0", "text_embedding.2", "time_embedding.0",
		"time_embedding.2", "time_projection.1", "patch_embedding"}
	for k := range nativeBlock {
		modules = append(modules, "blocks.29."+k)
	}
	for k := range diffusersBlock {
		modules = append(modules, "blocks.0."+k)
	}
	for k := range diffusersTop {
		modules = append(modules, k)
	}
	i2v := func(n string) bool {
		return strings.Contains(n, "add_") || strings.Contains(n, "image_embedder") || strings.Contains(n, "norm_added_k")
	}
	testutil.CheckLoRATargets(t, "Wan", LoRATarget, have, modules, i2v)
	for _, c := range []struct{ musubi, want string }{
		{"blocks_3_self_attn_o", "blocks.3.attn1.to_out.0.weight"},
		{"blocks_0_cross_attn_k_img", "blocks.0.attn2.add_k_proj.weight"},
		{"blocks_12_ffn_0", "blocks.12.ffn.net.0.proj.weight"},
		{"head_head", "proj_out.weight"},
		{"time_projection_1", "condition_embedder.time_proj.weight"},
		{"img_emb_proj_4", "condition_embedder.image_embedder.norm2.weight"},
		{"blocks_7_cross_attn_norm_k_img", "blocks.7.attn2.norm_added_k.weight"},
		{"blocks_1_attn1_to_out_0", "blocks.1.attn1.to_out.0.weight"},
		{"blocks_0_ffn_net_0_proj", "blocks.0.ffn.net.0.proj.weight"},
	} {
		if tg, ok := LoRATarget(c.musubi, true); !ok || tg.Weight != c.want {
			t.Errorf("musubi %s -> %+v %v, want %s", c.musubi, tg, ok, c.want)
		}
	}
	if _, ok := LoRATarget("blocks_0_self_attn_qq", true); ok {
		t.Error("an unknown musubi name was mapped")
	}
}

// TestLoRAForeignAdapter: an H3 adapter on Wan fails, naming the keys and what they look like.
func TestLoRAForeignAdapter(t *testing.T) {
	a := make([]byte, 4*2*8)
	ad, err := testutil.Adapter(t, "h3.safetensors", nil,
		safetensors.Tensor{Name: "transformer_blocks.0.attn.to_q.lora_A.default.weight", DType: safetensors.F32, Shape: []int{2, 8}, Data: a},
		safetensors.Tensor{Name: "transformer_blocks.0.attn.to_q.lora_B.default.weight", DType: safetensors.F32, Shape: []int{8, 2}, Data: a})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lora.Merge([]lora.Weighted{{Adapter: ad, Strength: 1}}, LoRANames(), lora.TensorMap{})
	if err == nil {
		t.Fatal("an H3 adapter merged into Wan")
	}
	for _, s := range []string{"transformer_blocks.0.attn.to_q.lora_A.default.weight", "MiniMax H3", "the Wan DiT", "use an adapter trained for Wan"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// TestLoRAI2VAdapterOnT2V: an I2V adapter's image layers are skipped, and reported, on a checkpoint without
// them (LightX2V's Wan2.2-I2V files on A14B); the rest merges as upstream's.
func TestLoRAI2VAdapterOnT2V(t *testing.T) {
	const name = "native_ab_i2v"
	base := readLoRABase(t, filepath.Join(loraTestdata, "wan_lora_base.safetensors"))
	w := readLoRABase(t, filepath.Join(loraTestdata, "wan_lora_base.safetensors"))
	for n := range w {
		if strings.Contains(n, "add_") || strings.Contains(n, "image_embedder") {
			delete(w, n)
			delete(base, n)
		}
	}
	ad, err := lora.Open(filepath.Join(loraTestdata, "lora_"+name+".safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	touched, err := lora.Merge([]lora.Weighted{{Adapter: ad, Strength: 1}}, LoRANames(), w)
	if err != nil {
		t.Fatal(err)
	}
	skipped := strings.Join(touched[0].Skipped, ",")
	if want := "blocks.0.cross_attn.k_img,blocks.0.cross_attn.v_img,blocks.1.cross_attn.k_img,blocks.1.cross_attn.v_img,img_emb.proj.1,img_emb.proj.3"; skipped != want {
		t.Errorf("skipped %s, want %s", skipped, want)
	}
	var changed []string
	for _, n := range touched[0].Tensors {
		if w[n] == nil {
			t.Errorf("reports a change to %s, which the weights lack", n)
		}
		changed = append(changed, n)
	}
	checkLoRAWeights(t, name, changed, base, w, readLoRABase(t, filepath.Join(loraTestdata, "lora_expected.safetensors")))
}

// TestLoRATwoSpellings: one layer named both natively and in diffusers' names is refused, not applied twice.
func TestLoRATwoSpellings(t *testing.T) {
	a := make([]byte, 4*2*8)
	var ts []safetensors.Tensor
	for _, m := range []string{"diffusion_model.blocks.0.self_attn.q", "transformer.blocks.0.attn1.to_q"} {
		ts = append(ts, safetensors.Tensor{Name: m + ".lora_down.weight", DType: safetensors.F32, Shape: []int{2, 8}, Data: a},
			safetensors.Tensor{Name: m + ".lora_up.weight", DType: safetensors.F32, Shape: []int{8, 2}, Data: a})
	}
	ad, err := testutil.Adapter(t, "two.safetensors", nil, ts...)
	if err != nil {
		t.Fatal(err)
	}
	w := lora.TensorMap{"blocks.0.attn1.to_q.weight": {Shape: []int{8, 8}, Data: make([]float32, 64)}}
	_, err = lora.Merge([]lora.Weighted{{Adapter: ad, Strength: 1}}, LoRANames(), w)
	if err == nil || !strings.Contains(err.Error(), `"blocks.0.attn1.to_q.weight"`) || !strings.Contains(err.Error(), "two spellings") {
		t.Fatalf("error %v, want one naming the layer and the two spellings", err)
	}
}
