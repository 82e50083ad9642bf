package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/gomlx/compute/dtypes/bfloat16"

	"fastvideo/dit/h3"
	"fastvideo/dit/wan"
	fvh3 "fastvideo/fastvideo/h3"
	fvwan "fastvideo/fastvideo/wan"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

var clipLoRARank = flag.Int("clip-lora-rank", 0, "clip: merge a random PEFT adapter of this rank into every attention and FFN linear of every DiT block "+
	"(LightX2V's Turbo layout for H3: 312 modules at rank 128), written to the bench's temp folder: the release-size LoRA row (0: none)")

// adapterModules are the block linears a whole-model adapter targets, by checkpoint weight name.
var adapterModules = map[string]*regexp.Regexp{
	fvh3.FamilyName:  regexp.MustCompile(`^(transformer_blocks|token_refiner\.refiner_blocks)\.\d+\.(attn\.to_[qkv]|attn\.to_out\.0|ff\.net\.0\.proj|ff\.net\.2)\.weight$`),
	fvwan.FamilyName: regexp.MustCompile(`^blocks\.\d+\.(attn[12]\.to_[qkv]|attn[12]\.to_out\.0|ffn\.net\.0\.proj|ffn\.net\.2)\.weight$`),
}

// randomAdapter writes a PEFT adapter (lora_A/lora_B, alpha = rank) of the given rank for every block
// linear of model's DiT into dir, drawn from seed in bf16 (A with the 1/√in scale of a trained down
// projection, B small), and returns its path and module count.
func randomAdapter(model string, rank int, dir string, seed uint64) (string, int, error) {
	table, family, err := ditTable(model)
	if err != nil {
		return "", 0, err
	}
	var list []safetensors.Tensor
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, p := range table {
		if !adapterModules[family].MatchString(p.Name) || len(p.Shape) != 2 {
			continue
		}
		out, in := p.Shape[0], p.Shape[1]
		module := p.Name[:len(p.Name)-len(".weight")]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			a := drawBF16(rng, rank*in, 1/math.Sqrt(float64(in)))
			b := drawBF16(rng, out*rank, 0.02/math.Sqrt(float64(rank)))
			mu.Lock()
			defer mu.Unlock()
			list = append(list,
				safetensors.Tensor{Name: module + ".lora_A.weight", DType: safetensors.BF16, Shape: []int{rank, in}, Data: a},
				safetensors.Tensor{Name: module + ".lora_B.weight", DType: safetensors.BF16, Shape: []int{out, rank}, Data: b})
		})
	}
	wg.Wait()
	if len(list) == 0 {
		return "", 0, fmt.Errorf("-clip-lora-rank: no block linears found in %s's DiT table", model)
	}
	path := filepath.Join(dir, fmt.Sprintf("random_r%d.safetensors", rank))
	return path, len(list) / 2, safetensors.WriteFile(path, list, nil)
}

// ditTable is the DiT parameter table of a built-in model, with its family's name.
func ditTable(model string) (weights.Shapes, string, error) {
	if m, ok := (fvh3.Family{}).Lookup(model); ok {
		t, err := h3.Params(m.(*fvh3.Spec).DiT)
		return t, fvh3.FamilyName, err
	}
	if m, ok := (fvwan.Family{}).Lookup(model); ok {
		t, err := wan.Params(m.(*fvwan.Spec).DiT)
		return t, fvwan.FamilyName, err
	}
	return nil, "", badFlag("-clip-lora-rank: %q is not a built-in H3 or Wan model", model)
}

func drawBF16(rng *rand.Rand, n int, std float64) []byte {
	out := make([]byte, 2*n)
	for i := range n {
		bits := bfloat16.FromFloat32(float32(std * rng.NormFloat64())).Bits()
		out[2*i], out[2*i+1] = byte(bits), byte(bits>>8)
	}
	return out
}
