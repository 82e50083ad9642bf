package h3

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"fastvideo/internal/modelcfg"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
	"fastvideo/quant"
)

// The MLX converted H3 DiT: mlx_h3_dit.safetensors and the manifest mlx_h3_dit.json in a folder, the
// layout of MLX-converted H3 folders (which therefore load unchanged) and of examples/convert's output.
// The manifest is quant's (format_version, quantization, quantized_keys, dense_keys) with the H3
// entries of ConvertedManifest beside them.
const (
	CheckpointFile = "mlx_h3_dit.safetensors"
	ManifestFile   = "mlx_h3_dit.json"
)

// converted is the quant.Format of the converted DiT: stored (MLX) names, bound under released names.
var converted = quant.Format{TensorsFile: CheckpointFile, ManifestFile: ManifestFile, SourceName: ReleasedName}

// Name mapping between the released (diffusers) names and the MLX converted names:
// transformer_blocks.{i}. <-> blocks.{i}. and token_refiner.refiner_blocks.{j}. <-> refiner.{j}.;
// other keys are unchanged.
var namePrefixes = [][2]string{
	{"transformer_blocks.", "blocks."},
	{"token_refiner.refiner_blocks.", "refiner."},
}

// MLXName is the stored name of a released tensor name.
func MLXName(released string) string {
	for _, p := range namePrefixes {
		if rest, ok := strings.CutPrefix(released, p[0]); ok {
			return p[1] + rest
		}
	}
	return released
}

// ReleasedName is the released name of a stored (MLX) tensor name.
func ReleasedName(stored string) string {
	for _, p := range namePrefixes {
		if rest, ok := strings.CutPrefix(stored, p[1]); ok {
			return p[0] + rest
		}
	}
	return stored
}

// gateSuffix is the FastH3 VSA gate matrix, kept (and quantized) only with ConvertOptions.IncludeVSA.
const gateSuffix = "attn.to_gate_compress.weight"

// cachePrefix starts the names of the AdaLN cache tensors (CacheTableName, CacheNormOutShift/Scale).
const cachePrefix = "__adaln_cache."

// VSAManifest is the manifest's "vsa" entry.
type VSAManifest struct {
	Capable              bool   `json:"capable"`
	NumGateMatrices      int    `json:"num_gate_matrices"`
	GateKeySuffix        string `json:"gate_key_suffix"`
	AttentionActivations string `json:"attention_activations"`
	Note                 string `json:"note,omitempty"`
}

// ConvertedManifest is mlx_h3_dit.json: the quantization (Quant) and the H3 entries written beside it.
type ConvertedManifest struct {
	Quant *quant.Manifest `json:"-"`
	// Config is the transformer config.json object, verbatim.
	Config           json.RawMessage `json:"config"`
	NumBlocks        int             `json:"num_blocks"`
	NumRefinerBlocks int             `json:"num_refiner_blocks"`
	// AdaLNCache, when set, says the checkpoint carries the AdaLN tables of these timesteps instead of
	// the AdaLN projections.
	AdaLNCache *AdaLNManifest `json:"adaln_cache"`
	VSA        *VSAManifest   `json:"vsa,omitempty"`
}

// validate checks the H3 entries; where names the manifest in errors.
func (m *ConvertedManifest) validate(where string) error {
	if m.Quant == nil {
		return fmt.Errorf("h3: %s: no quantization manifest", where)
	}
	if len(m.Config) == 0 || string(m.Config) == "null" {
		return fmt.Errorf("%w: %s has no \"config\" (the transformer config.json)", quant.ErrManifest, where)
	}
	if !json.Valid(m.Config) {
		return fmt.Errorf("%w: %s: the transformer config is not valid JSON", quant.ErrManifest, where)
	}
	return nil
}

// encode stores the H3 entries in the quant manifest's metadata.
func (m *ConvertedManifest) encode(where string) error {
	if err := m.validate(where); err != nil {
		return err
	}
	return m.Quant.SetMetadata(m)
}

// decodeConverted reads the H3 entries of a quant manifest.
func decodeConverted(q *quant.Manifest, where string) (*ConvertedManifest, error) {
	m := &ConvertedManifest{}
	if err := q.DecodeMetadata(m); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	m.Quant = q
	if err := m.validate(where); err != nil {
		return nil, err
	}
	return m, nil
}

// IsConverted reports whether dir holds a converted checkpoint's manifest.
func IsConverted(dir string) bool { return converted.Exists(dir) }

// ReadConvertedManifest reads and validates dir/mlx_h3_dit.json.
func ReadConvertedManifest(dir string) (*ConvertedManifest, error) {
	q, err := converted.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	return decodeConverted(q, filepath.Join(dir, ManifestFile))
}

