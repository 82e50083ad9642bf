package lora

import (
	"fmt"
	"strings"
)

// role is what one file key contributes to its module's update.
type role int

const (
	roleA         role = iota + 1 // down-projection [r, in]
	roleB                         // up-projection [out, r]
	roleLoRABias                  // lora_B.bias: scaled like the low-rank product
	roleAlpha                     // scalar .alpha (kohya, ComfyUI, musubi)
	roleLoRAAlpha                 // scalar .lora_alpha (FastVideo's extractor)
	roleRank                      // scalar .lora_rank (FastVideo's extractor)
	roleDiff                      // dense weight delta
	roleDiffBias                  // dense bias delta
	roleSet                       // replacement weight
)

func (r role) String() string {
	return [...]string{"?", "lora_A/lora_down", "lora_B/lora_up", "lora_B.bias", "alpha", "lora_alpha",
		"lora_rank", "diff", "diff_b", "set_weight"}[r]
}

// prefixes are cut from the front of every key, repeatedly (base_model.model.transformer.… is common).
var prefixes = []string{"base_model.model.", "diffusion_model.", "transformer.", "model.diffusion_model."}

// musubiPrefix marks musubi-tuner / kohya names: the module path is written with '_' for '.'.
const musubiPrefix = "lora_unet_"

// suffixes maps a key's tail onto its role. Longer tails come first where one ends another.
var suffixes = []struct {
	tail string
	role role
}{
	{".lora_A.weight", roleA}, {".lora_down.weight", roleA},
	{".lora_B.weight", roleB}, {".lora_up.weight", roleB},
	{".lora_B.bias", roleLoRABias},
	{".lora_alpha", roleLoRAAlpha}, {".lora_rank", roleRank}, {".alpha", roleAlpha},
	{".diff_b", roleDiffBias}, {".diff_m", roleDiff}, {".diff", roleDiff},
	{".set_weight", roleSet},
}

// parsedKey is one file key split into its normalized module name and role.
type parsedKey struct {
	key     string // as in the file
	module  string // normalized
	role    role
	adapter string // PEFT adapter name of .lora_A.<adapter>.weight ("" when absent)
	musubi  bool
}

// parseKey normalizes one key: it cuts the known prefixes, the PEFT adapter name and the role
// suffix. `<block>.diff_m` (LightX2V's modulation delta) targets `<block>.modulation`.
func parseKey(key string) (parsedKey, error) {
	p := parsedKey{key: key}
	name := key
	for cut := true; cut; {
		cut = false
		for _, pre := range prefixes {
			if rest, ok := strings.CutPrefix(name, pre); ok {
				name, cut = rest, true
			}
		}
	}
	if rest, ok := strings.CutPrefix(name, musubiPrefix); ok {
		name, p.musubi = rest, true
	}
	name, p.adapter = cutAdapterName(name)
	for _, s := range suffixes {
		if mod, ok := strings.CutSuffix(name, s.tail); ok && mod != "" {
			p.module, p.role = mod, s.role
			if s.tail == ".diff_m" {
				p.module += ".modulation"
			}
			return p, validModule(p)
		}
	}
	return p, unknownKeyError(key)
}

// cutAdapterName turns `m.lora_A.<adapter>.weight` (PEFT's in-memory naming, kept by some savers) into
// `m.lora_A.weight` and returns the adapter name.
func cutAdapterName(name string) (string, string) {
	for _, f := range []string{".lora_A.", ".lora_B."} {
		i := strings.LastIndex(name, f)
		if i < 0 {
			continue
		}
		tail := name[i+len(f):]
		j := strings.LastIndexByte(tail, '.')
		if j <= 0 {
			continue
		}
		adapter, leaf := tail[:j], tail[j+1:]
		if (leaf == "weight" || leaf == "bias") && !strings.Contains(adapter, ".") {
			return name[:i+len(f)] + leaf, adapter
		}
	}
	return name, ""
}

func validModule(p parsedKey) error {
	if strings.HasPrefix(p.module, ".") || strings.HasSuffix(p.module, ".") || strings.Contains(p.module, "..") {
		return fmt.Errorf("key %q: module name %q is malformed (empty path component); the file is corrupt or not a LoRA adapter", p.key, p.module)
	}
	return nil
}

func unknownKeyError(key string) error {
	switch {
	case strings.HasSuffix(key, ".dora_scale") || strings.Contains(key, "lora_magnitude_vector"):
		return fmt.Errorf("key %q: DoRA adapters (magnitude vectors) are not supported; use a plain LoRA export of the adapter", key)
	case strings.Contains(key, ".hada_") || strings.Contains(key, ".lokr_") || strings.Contains(key, ".oft_"):
		return fmt.Errorf("key %q: LyCORIS (LoHa/LoKr/OFT) adapters are not supported; convert the adapter to plain LoRA (lora_down/lora_up) first", key)
	}
	return fmt.Errorf("key %q is not a LoRA tensor: expected a name ending in .lora_A.weight/.lora_B.weight, .lora_down.weight/.lora_up.weight, .alpha, .lora_alpha, .lora_rank, .lora_B.bias, .diff, .diff_b, .diff_m or .set_weight; is this file a LoRA adapter?", key)
}
