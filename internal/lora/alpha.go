package lora

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
)

// defaultAlpha is the AlphaFrom of a module whose file states no alpha.
const defaultAlpha = "default (alpha = rank)"

// MetadataKey is the safetensors header entry in which diffusers saves the PEFT LoraConfig
// (diffusers loaders/lora_base.py LORA_ADAPTER_METADATA_KEY).
const MetadataKey = "lora_adapter_metadata"

// metadata is the part of a saved LoraConfig that sets alphas.
type metadata struct {
	alpha    float64 // 0: none
	patterns []alphaPattern
}

type alphaPattern struct {
	key   string
	re    *regexp.Regexp
	alpha float64
}

// parseMetadata reads lora_adapter_metadata: {"lora_alpha": a, "alpha_pattern": {...}, ...}, its
// fields optionally prefixed by the pipeline component ("transformer.lora_alpha"). use_dora and
// use_rslora, which change the math, are refused.
func parseMetadata(header map[string]string) (metadata, error) {
	raw, ok := header[MetadataKey]
	if !ok {
		return metadata{}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		return metadata{}, fmt.Errorf("header metadata %q is not a JSON object (%v); remove it to use alpha = rank, or re-save the adapter", MetadataKey, err)
	}
	var m metadata
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if err := m.field(k, fields[k]); err != nil {
			return metadata{}, err
		}
	}
	return m, nil
}

func (m *metadata) field(key string, val json.RawMessage) error {
	name := key
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		// A pipeline save prefixes each field by its component; only the denoiser's apply here.
		if comp := key[:i]; comp != "transformer" && comp != "transformer_2" {
			return nil
		}
		name = key[i+1:]
	}
	bad := func(what string) error {
		return fmt.Errorf("header metadata %q field %q = %s: %s", MetadataKey, key, string(val), what)
	}
	switch name {
	case "lora_alpha":
		var a float64
		if err := json.Unmarshal(val, &a); err != nil || !(a > 0) || math.IsInf(a, 0) {
			return bad("lora_alpha must be a finite positive number; fix the value or remove the field to use alpha = rank")
		}
		m.alpha = a
	case "alpha_pattern":
		var pats map[string]float64
		if err := json.Unmarshal(val, &pats); err != nil {
			return bad("alpha_pattern must map module names to numbers")
		}
		return m.addPatterns(key, pats)
	case "use_dora", "use_rslora":
		var on bool
		if err := json.Unmarshal(val, &on); err == nil && on {
			return bad("this variant changes the LoRA math and is not supported; export the adapter as plain LoRA")
		}
	}
	return nil
}

// addPatterns compiles PEFT's alpha_pattern keys, read as regular expressions (peft utils/other.py
// get_pattern_key: re.match(rf"(.*\.)?({key})$", module)). The first match wins, in sorted key order: the
// order of diffusers' saved JSON (sort_keys=True).
func (m *metadata) addPatterns(field string, pats map[string]float64) error {
	for _, k := range slices.Sorted(maps.Keys(pats)) {
		a := pats[k]
		if !(a > 0) || math.IsInf(a, 0) {
			return fmt.Errorf("header metadata %q field %q: alpha %v of %q must be a finite positive number", MetadataKey, field, a, k)
		}
		// PEFT: a key matches a module named by it or ending in "."+key; "^key" anchors it at the start.
		pattern := `^(?:.*\.)?(?:` + k + `)$`
		if rest, ok := strings.CutPrefix(k, "^"); ok {
			pattern = `^(?:` + rest + `)$`
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return fmt.Errorf("header metadata %q field %q: pattern %q is not a valid regular expression (%v)", MetadataKey, field, k, err)
		}
		m.patterns = append(m.patterns, alphaPattern{key: k, re: re, alpha: a})
	}
	return nil
}

// settleAlpha picks the module's alpha: its own .alpha/.lora_alpha key, else the metadata's
// alpha_pattern then lora_alpha, else alpha = rank. The value is kept exact (no int()).
func (u *Update) settleAlpha(meta metadata) error {
	if u.alphaKey != nil && u.loraAlphaK != nil {
		return fmt.Errorf("keys %q and %q both give module %q's alpha; remove one", u.alphaKey.Name, u.loraAlphaK.Name, u.Module)
	}
	key := u.alphaKey
	if key == nil {
		key = u.loraAlphaK
	}
	if key != nil {
		a, err := finiteScalar(key)
		if err != nil {
			return err
		}
		if !(a > 0) {
			return fmt.Errorf("key %q is %v; an alpha must be positive (the scale is alpha/rank): fix the value or remove the key to use alpha = rank", key.Name, a)
		}
		u.Alpha, u.AlphaFrom = a, key.Name
		return nil
	}
	for _, p := range meta.patterns {
		if p.re.MatchString(u.Module) {
			u.Alpha, u.AlphaFrom = p.alpha, MetadataKey+" alpha_pattern "+p.key
			return nil
		}
	}
	if meta.alpha > 0 {
		u.Alpha, u.AlphaFrom = meta.alpha, MetadataKey+" lora_alpha"
		return nil
	}
	u.Alpha, u.AlphaFrom = float64(u.Rank), defaultAlpha
	return nil
}
