// Package blockfp8 reads serialized block-FP8 checkpoints: linear weights stored as float8_e4m3fn
// with one float32 scale per 128x128 block beside them (`<name>.weight` and
// `<name>.weight_scale_inv`), the format of MiniMax H3's FP8 text encoder
// (fastvideo/models/encoders/minimax_h3_checkpoint_fp8.py, MiniMaxH3SerializedFP8Config and
// MiniMaxH3SerializedFP8LinearMethod). Upstream runs the FP8 weights in FlashInfer's groupwise GEMM,
// which computes Σ q_x·q_w · s_x·s_w: the weight a block stands for is its decoded value times the
// block's weight_scale_inv. Wrap presents such a checkpoint as a dense one, dequantizing each weight
// on the host in float32 when it is loaded; every scale is checked when the wrapper is built, so a
// broken checkpoint fails before any layer runs.
package blockfp8

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// ScaleSuffix names a weight's block scales: `<weight name>` + ScaleSuffix.
const ScaleSuffix = "_scale_inv"

// Errors a checkpoint can fail with, wrapped with the tensor or field at fault.
var (
	// ErrConfig is a quantization_config this runtime does not run.
	ErrConfig = errors.New("blockfp8: unsupported quantization_config")
	// ErrMissingScale is an F8_E4M3 weight without its weight_scale_inv.
	ErrMissingScale = errors.New("blockfp8: FP8 weight without block scales")
	// ErrOrphanScale is a weight_scale_inv whose weight is absent or not F8_E4M3.
	ErrOrphanScale = errors.New("blockfp8: block scales without an FP8 weight")
	// ErrWeightShape is an FP8 weight that is not a matrix of whole blocks.
	ErrWeightShape = errors.New("blockfp8: FP8 weight shape")
	// ErrScale is a scale tensor of the wrong dtype or shape, or with a value that is not finite
	// and positive.
	ErrScale = errors.New("blockfp8: bad block scales")
)

// Block is the weight block [output rows, input columns] one scale covers; the zero value means
// the checkpoint is not block-FP8.
type Block struct{ Rows, Cols int }

// Enabled reports whether b describes a block-FP8 checkpoint.
func (b Block) Enabled() bool { return b.Rows > 0 && b.Cols > 0 }

// H3Block is the only block MiniMax H3 accepts (weight_block_size [128, 128]).
var H3Block = Block{128, 128}

type rawConfig struct {
	QuantMethod         string            `json:"quant_method"`
	ActivationScheme    string            `json:"activation_scheme"`
	Fmt                 *string           `json:"fmt"`
	WeightBlockSize     []int             `json:"weight_block_size"`
	ModulesToNotConvert []json.RawMessage `json:"modules_to_not_convert"`
	IgnoredLayers       []json.RawMessage `json:"ignored_layers"`
}

// ParseH3Config reads a config.json's quantization_config with the checks of upstream's
// MiniMaxH3SerializedFP8Config.from_config: quant_method "fp8", dynamic activations, E4M3 weights,
// weight_block_size [128, 128], the vision stack listed in modules_to_not_convert (or
// ignored_layers) and no language layer left out.
func ParseH3Config(raw json.RawMessage) (Block, error) {
	var c rawConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return Block{}, fmt.Errorf("%w: not an object with the expected fields: %v", ErrConfig, err)
	}
	if m := strings.ToLower(c.QuantMethod); m != "fp8" {
		return Block{}, fmt.Errorf("%w: quant_method = %q; only serialized \"fp8\" text-encoder checkpoints are supported", ErrConfig, c.QuantMethod)
	}
	if strings.ToLower(c.ActivationScheme) != "dynamic" {
		return Block{}, fmt.Errorf("%w: activation_scheme = %q; block FP8 requires \"dynamic\" activation quantization", ErrConfig, c.ActivationScheme)
	}
	if c.Fmt != nil && strings.ToLower(*c.Fmt) != "e4m3" && strings.ToLower(*c.Fmt) != "float8_e4m3fn" {
		return Block{}, fmt.Errorf("%w: fmt = %q; block FP8 requires E4M3 weights (\"e4m3\")", ErrConfig, *c.Fmt)
	}
	if !slices.Equal(c.WeightBlockSize, []int{H3Block.Rows, H3Block.Cols}) {
		return Block{}, fmt.Errorf("%w: weight_block_size = %v; MiniMax H3 requires weight_block_size=[128, 128]", ErrConfig, c.WeightBlockSize)
	}
	ignored := c.ModulesToNotConvert
	if ignored == nil {
		ignored = c.IgnoredLayers
	}
	visual := false
	for _, r := range ignored {
		var name string
		if json.Unmarshal(r, &name) != nil {
			continue // upstream skips entries that are not strings
		}
		if strings.HasPrefix(name, "language_model.") || strings.Contains(name, ".language_model.") {
			return Block{}, fmt.Errorf("%w: modules_to_not_convert lists the language layer %q; partially quantized language stacks are not supported", ErrConfig, name)
		}
		visual = visual || strings.Contains(name, "visual")
	}
	if !visual {
		return Block{}, fmt.Errorf("%w: modules_to_not_convert must list the vision stack (e.g. \"model.visual\"): it stays unquantized", ErrConfig)
	}
	return H3Block, nil
}

