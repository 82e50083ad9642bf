package quant

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// QuantizedSuffixes are the H3 weights MLX quantizes, in the main and the
// refiner blocks (names relative to a block).
var QuantizedSuffixes = []string{
	"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight",
	"ff.net.0.proj.weight", "ff.net.2.weight",
}

// GateSuffix is the FastH3 VSA gate matrix, kept (and quantized) only with
// ConvertOptions.IncludeVSA.
const GateSuffix = "attn.to_gate_compress.weight"

// AdaLNCachePrefix starts the names of the AdaLN cache tensors.
const AdaLNCachePrefix = "__adaln_cache."

// ConvertOptions configure Convert.
type ConvertOptions struct {
	Scheme Scheme
	// ScaleDType is the dtype of scales and biases; "" keeps each weight's own
	// dtype (BF16 for the release, as MLX does; F64 sources give F32).
	ScaleDType safetensors.DType
	// IncludeVSA keeps the FastH3 gate matrices (quantized); otherwise they are
	// dropped, as the dense forward does not use them.
	IncludeVSA bool
	// AdaLN, with AdaLNTensors (names starting with "__adaln_cache."), embeds a
	// precomputed AdaLN cache; the AdaLN projections (adaln_proj.linear.*,
	// norm_out.linear.*, adaln_basis.*) are then left out. Without it they are
	// kept, so the converted model can serve any ladder.
	AdaLN        *AdaLNCache
	AdaLNTensors []safetensors.Tensor
	// Progress, if set, is called after each source tensor.
	Progress func(done, total int, name string)
}

// isQuantizedKey reports whether a released name is quantized under opts.
func isQuantizedKey(name string, includeVSA bool) bool {
	for _, s := range QuantizedSuffixes {
		if strings.HasSuffix(name, "."+s) {
			return true
		}
	}
	return includeVSA && strings.HasSuffix(name, "."+GateSuffix)
}

// isAdaLNProjection reports whether a released name belongs to the AdaLN
// projections an AdaLN cache replaces.
func isAdaLNProjection(name string) bool {
	if strings.HasPrefix(name, "norm_out.linear.") || strings.HasPrefix(name, "adaln_basis.") {
		return true
	}
	return strings.HasPrefix(name, "transformer_blocks.") && strings.Contains(name, ".adaln_proj.")
}

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

