package api

import (
	"fmt"
	"strings"
)

// LoRA is one adapter a generator merges into its DiT's weights when the DiT loads (fastvideo.WithLoRA).
// Adapters are merged at load, before any quantization, FP8 conversion or AdaLN step cache, so they
// belong to the generator, not to a request: a different set needs another generator.
type LoRA struct {
	// Path is the adapter's safetensors file.
	Path string `json:"path"`
	// Strength scales the adapter: W += Strength·(alpha/rank)·B·A (1 applies it as trained, 0 turns it off).
	Strength float64 `json:"strength"`
}

// PlanLoRA is what one adapter changes in the DiT (Plan.LoRA), found from the weights' headers and the
// adapter's without loading either.
type PlanLoRA struct {
	Path     string  `json:"path"`
	Strength float64 `json:"strength"`
	// Modules are the adapter's modules applied; Tensors the checkpoint tensors they change.
	Modules int `json:"modules"`
	Tensors int `json:"tensors"`
	// Skipped are the adapter's modules for optional layers the checkpoint lacks (an I2V adapter's image
	// cross-attention on a T2V model), left out.
	Skipped []string `json:"skipped,omitempty"`
}

// LoRARows writes the plan table's adapter rows (nothing without adapters).
func LoRARows(row func(key, format string, a ...any), loras []PlanLoRA) {
	for i, l := range loras {
		skipped := ""
		if len(l.Skipped) > 0 {
			skipped = fmt.Sprintf("; skipped (layers this checkpoint lacks): %s", strings.Join(l.Skipped, ", "))
		}
		row(fmt.Sprintf("lora %d", i+1), "%s at strength %g: %d modules, %d tensors merged at load%s", l.Path, l.Strength, l.Modules, l.Tensors, skipped)
	}
}
