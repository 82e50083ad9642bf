package fastvideo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// tinyWanLoRA is a native-named adapter on tiny-wan's DiT (width 64, FFN 128): a self-attention query,
// a cross-attention output and the FFN's first linear of block 0, and block 1's second FFN linear.
func tinyWanLoRA(t *testing.T, dir, name string, zeroUp bool) string {
	return testutil.WriteLoRA(t, dir, name, 3,
		testutil.LoRAModule{Module: "diffusion_model.blocks.0.self_attn.q", In: 64, Out: 64, Rank: 4, Alpha: 2, ZeroUp: zeroUp, Scale: 0.3},
		testutil.LoRAModule{Module: "diffusion_model.blocks.0.cross_attn.o", In: 64, Out: 64, Rank: 4, ZeroUp: zeroUp, Scale: 0.3},
		testutil.LoRAModule{Module: "diffusion_model.blocks.0.ffn.0", In: 64, Out: 128, Rank: 2, ZeroUp: zeroUp, Scale: 0.3},
		testutil.LoRAModule{Module: "diffusion_model.blocks.1.ffn.2", In: 128, Out: 64, Rank: 8, PEFT: true, ZeroUp: zeroUp, Scale: 0.3})
}

// TestWanLoRA runs tiny-wan end to end with adapters merged at load: an adapter whose up-projections are
// zero leaves the latents bit-identical to the run without it, a real one changes them, and both plans
// (the generator's and the package's) list what each adapter touches.
func TestWanLoRA(t *testing.T) {
	dir := t.TempDir()
	zero, real := tinyWanLoRA(t, dir, "zero.safetensors", true), tinyWanLoRA(t, dir, "real.safetensors", false)
	ref := seed1024WanLatents(t).Latents.Video

	g := openGenerator(t, newTinyWan, WithMemoryPolicy(OneResident), WithLoRA(zero, 0.8))
	res := latentsOnly(t, g, Request{Prompt: "a red fox"})
	if !testutil.SameBits(res.Latents.Video, ref) {
		t.Error("a zero up-projection adapter changed the latents")
	}
	pl := res.Plan.LoRA
	if len(pl) != 1 || pl[0].Path != zero || pl[0].Strength != 0.8 || pl[0].Modules != 4 || pl[0].Tensors != 4 {
		t.Errorf("the run's plan lists adapters %+v", pl)
	}

	g2, err := newTinyWan(WithMemoryPolicy(OneResident), WithLoRA(real, 1), WithLoRA(zero, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	got := latentsOnly(t, g2, Request{Prompt: "a red fox"}).Latents.Video
	if testutil.SameBits(got, ref) {
		t.Error("an adapter left the latents unchanged")
	}
	var diff float64
	for i := range got {
		diff = max(diff, float64(abs32(got[i]-ref[i])))
	}
	t.Logf("max latent change %.4g", diff)

	p, err := Plan("tiny-wan", Request{}, WithLoRA(real, 1), WithLoRA(zero, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.LoRA) != 2 || p.LoRA[0].Path != real || p.LoRA[1].Strength != 2 || p.LoRA[1].Tensors != 4 {
		t.Errorf("package plan adapters %+v", p.LoRA)
	}
	var table strings.Builder
	if err := p.WriteTable(&table); err != nil || !strings.Contains(table.String(), "lora 2") || !strings.Contains(table.String(), "4 modules, 4 tensors") {
		t.Errorf("plan table without the adapters (%v):\n%s", err, table.String())
	}
	if j := testutil.JSONObject(t, p); j["lora"] == nil {
		t.Errorf("plan JSON without \"lora\": %v", j)
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestH3LoRA runs tiny-h3 with diffusers-named adapters (LightX2V's layout): zero up-projections leave
// the latents bit-identical, a real adapter changes them.
func TestH3LoRA(t *testing.T) {
	dir := t.TempDir()
	zero, real := tinyH3LoRA(t, dir, "zero.safetensors", true), tinyH3LoRA(t, dir, "real.safetensors", false)
	ref := seed7Latents(t)
	req := Request{Prompt: "a red fox", Seed: Ptr[int64](7)}
	for _, c := range []struct {
		path string
		same bool
	}{{zero, true}, {real, false}} {
		g, err := newTiny(WithMemoryPolicy(OneResident), WithLoRA(c.path, 1))
		if err != nil {
			t.Fatal(err)
		}
		res := latentsOnly(t, g, req)
		g.Close()
		same := testutil.SameBits(res.Latents.Video, ref.Video) && testutil.SameBits(res.Latents.Audio, ref.Audio)
		if same != c.same {
			t.Errorf("%s: latents identical to the base model's: %v, want %v", filepath.Base(c.path), same, c.same)
		}
		if pl := res.Plan.LoRA; len(pl) != 1 || pl[0].Modules != 2 || pl[0].Tensors != 2 {
			t.Errorf("plan adapters %+v", pl)
		}
	}
}

// tinyH3LoRA writes a diffusers-named (LightX2V-layout) adapter for tiny-h3 on two attention projections.
func tinyH3LoRA(t *testing.T, dir, name string, zeroUp bool) string {
	return testutil.WriteLoRA(t, dir, name, 5,
		testutil.LoRAModule{Module: "transformer_blocks.0.attn.to_q", In: 128, Out: 128, Rank: 4, PEFT: true, ZeroUp: zeroUp, Scale: 0.3},
		testutil.LoRAModule{Module: "transformer_blocks.1.attn.to_v", In: 128, Out: 128, Rank: 4, PEFT: true, ZeroUp: zeroUp, Scale: 0.3})
}

// TestLoRARandomWeights: adapters merge into random weights as they are drawn on the device (how the
// release-size runs take them): a zero up-projection leaves the latents bit-identical to the random
// model's, a real adapter changes them; tiny-wan and tiny-h3 alike.
func TestLoRARandomWeights(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []struct {
		name  string
		open  func(...Option) (*VideoGenerator, error)
		write func(*testing.T, string, string, bool) string
	}{{"tiny-wan", newTinyWan, tinyWanLoRA}, {"tiny-h3", newTiny, tinyH3LoRA}} {
		run := func(opts ...Option) Latents {
			g := openGenerator(t, m.open, append([]Option{WithMemoryPolicy(OneResident), WithRandomWeights(11)}, opts...)...)
			defer g.Close()
			return *latentsOnly(t, g, Request{Prompt: "a red fox", Seed: Ptr[int64](7)}).Latents
		}
		base := run()
		for _, zero := range []bool{true, false} {
			got := run(WithLoRA(m.write(t, dir, fmt.Sprintf("%s-%v.safetensors", m.name, zero), zero), 1))
			same := testutil.SameBits(got.Video, base.Video) && testutil.SameBits(got.Audio, base.Audio)
			if same != zero {
				t.Errorf("%s, zero up-projection %v: latents identical to the random model's: %v", m.name, zero, same)
			}
		}
	}
}

// TestBadLoRA: every bad adapter is invalid input for "lora" naming the file, from New, Plan and Validate
// alike, before anything loads.
func TestBadLoRA(t *testing.T) {
	dir := t.TempDir()
	notLoRA := testutil.WriteSafetensors(t, dir, "model.safetensors", []safetensors.Tensor{
		{Name: "blocks.0.self_attn.q.weight", DType: safetensors.F32, Shape: []int{2}, Data: safetensors.F32Bytes([]float32{1, 2})}}, nil)
	text := filepath.Join(dir, "notes.safetensors")
	if err := os.WriteFile(text, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	h3Adapter := testutil.WriteLoRA(t, dir, "h3.safetensors", 1,
		testutil.LoRAModule{Module: "transformer_blocks.0.attn.to_q", In: 64, Out: 64, Rank: 4, PEFT: true})
	rank := testutil.WriteLoRA(t, dir, "rank.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.self_attn.q", In: 64, Out: 64, Rank: 4, RankB: 3})
	nan := testutil.WriteLoRA(t, dir, "nan.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.self_attn.q", In: 64, Out: 64, Rank: 4, NaN: true})
	size := testutil.WriteLoRA(t, dir, "size.safetensors", 1, testutil.LoRAModule{Module: "blocks.0.self_attn.q", In: 1536, Out: 1536, Rank: 4})
	layer := testutil.WriteLoRA(t, dir, "layer.safetensors", 1, testutil.LoRAModule{Module: "blocks.7.self_attn.q", In: 64, Out: 64, Rank: 4})
	good := tinyWanLoRA(t, dir, "good.safetensors", false)
	for _, c := range []struct {
		name string
		opts []Option
		want string
	}{
		{"missing file", []Option{WithLoRA(filepath.Join(dir, "absent.safetensors"), 1)}, "absent.safetensors"},
		{"not a safetensors file", []Option{WithLoRA(text, 1)}, "notes.safetensors"},
		{"a checkpoint, not an adapter", []Option{WithLoRA(notLoRA, 1)}, "is not a LoRA tensor"},
		{"an H3 adapter on Wan", []Option{WithLoRA(h3Adapter, 1)}, "MiniMax H3 adapter"},
		{"rank mismatch", []Option{WithLoRA(rank, 1)}, "rank mismatch"},
		{"NaN", []Option{WithLoRA(nan, 1)}, "NaN"},
		{"another model size", []Option{WithLoRA(size, 1)}, "another size"},
		{"a layer the model lacks", []Option{WithLoRA(good, 1), WithLoRA(layer, 1)}, "blocks.7.attn1.to_q.weight"},
		{"NaN strength", []Option{WithLoRA(good, nanStrength())}, "finite strength"},
		{"empty path", []Option{WithLoRA("", 1)}, "path of a LoRA"},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				var re *RequestError
				if !errors.As(err, &re) || re.Field != "lora" || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v, want a lora RequestError mentioning %q", what, err, c.want)
				}
			}
			g, err := newTinyWan(c.opts...)
			if err == nil {
				g.Close()
			}
			check("New", err)
			_, err = Plan("tiny-wan", Request{}, c.opts...)
			check("Plan", err)
			check("Validate", Validate("tiny-wan", Request{Prompt: "a fox", SkipSave: true, ReturnLatents: true}, c.opts...))
		})
	}
}

func nanStrength() float64 {
	var zero float64
	return zero / zero
}