// Convert turns a released H3 transformer (src under the released names, the
// config.json object) into the tensors and manifest of the MLX converted
// format: names renamed (MLXName), the block and refiner linears quantized,
// everything else kept in its dtype. The quantized data is held in memory;
// the other tensors alias src, which must stay open until they are written.
func Convert(src weights.Source, config json.RawMessage, opts ConvertOptions) ([]safetensors.Tensor, *Manifest, error) {
	if err := opts.Scheme.Validate(); err != nil {
		return nil, nil, err
	}
	if opts.ScaleDType != "" {
		if err := checkStore(opts.ScaleDType); err != nil {
			return nil, nil, err
		}
	}
	if !json.Valid(config) {
		return nil, nil, fmt.Errorf("%w: the transformer config is not valid JSON", ErrManifest)
	}
	names := src.Names()
	sort.Strings(names)
	blocks, refiners := countIndexed(names, "transformer_blocks."), countIndexed(names, "token_refiner.refiner_blocks.")
	if blocks == 0 {
		return nil, nil, fmt.Errorf("quant: the source has no transformer_blocks.* tensors: not an H3 transformer checkpoint")
	}
	m := &Manifest{
		FormatVersion: FormatVersion, Config: config, NumBlocks: blocks, NumRefinerBlocks: refiners,
		Quantization:  &QuantConfig{Mode: ModeAffine, Bits: opts.Scheme.Bits, GroupSize: opts.Scheme.GroupSize},
		QuantizedKeys: map[string]QuantizedKey{},
	}
	if opts.AdaLN != nil {
		if err := checkAdaLNTensors(opts.AdaLN, opts.AdaLNTensors, blocks); err != nil {
			return nil, nil, err
		}
		c := *opts.AdaLN
		m.AdaLNCache = &c
	}
	var out []safetensors.Tensor
	gates := 0
	for i, name := range names {
		info, ok := src.Tensor(name)
		if !ok {
			return nil, nil, fmt.Errorf("quant: source lists %q but cannot read it", name)
		}
		switch {
		case strings.HasPrefix(name, AdaLNCachePrefix):
			return nil, nil, fmt.Errorf("quant: the source already holds AdaLN cache tensor %q: convert the released transformer/ folder", name)
		case opts.AdaLN != nil && isAdaLNProjection(name):
		case strings.HasSuffix(name, "."+GateSuffix) && !opts.IncludeVSA:
		case isQuantizedKey(name, opts.IncludeVSA):
			a, err := quantizeInfo(info, opts)
			if err != nil {
				return nil, nil, fmt.Errorf("quant: %s: %w", name, err)
			}
			key := MLXName(name)
			out = append(out, a.Tensors(key)...)
			m.QuantizedKeys[key] = QuantizedKey{DequantizedDType: dtypeTag(info.DType), HasBiases: true}
			if strings.HasSuffix(name, "."+GateSuffix) {
				gates++
			}
		default:
			out = append(out, safetensors.Tensor{Name: MLXName(name), DType: info.DType, Shape: info.Shape, Data: info.Data})
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(names), name)
		}
	}
	out = append(out, opts.AdaLNTensors...)
	m.VSA = &VSA{
		Capable: gates > 0, NumGateMatrices: gates, GateKeySuffix: GateSuffix, AttentionActivations: "bf16",
		Note: "gate matrices are kept only when converted with IncludeVSA (examples/convert -include-vsa)",
	}
	return out, m, nil
}

func quantizeInfo(info safetensors.Info, opts ConvertOptions) (*Affine, error) {
	if !info.DType.IsFloat() || len(info.Shape) != 2 {
		return nil, fmt.Errorf("%w: a quantized weight must be a float matrix, got %s %v", ErrShape, info.DType, info.Shape)
	}
	store := opts.ScaleDType
	if store == "" {
		store = info.DType
		if store == safetensors.F64 {
			store = safetensors.F32
		}
	}
	w, err := info.Float32s()
	if err != nil {
		return nil, err
	}
	return Quantize(w, info.Shape[0], info.Shape[1], opts.Scheme.Bits, opts.Scheme.GroupSize, store)
}

// countIndexed counts the distinct indices i of names "<prefix><i>.…".
func countIndexed(names []string, prefix string) int {
	seen := map[int]bool{}
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		idx, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(idx); err == nil {
			seen[i] = true
		}
	}
	return len(seen)
}

func checkAdaLNTensors(c *AdaLNCache, ts []safetensors.Tensor, blocks int) error {
	if len(c.Timesteps) == 0 {
		return fmt.Errorf("%w: the AdaLN cache lists no timesteps", ErrManifest)
	}
	if c.NumBlocks != blocks {
		return fmt.Errorf("%w: the AdaLN cache has num_blocks = %d, the checkpoint has %d blocks", ErrManifest, c.NumBlocks, blocks)
	}
	if want := blocks*c.TablesPerBlock + 2; len(ts) != want {
		return fmt.Errorf("%w: the AdaLN cache has %d tensors, %d blocks × %d tables + 2 norm_out tables = %d expected",
			ErrManifest, len(ts), blocks, c.TablesPerBlock, want)
	}
	for _, t := range ts {
		if !strings.HasPrefix(t.Name, AdaLNCachePrefix) {
			return fmt.Errorf("%w: AdaLN cache tensor %q does not start with %q", ErrManifest, t.Name, AdaLNCachePrefix)
		}
	}
	return nil
}
