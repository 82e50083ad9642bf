package quant

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"fastvideo/internal/safetensors"
)

// Conversion collects the tensors and the manifest of a converted checkpoint.
// The model's converter decides which source tensor is quantized (Quantize),
// kept (Keep) or left out, and under which stored name.
type Conversion struct {
	scheme Scheme
	// float is the block-scaled float format of a float-mode conversion (nil: affine).
	float *FloatMode
	// globalScale gives every nvfp4 matrix the global scale max|w| (as MLX's tests pass it).
	globalScale bool
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

// NewFloatConversion starts a conversion to a block-scaled float mode (ModeMXFP8, ModeMXFP4,
// ModeNVFP4), quantized as MLX's fp_quantize (QuantizeFloat) and written as
// fastvideo/mlx_runtime/checkpoint.py writes it: the packed words and U8 scales, no biases, bits and
// group_size null. globalScale (nvfp4 only) gives each matrix the global scale max|w|, recorded in
// its quantized_keys entry.
func NewFloatConversion(mode string, globalScale bool) (*Conversion, error) {
	m, ok := LookupFloatMode(mode)
	if !ok {
		return nil, fmt.Errorf("%w: float mode %q; use %s, %s or %s", ErrManifest, mode, ModeMXFP8, ModeMXFP4, ModeNVFP4)
	}
	if globalScale && mode != ModeNVFP4 {
		return nil, fmt.Errorf("%w: a global scale is only defined for %s, not %s", ErrManifest, ModeNVFP4, mode)
	}
	return &Conversion{float: &m, globalScale: globalScale, manifest: &Manifest{
		FormatVersion: FormatVersion,
		Quantization:  &QuantConfig{Mode: mode},
		QuantizedKeys: map[string]QuantizedKey{},
	}}, nil
}

// fits reports whether a matrix of input width cols can be quantized, and if not why.
func (c *Conversion) fits(cols int) (bool, string) {
	if c.float != nil {
		return c.float.Fits(cols), fmt.Sprintf("input width %d is not a multiple of the %s group size %d", cols, c.float.Name, c.float.Group)
	}
	return c.scheme.Fits(cols), fmt.Sprintf("input width %d is not a multiple of the group size %d", cols, c.scheme.GroupSize)
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
	if ok, why := c.fits(info.Shape[1]); !ok {
		c.Keep(stored, info)
		if c.manifest.DenseKeys == nil {
			c.manifest.DenseKeys = map[string]string{}
		}
		c.manifest.DenseKeys[stored] = why
		return false, nil
	}
	if c.float != nil {
		return true, c.quantizeFloat(stored, info)
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
	ts, err := a.Tensors(stored)
	if err != nil {
		return false, fmt.Errorf("quant: %s: %w", stored, err)
	}
	c.tensors = append(c.tensors, ts...)
	c.manifest.QuantizedKeys[stored] = QuantizedKey{DequantizedDType: dtypeTag(info.DType), HasBiases: true}
	return true, nil
}

// quantizeFloat stores info in the conversion's float mode.
func (c *Conversion) quantizeFloat(stored string, info safetensors.Info) error {
	w, err := info.Float32s()
	if err != nil {
		return fmt.Errorf("quant: %s: %w", stored, err)
	}
	var global float32
	key := QuantizedKey{DequantizedDType: dtypeTag(info.DType)}
	if c.globalScale {
		for _, v := range w {
			global = max(global, float32(math.Abs(float64(v))))
		}
		if global > 0 && !math.IsInf(float64(global), 0) {
			key.GlobalScale = json.RawMessage(strconv.FormatFloat(float64(global), 'g', -1, 32))
		} else {
			global = 0 // an all-zero matrix has no scale to spread
		}
	}
	rows, cols := info.Shape[0], info.Shape[1]
	words, scales, err := QuantizeFloat(*c.float, w, rows, cols, global)
	if err != nil {
		return fmt.Errorf("quant: %s: %w", stored, err)
	}
	c.tensors = append(c.tensors,
		safetensors.Tensor{Name: stored, DType: safetensors.U32, Shape: []int{rows, cols * c.float.Bits / 32}, Data: words},
		safetensors.Tensor{Name: stored + ScalesSuffix, DType: safetensors.U8, Shape: []int{rows, cols / c.float.Group}, Data: scales})
	c.manifest.QuantizedKeys[stored] = key
	return nil
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
