package quant

import (
	"fmt"
	"strings"

	"fastvideo/internal/safetensors"
)

// Conversion collects the tensors and the manifest of a converted checkpoint.
// The model's converter decides which source tensor is quantized (Quantize),
// kept (Keep) or left out, and under which stored name.
type Conversion struct {
	scheme Scheme
	// scaleDType is the dtype of scales and biases; "" keeps each weight's own.
	scaleDType safetensors.DType
	tensors    []safetensors.Tensor
	manifest   *Manifest
}

// NewConversion starts a conversion with scheme; scaleDType is the dtype of
// scales and biases ("" keeps each weight's own dtype, as MLX does: BF16 for a
// BF16 source, F32 for F64 sources).
func NewConversion(scheme Scheme, scaleDType safetensors.DType) (*Conversion, error) {
	if err := scheme.Validate(); err != nil {
		return nil, err
	}
	if scaleDType != "" {
		if err := checkStore(scaleDType); err != nil {
			return nil, err
		}
	}
	return &Conversion{scheme: scheme, scaleDType: scaleDType, manifest: &Manifest{
		FormatVersion: FormatVersion,
		Quantization:  &QuantConfig{Mode: ModeAffine, Bits: scheme.Bits, GroupSize: scheme.GroupSize},
		QuantizedKeys: map[string]QuantizedKey{},
	}}, nil
}

// Quantize stores the float matrix info under the stored name: quantized,
// or dense when its input width is not a multiple of the group size (as MLX's
// nn.quantize class_predicate skips such layers, mlx/nn/layers/quantized.py),
// which the manifest records in DenseKeys. It reports whether the matrix was
// quantized.
func (c *Conversion) Quantize(stored string, info safetensors.Info) (bool, error) {
	if !info.DType.IsFloat() || len(info.Shape) != 2 {
		return false, fmt.Errorf("quant: %s: %w: a quantized weight must be a float matrix, got %s %v", stored, ErrShape, info.DType, info.Shape)
	}
	if !c.scheme.Fits(info.Shape[1]) {
		c.Keep(stored, info)
		if c.manifest.DenseKeys == nil {
			c.manifest.DenseKeys = map[string]string{}
		}
		c.manifest.DenseKeys[stored] = fmt.Sprintf("input width %d is not a multiple of the group size %d", info.Shape[1], c.scheme.GroupSize)
		return false, nil
	}
	store := c.scaleDType
	if store == "" {
		store = info.DType
		if store == safetensors.F64 {
			store = safetensors.F32
		}
	}
	w, err := info.Float32s()
	if err != nil {
		return false, fmt.Errorf("quant: %s: %w", stored, err)
	}
	a, err := Quantize(w, info.Shape[0], info.Shape[1], c.scheme.Bits, c.scheme.GroupSize, store)
	if err != nil {
		return false, fmt.Errorf("quant: %s: %w", stored, err)
	}
	c.tensors = append(c.tensors, a.Tensors(stored)...)
	c.manifest.QuantizedKeys[stored] = QuantizedKey{DequantizedDType: dtypeTag(info.DType), HasBiases: true}
	return true, nil
}

// Keep stores info unchanged under the stored name; the data aliases info's.
func (c *Conversion) Keep(stored string, info safetensors.Info) {
	c.tensors = append(c.tensors, safetensors.Tensor{Name: stored, DType: info.DType, Shape: info.Shape, Data: info.Data})
}

// Add stores tensors the model computed (names are stored names).
func (c *Conversion) Add(ts ...safetensors.Tensor) { c.tensors = append(c.tensors, ts...) }

// Result returns the tensors and the manifest (Metadata unset). The quantized
// data is held in memory; kept tensors alias their sources, which must stay
// open until the tensors are written.
func (c *Conversion) Result() ([]safetensors.Tensor, *Manifest) { return c.tensors, c.manifest }

// dtypeTag is the manifest's name of a dtype (the MLX runtime's names).
func dtypeTag(dt safetensors.DType) string {
	switch dt {
	case safetensors.BF16:
		return "bf16"
	case safetensors.F16:
		return "fp16"
	case safetensors.F32, safetensors.F64: // F64 sources are stored with F32 scales
		return "fp32"
	}
	return strings.ToLower(string(dt))
}