// WriteConvertedManifest rewrites dir/mlx_h3_dit.json (atomically).
func WriteConvertedManifest(dir string, m *ConvertedManifest) error {
	if err := m.encode(filepath.Join(dir, ManifestFile)); err != nil {
		return err
	}
	return converted.WriteManifest(dir, m.Quant)
}

// WriteConverted writes tensors (stored names) and the manifest to dir; the manifest goes last, so that a
// folder with a manifest always has its tensors.
func WriteConverted(dir string, tensors []safetensors.Tensor, m *ConvertedManifest) error {
	if err := m.encode(filepath.Join(dir, ManifestFile)); err != nil {
		return err
	}
	return converted.Write(dir, tensors, m.Quant)
}

// OpenConverted opens a converted folder: the checkpoint (a weights.Source under the released names that
// also reports which linears it quantizes) and its manifest.
func OpenConverted(dir string) (*quant.Checkpoint, *ConvertedManifest, error) {
	ck, err := converted.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	m, err := decodeConverted(ck.Manifest, filepath.Join(dir, ManifestFile))
	if err != nil {
		ck.Close()
		return nil, nil, err
	}
	return ck, m, nil
}

// ConvertOptions configure Convert.
type ConvertOptions struct {
	// Scheme is the affine quantization, unless FloatMode is set.
	Scheme quant.Scheme
	// FloatMode, when set (quant.ModeMXFP8, ModeMXFP4, ModeNVFP4), quantizes the linears in that
	// block-scaled float mode (quant.QuantizeFloat, MLX's fp_quantize) instead; Scheme and ScaleDType
	// are then unused.
	FloatMode string
	// GlobalScale gives each nvfp4 matrix the global scale max|w|.
	GlobalScale bool
	// ScaleDType is the dtype of scales and biases; "" keeps each weight's own dtype (BF16 for the
	// release, as MLX does; F64 sources give F32).
	ScaleDType safetensors.DType
	// IncludeVSA keeps the FastH3 gate matrices (quantized); otherwise they are dropped, as the dense
	// forward does not use them.
	IncludeVSA bool
	// AdaLN, with AdaLNTensors (from Model.ExportAdaLNCache), embeds a precomputed AdaLN cache; the AdaLN
	// projections (adaln_proj.linear.*, norm_out.linear.*, adaln_basis.*) are then left out. Without it
	// they are kept, so the converted model can serve any ladder.
	AdaLN        *AdaLNManifest
	AdaLNTensors []safetensors.Tensor
	// Progress, if set, is called after each source tensor.
	Progress func(done, total int, name string)
}

// Convert turns a released H3 transformer (src under the released names, the config.json object) into
// the tensors and manifest of the MLX converted format: names renamed (MLXName), the six core linears
// of every block and refiner block quantized (affine, or opts.FloatMode; kept dense where their input width is not a multiple of
// the group size, as MLX does), everything else kept in its dtype. The quantized data is held in
// memory; the other tensors alias src, which must stay open until they are written.
func Convert(src weights.Source, config json.RawMessage, opts ConvertOptions) ([]safetensors.Tensor, *ConvertedManifest, error) {
	conv, err := opts.conversion()
	if err != nil {
		return nil, nil, err
	}
	if !json.Valid(config) {
		return nil, nil, fmt.Errorf("%w: the transformer config is not valid JSON", quant.ErrManifest)
	}
	names := src.Names()
	sort.Strings(names)
	m := &ConvertedManifest{Config: config, NumBlocks: countIndexed(names, "transformer_blocks."),
		NumRefinerBlocks: countIndexed(names, "token_refiner.refiner_blocks.")}
	if m.NumBlocks == 0 {
		return nil, nil, fmt.Errorf("h3: the source has no transformer_blocks.* tensors: not an H3 transformer checkpoint")
	}
	if opts.AdaLN != nil {
		if err := checkAdaLNTensors(opts.AdaLN, opts.AdaLNTensors, m.NumBlocks); err != nil {
			return nil, nil, err
		}
		c := *opts.AdaLN
		m.AdaLNCache = &c
	}
	gates := 0
	for i, name := range names {
		quantizedGate, err := convertTensor(conv, src, name, opts)
		if err != nil {
			return nil, nil, err
		}
		if quantizedGate {
			gates++
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(names), name)
		}
	}
	conv.Add(opts.AdaLNTensors...)
	var tensors []safetensors.Tensor
	tensors, m.Quant = conv.Result()
	m.VSA = &VSAManifest{
		Capable: gates > 0, NumGateMatrices: gates, GateKeySuffix: gateSuffix, AttentionActivations: "bf16",
		Note: "gate matrices are kept only when converted with IncludeVSA (examples/convert -include-vsa)",
	}
	return tensors, m, nil
}