// Source is a checkpoint whose FP8 weights read as float32: it hides the scale tensors and
// dequantizes a weight each time it is asked for (weights.HeaderSource, so that header checks
// compute nothing).
type Source struct {
	inner  weights.Source
	block  Block
	scales map[string]safetensors.Info // by weight name
	names  []string
}

// Wrap checks every FP8 weight of src and its scales (dtype, block grid, finite positive values)
// and returns the dequantizing view. A checkpoint without any FP8 weight is refused: it was
// declared block-FP8 and is not.
func Wrap(src weights.Source, block Block) (*Source, error) {
	if !block.Enabled() {
		return nil, fmt.Errorf("%w: block %dx%d", ErrConfig, block.Rows, block.Cols)
	}
	s := &Source{inner: src, block: block, scales: map[string]safetensors.Info{}}
	for _, name := range src.Names() {
		info, _ := src.Tensor(name)
		if base, ok := strings.CutSuffix(name, ScaleSuffix); ok {
			w, found := src.Tensor(base)
			if !found || w.DType != safetensors.F8E4M3 {
				return nil, fmt.Errorf("%w: %s has no F8_E4M3 %s beside it", ErrOrphanScale, name, base)
			}
			continue
		}
		s.names = append(s.names, name)
		if info.DType != safetensors.F8E4M3 {
			continue
		}
		scale, ok := src.Tensor(name + ScaleSuffix)
		if !ok {
			return nil, fmt.Errorf("%w: %s %v is F8_E4M3 but %s is missing", ErrMissingScale, name, info.Shape, name+ScaleSuffix)
		}
		if err := block.check(info, scale); err != nil {
			return nil, err
		}
		s.scales[name] = scale
	}
	if len(s.scales) == 0 {
		return nil, fmt.Errorf("%w: the checkpoint declares block FP8 but holds no F8_E4M3 weight", ErrConfig)
	}
	return s, nil
}

// check validates one weight and its scales as upstream's process_weights_after_loading does.
func (b Block) check(w, scale safetensors.Info) error {
	if len(w.Shape) != 2 || w.Shape[0]%b.Rows != 0 || w.Shape[1]%b.Cols != 0 {
		return fmt.Errorf("%w: %s is %v; FP8 weights must be matrices of whole %dx%d blocks", ErrWeightShape, w.Name, w.Shape, b.Rows, b.Cols)
	}
	want := []int{w.Shape[0] / b.Rows, w.Shape[1] / b.Cols}
	if scale.DType != safetensors.F32 {
		return fmt.Errorf("%w: %s is %s; block scales must be F32", ErrScale, scale.Name, scale.DType)
	}
	if !slices.Equal(scale.Shape, want) {
		return fmt.Errorf("%w: %s is %v; %s %v needs one scale per %dx%d block, %v", ErrScale, scale.Name, scale.Shape, w.Name, w.Shape, b.Rows, b.Cols, want)
	}
	vals, err := scale.Float32s()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrScale, err)
	}
	for i, v := range vals {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: %s[%d, %d] = %g; block scales must be finite and positive", ErrScale, scale.Name, i/want[1], i%want[1], v)
		}
	}
	return nil
}

// Quantized reports whether name is an FP8 weight of the checkpoint.
func (s *Source) Quantized(name string) bool {
	_, ok := s.scales[name]
	return ok
}

// Names lists the checkpoint's tensors without the scale tensors.
func (s *Source) Names() []string { return slices.Clone(s.names) }

// Header describes a tensor; FP8 weights are described as the F32 tensors Tensor returns.
func (s *Source) Header(name string) (safetensors.Info, bool) {
	if _, q := s.scales[name]; !q {
		return weights.HeaderOf(s.inner, name)
	}
	info, _ := s.inner.Tensor(name)
	return safetensors.Info{Name: name, DType: safetensors.F32, Shape: slices.Clone(info.Shape)}, true
}

// Tensor returns a tensor; an FP8 weight comes back dequantized, as F32.
func (s *Source) Tensor(name string) (safetensors.Info, bool) {
	scale, q := s.scales[name]
	if !q {
		return s.inner.Tensor(name)
	}
	info, _ := s.inner.Tensor(name)
	vals, err := Dequantize(info, scale, s.block)
	if err != nil {
		return safetensors.Info{}, false // unreachable: Wrap checked both tensors
	}
	return safetensors.Info{Name: name, DType: safetensors.F32, Shape: slices.Clone(info.Shape), Data: safetensors.F32Bytes(vals)}, true
}

// Dequantize is the weight an FP8 matrix and its block scales stand for: decode(q[r, c]) ·
// scale[r / block.Rows, c / block.Cols], one float32 product per value.
func Dequantize(w, scale safetensors.Info, block Block) ([]float32, error) {
	if err := block.check(w, scale); err != nil {
		return nil, err
	}
	q, err := w.Float32s()
	if err != nil {
		return nil, err
	}
	s, err := scale.Float32s()
	if err != nil {
		return nil, err
	}
	cols := w.Shape[1]
	blocksPerRow := cols / block.Cols
	for i := range q {
		r, c := i/cols, i%cols
		q[i] *= s[(r/block.Rows)*blocksPerRow+c/block.Cols]
	}
	return q, nil
}
