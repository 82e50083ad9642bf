package familykit

import (
	"fmt"
	"math"
	"strings"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
)

// OrPreset is a request field, or the preset's value when the field is left at zero (unset).
func OrPreset[T comparable](requested, preset T) T {
	var unset T
	if requested != unset {
		return requested
	}
	return preset
}

// SizeRule is what a model accepts as an output size: multiples of Multiple (per axis), at most
// MaxSide pixels a side.
type SizeRule struct {
	HeightMultiple, WidthMultiple int
	MaxSide                       int
	// Why explains the multiple, e.g. "the VAE's 16x compression times the DiT's 2x2 patch".
	Why string
}

// ResolveSize applies "both or neither" to the requested size, falls back to the preset's and
// checks the rule. Values beyond the bound are reported without arithmetic on them, so a huge
// value can never overflow into a misleading hint.
func ResolveSize(req api.Request, preset family.Preset, rule SizeRule) (h, w int, err error) {
	switch {
	case req.Height == 0 && req.Width != 0:
		return 0, 0, &api.RequestError{Field: "height", Value: req.Height, Allowed: "a value together with width (pass both or neither)"}
	case req.Width == 0 && req.Height != 0:
		return 0, 0, &api.RequestError{Field: "width", Value: req.Width, Allowed: "a value together with height (pass both or neither)"}
	}
	h, w = req.Height, req.Width
	if h == 0 {
		h, w = preset.Height, preset.Width
	}
	if err := rule.check("height", h, rule.HeightMultiple); err != nil {
		return 0, 0, err
	}
	if err := rule.check("width", w, rule.WidthMultiple); err != nil {
		return 0, 0, err
	}
	return h, w, nil
}

func (rule SizeRule) check(field string, v, multiple int) error {
	allowed := fmt.Sprintf("a positive multiple of %d up to %d", multiple, rule.MaxSide)
	if rule.Why != "" {
		allowed += " (" + rule.Why + ")"
	}
	if v <= 0 || v > rule.MaxSide {
		return &api.RequestError{Field: field, Value: v, Allowed: allowed}
	}
	if v%multiple != 0 {
		return &api.RequestError{Field: field, Value: v, Allowed: allowed + NearestMultiple(v, multiple)}
	}
	return nil
}

// NearestMultiple suggests the multiples of m around v (v within int range and positive).
func NearestMultiple(v, m int) string {
	lo := v / m * m
	if lo <= 0 {
		return fmt.Sprintf(" (e.g. %d)", m)
	}
	return fmt.Sprintf(" (e.g. %d or %d)", lo, lo+m)
}

// CheckNoise validates injected noise: nil (draw from the seed) or exactly n finite values.
func CheckNoise(field string, v []float32, n int, layout string) error {
	if v == nil {
		return nil
	}
	if len(v) != n {
		return &api.RequestError{Field: field, Value: fmt.Sprintf("%d values", len(v)),
			Allowed: fmt.Sprintf("nil (noise from the seed) or %d float32 values in the layout %s", n, layout)}
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return &api.RequestError{Field: field, Value: fmt.Sprintf("%v at index %d", x, i), Allowed: "finite values"}
		}
	}
	return nil
}

// Floats formats a ladder for a table: the first 12 values, then the count.
func Floats(v []float32) string {
	const shown = 12
	var b strings.Builder
	for i, x := range v {
		if i == shown {
			fmt.Fprintf(&b, " ... (%d values)", len(v))
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.7g", x)
	}
	return b.String()
}

// WeightBytes sizes weights kept half in float32 and half in the compute dtype: bf16 keeps the
// release's mixed precision, f32 stores everything in float32.
func WeightBytes(fp32, half int64, dtype api.DType) (int64, error) {
	switch dtype {
	case api.BF16:
		return 4*fp32 + 2*half, nil
	case api.F32:
		return 4 * (fp32 + half), nil
	}
	return 0, &api.RequestError{Field: "dtype", Value: string(dtype), Allowed: `"bf16" or "f32"`}
}

// RefineKnob names the first two-stage refine field req sets (Refine, then its knobs) with its
// value, or "" when none is set: families without refine refuse it by this name, and the knobs
// need Refine.
func RefineKnob(req api.Request) (field string, value any) {
	switch {
	case req.Refine:
		return "refine", true
	case req.RefineScale != 0:
		return "refine_scale", req.RefineScale
	case req.RefineSteps != nil:
		return "refine_steps", req.RefineSteps
	case req.RefineSigma != nil:
		return "refine_sigma", *req.RefineSigma
	case req.RefineAddNoise != nil:
		return "refine_add_noise", *req.RefineAddNoise
	case req.RefineUpsample != "":
		return "refine_upsample", req.RefineUpsample
	}
	return "", nil
}

// RefineModels lists the models two-stage refine runs on, for messages.
const RefineModels = "the Wan DMD students (FastWan2.1-T2V-1.3B, FastWan2.1-T2V-14B-480P, FastWan2.2-TI2V-5B and tiny-wan's DMD preset)"