// conversion starts the quantization opts ask for.
func (opts ConvertOptions) conversion() (*quant.Conversion, error) {
	if opts.FloatMode != "" {
		return quant.NewFloatConversion(opts.FloatMode, opts.GlobalScale)
	}
	if opts.GlobalScale {
		return nil, fmt.Errorf("%w: a global scale needs FloatMode %q", quant.ErrManifest, quant.ModeNVFP4)
	}
	return quant.NewConversion(opts.Scheme, opts.ScaleDType)
}

// convertTensor adds the released tensor name of src to conv: left out, quantized or kept. It reports
// whether it quantized a VSA gate matrix.
func convertTensor(conv *quant.Conversion, src weights.Source, name string, opts ConvertOptions) (bool, error) {
	info, ok := src.Tensor(name)
	if !ok {
		return false, fmt.Errorf("h3: the source lists %q but cannot read it", name)
	}
	isGate := strings.HasSuffix(name, "."+gateSuffix)
	switch {
	case strings.HasPrefix(name, cachePrefix):
		return false, fmt.Errorf("h3: the source already holds AdaLN cache tensor %q: convert the released transformer/ folder", name)
	case opts.AdaLN != nil && isAdaLNProjection(name):
		return false, nil
	case isGate && !opts.IncludeVSA:
		return false, nil
	case isGate || isCoreLinear(name):
		quantized, err := conv.Quantize(MLXName(name), info)
		if err != nil {
			return false, fmt.Errorf("h3: %w", err)
		}
		return isGate && quantized, nil
	}
	conv.Keep(MLXName(name), info)
	return false, nil
}

// isCoreLinear reports whether a released name is one of the six core linears of a block or refiner
// block (the weights MLX quantizes).
func isCoreLinear(name string) bool {
	for _, s := range coreLinearNames {
		if strings.HasSuffix(name, "."+s) {
			return true
		}
	}
	return false
}

// isAdaLNProjection reports whether a released name belongs to the AdaLN projections an AdaLN cache
// replaces.
func isAdaLNProjection(name string) bool {
	if strings.HasPrefix(name, "norm_out.linear.") || strings.HasPrefix(name, "adaln_basis.") {
		return true
	}
	return strings.HasPrefix(name, "transformer_blocks.") && strings.Contains(name, ".adaln_proj.")
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

func checkAdaLNTensors(c *AdaLNManifest, ts []safetensors.Tensor, blocks int) error {
	if len(c.Timesteps) == 0 {
		return fmt.Errorf("%w: the AdaLN cache lists no timesteps", quant.ErrManifest)
	}
	if c.NumBlocks != blocks {
		return fmt.Errorf("%w: the AdaLN cache has num_blocks = %d, the checkpoint has %d blocks", quant.ErrManifest, c.NumBlocks, blocks)
	}
	if want := blocks*c.TablesPerBlock + 2; len(ts) != want {
		return fmt.Errorf("%w: the AdaLN cache has %d tensors, %d blocks × %d tables + 2 norm_out tables = %d expected",
			quant.ErrManifest, len(ts), blocks, c.TablesPerBlock, want)
	}
	for _, t := range ts {
		if !strings.HasPrefix(t.Name, cachePrefix) {
			return fmt.Errorf("%w: AdaLN cache tensor %q does not start with %q", quant.ErrManifest, t.Name, cachePrefix)
		}
	}
	return nil
}

// AdaLNManifestFiles are the manifest files Load looks for in a transformer folder, in order.
var AdaLNManifestFiles = []string{"adaln_cache.json", ManifestFile}

// ReadAdaLNManifest returns the "adaln_cache" entry of the first manifest file of dir that has one, or
// nil when the folder carries no cache (a released checkpoint).
func ReadAdaLNManifest(dir string) (*AdaLNManifest, error) {
	for _, name := range AdaLNManifestFiles {
		path := filepath.Join(dir, name)
		data, err := modelcfg.ReadJSON(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("h3: reading %s: %w", path, err)
		}
		var doc struct {
			AdaLN *AdaLNManifest `json:"adaln_cache"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("h3: %s is not valid JSON: %w", path, err)
		}
		if doc.AdaLN != nil {
			return doc.AdaLN, nil
		}
	}
	return nil, nil
}

// ReadConfig reads the transformer config of a folder Load accepts: the "config" entry of
// mlx_h3_dit.json in a converted MLX folder (as Load uses it), else dir/config.json.
func ReadConfig(dir string) (Config, error) {
	if IsConverted(dir) {
		path := filepath.Join(dir, ManifestFile)
		m, err := ReadConvertedManifest(dir)
		if err != nil {
			return Config{}, fmt.Errorf("h3: reading the transformer config: %w", err)
		}
		c, err := ParseConfig(m.Config)
		if err != nil {
			return Config{}, fmt.Errorf("%w (the \"config\" entry of %s)", err, path)
		}
		return c, nil
	}
	return modelcfg.Read(dir, ParseConfig, "h3: reading the transformer config", fmt.Sprintf("is %s a released transformer/ folder?", dir))
}
