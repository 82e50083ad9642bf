package quant

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"fastvideo/internal/safetensors"
)

// The MLX converted DiT format (h3.md §10.3): one safetensors file and a JSON
// manifest in a folder.
const (
	CheckpointFile = "mlx_h3_dit.safetensors"
	ManifestFile   = "mlx_h3_dit.json"
	// FormatVersion is the manifest version this package reads and writes
	// (2 is NVFP4 with a global scale, not implemented).
	FormatVersion = 1
	// ModeAffine is the only quantization mode implemented.
	ModeAffine = "affine"
)

// QuantConfig is the manifest's "quantization" entry.
type QuantConfig struct {
	Mode      string `json:"mode"`
	Bits      int    `json:"bits"`
	GroupSize int    `json:"group_size"`
}

// Scheme returns the bits and group size.
func (q QuantConfig) Scheme() Scheme { return Scheme{Bits: q.Bits, GroupSize: q.GroupSize} }

// QuantizedKey is one entry of the manifest's "quantized_keys".
type QuantizedKey struct {
	DequantizedDType string          `json:"dequantized_dtype"`
	HasBiases        bool            `json:"has_biases"`
	GlobalScale      json.RawMessage `json:"global_scale,omitempty"`
}

// AdaLNCache is the manifest's "adaln_cache" entry (the fields dit/h3's
// AdaLNManifest reads). The tables are tensors of the checkpoint.
type AdaLNCache struct {
	Timesteps      []float32 `json:"timesteps"`
	NumBlocks      int       `json:"num_blocks"`
	TablesPerBlock int       `json:"tables_per_block"`
	// Steps is the forward count of the ladder the cache serves (0: unknown).
	Steps int `json:"steps,omitempty"`
}

// VSA is the manifest's "vsa" entry.
type VSA struct {
	Capable              bool   `json:"capable"`
	NumGateMatrices      int    `json:"num_gate_matrices"`
	GateKeySuffix        string `json:"gate_key_suffix"`
	AttentionActivations string `json:"attention_activations"`
	Note                 string `json:"note,omitempty"`
}

// Manifest is mlx_h3_dit.json.
type Manifest struct {
	FormatVersion int `json:"format_version"`
	// Config is the transformer config.json object, verbatim.
	Config           json.RawMessage `json:"config"`
	NumBlocks        int             `json:"num_blocks"`
	NumRefinerBlocks int             `json:"num_refiner_blocks"`
	// Quantization is nil for an unquantized conversion.
	Quantization *QuantConfig `json:"quantization"`
	// QuantizedKeys are keyed by the stored (MLX) tensor names.
	QuantizedKeys map[string]QuantizedKey `json:"quantized_keys"`
	AdaLNCache    *AdaLNCache             `json:"adaln_cache"`
	VSA           *VSA                    `json:"vsa,omitempty"`
}

// Validate checks the version, the quantization entry and the keys; where
// names the manifest in errors.
func (m *Manifest) Validate(where string) error {
	if m.FormatVersion != FormatVersion {
		return &FormatVersionError{Path: where, Version: m.FormatVersion}
	}
	if len(m.Config) == 0 || string(m.Config) == "null" {
		return fmt.Errorf("%w: %s has no \"config\" (the transformer config.json)", ErrManifest, where)
	}
	if m.Quantization == nil {
		if len(m.QuantizedKeys) > 0 {
			return fmt.Errorf("%w: %s lists %d quantized_keys but \"quantization\" is null", ErrManifest, where, len(m.QuantizedKeys))
		}
		return nil
	}
	q := m.Quantization
	if q.Mode != ModeAffine {
		return fmt.Errorf("%w: %s: quantization.mode = %q; this runtime implements %q only", ErrManifest, where, q.Mode, ModeAffine)
	}
	if q.Bits != 4 && q.Bits != 6 && q.Bits != 8 {
		return &BitsError{Bits: q.Bits, Where: where + ": quantization"}
	}
	if !validGroup(q.GroupSize) {
		return fmt.Errorf("%s: quantization: %w", where, &GroupSizeError{Group: q.GroupSize})
	}
	for _, k := range sortedKeys(m.QuantizedKeys) {
		e := m.QuantizedKeys[k]
		if !e.HasBiases {
			return fmt.Errorf("%w: %s: quantized_keys[%q].has_biases is false, but affine quantization always stores biases; re-convert the checkpoint",
				ErrMissingBiases, where, k)
		}
		if len(e.GlobalScale) > 0 && string(e.GlobalScale) != "null" {
			return fmt.Errorf("%w: %s: %s has a global_scale (NVFP4), which affine quantization does not use", ErrManifest, where, k)
		}
	}
	return nil
}

// ReadManifest reads and validates a manifest file.
func ReadManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s is not valid JSON: %v", ErrManifest, path, err)
	}
	if err := m.Validate(path); err != nil {
		return nil, err
	}
	return &m, nil
}

// WriteManifest writes m atomically (temp file and rename).
func WriteManifest(path string, m *Manifest) error {
	if err := m.Validate(path); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("quant: encoding %s: %w", path, err)
	}
	return safetensors.WriteAtomic(path, append(data, '\n'))
}

// Name mapping between the released (diffusers) names and the MLX converted
// names: transformer_blocks.{i}. <-> blocks.{i}. and
// token_refiner.refiner_blocks.{j}. <-> refiner.{j}.; other keys are unchanged.
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

// Checkpoint is an opened MLX converted DiT folder. It is a weights.Source
// under the released names (so a model's parameter table binds it unchanged);
// a quantized key's scales and biases appear as "<released key>.scales" and
// "<released key>.biases".
type Checkpoint struct {
	Dir      string
	Manifest *Manifest
	file     *safetensors.File
	stored   map[string]string // released -> stored
	names    []string          // released, sorted
	schemes  map[string]Scheme // released key -> scheme
}

// IsCheckpoint reports whether dir holds a converted checkpoint's manifest.
func IsCheckpoint(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil
}

// Open opens dir/mlx_h3_dit.json and dir/mlx_h3_dit.safetensors and checks
// that every quantized key has its packed words, scales and biases with
// consistent dtypes and shapes. Errors wrap ErrFormatVersion, ErrBits,
// ErrGroupSize, ErrMissingScales, ErrMissingBiases, ErrShape or ErrManifest.
func Open(dir string) (*Checkpoint, error) {
	m, err := ReadManifest(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, CheckpointFile))
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	c, err := newCheckpoint(dir, m, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func newCheckpoint(dir string, m *Manifest, f *safetensors.File) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, Manifest: m, file: f, stored: map[string]string{}, schemes: map[string]Scheme{}}
	aux := map[string]bool{}
	for _, k := range sortedKeys(m.QuantizedKeys) {
		s := m.Quantization.Scheme()
		w, ok := f.Tensor(k)
		if !ok {
			return nil, fmt.Errorf("%w: quantized key %q of the manifest is not in %s", ErrManifest, k, CheckpointFile)
		}
		sc, ok := f.Tensor(k + ScalesSuffix)
		if !ok {
			return nil, &MissingTensorError{Key: k, Tensor: k + ScalesSuffix, What: ErrMissingScales}
		}
		bi, ok := f.Tensor(k + BiasesSuffix)
		if !ok {
			return nil, &MissingTensorError{Key: k, Tensor: k + BiasesSuffix, What: ErrMissingBiases}
		}
		if err := checkQuantShapes(k, w, sc, bi, s); err != nil {
			return nil, err
		}
		aux[k+ScalesSuffix], aux[k+BiasesSuffix] = true, true
		c.schemes[ReleasedName(k)] = s
	}
	for _, n := range f.Names() {
		if (strings.HasSuffix(n, ScalesSuffix) || strings.HasSuffix(n, BiasesSuffix)) && !aux[n] {
			return nil, fmt.Errorf("%w: %s holds %q but the manifest lists no quantized key for it", ErrManifest, CheckpointFile, n)
		}
		r := ReleasedName(n)
		if prev, dup := c.stored[r]; dup {
			return nil, fmt.Errorf("%w: %q and %q both map to the released name %q", ErrManifest, prev, n, r)
		}
		c.stored[r] = n
		c.names = append(c.names, r)
	}
	sort.Strings(c.names)
	return c, nil
}

// checkQuantShapes validates dtypes and shapes without reading the data.
func checkQuantShapes(key string, w, scales, biases safetensors.Info, s Scheme) error {
	if w.DType != safetensors.U32 || len(w.Shape) != 2 {
		return fmt.Errorf("%w: %s is %s %v; a quantized weight is a U32 matrix [out, in·bits/32]", ErrShape, key, w.DType, w.Shape)
	}
	if w.Shape[1]*32%s.Bits != 0 || (w.Shape[1]*32/s.Bits)%s.GroupSize != 0 {
		return fmt.Errorf("%w: %s has %d words per row, not a whole number of %d-value groups at %d bits", ErrShape, key, w.Shape[1], s.GroupSize, s.Bits)
	}
	want := []int{w.Shape[0], w.Shape[1] * 32 / s.Bits / s.GroupSize}
	for _, t := range []safetensors.Info{scales, biases} {
		if !t.DType.IsFloat() || len(t.Shape) != 2 || t.Shape[0] != want[0] || t.Shape[1] != want[1] {
			return fmt.Errorf("%w: %s is %s %v; with %d-bit words %v and group %d it must be a float [%d, %d]",
				ErrShape, t.Name, t.DType, t.Shape, s.Bits, w.Shape, s.GroupSize, want[0], want[1])
		}
	}
	if scales.DType != biases.DType {
		return fmt.Errorf("%w: %s is %s but %s is %s", ErrShape, scales.Name, scales.DType, biases.Name, biases.DType)
	}
	return nil
}

// Names lists every tensor under its released name, sorted.
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Tensor returns a tensor by released name (Info.Name is the released name).
func (c *Checkpoint) Tensor(name string) (safetensors.Info, bool) {
	s, ok := c.stored[name]
	if !ok {
		return safetensors.Info{}, false
	}
	info, ok := c.file.Tensor(s)
	info.Name = name
	return info, ok
}

// Scheme reports whether the weight under released name key is quantized, and how.
func (c *Checkpoint) Scheme(key string) (Scheme, bool) {
	s, ok := c.schemes[key]
	return s, ok
}

// QuantizedKeys lists the quantized weights under their released names, sorted.
func (c *Checkpoint) QuantizedKeys() []string { return sortedKeys(c.schemes) }

// Affine reads the quantized weight under released name key into host memory.
func (c *Checkpoint) Affine(key string) (*Affine, error) {
	s, ok := c.schemes[key]
	if !ok {
		return nil, fmt.Errorf("quant: %q is not a quantized key of %s", key, c.Dir)
	}
	w, _ := c.Tensor(key)
	sc, _ := c.Tensor(key + ScalesSuffix)
	bi, _ := c.Tensor(key + BiasesSuffix)
	return AffineFromTensors(key, w, sc, bi, s)
}

// Close unmaps the file; tensors handed out before become invalid.
func (c *Checkpoint) Close() error {
	if c == nil || c.file == nil {
		return nil
	}
	err := c.file.Close()
	c.file = nil
	return err
}

// WriteCheckpoint writes tensors (stored names) to dir/mlx_h3_dit.safetensors
// and then the manifest to dir/mlx_h3_dit.json, each atomically; the manifest
// goes last so that a folder with a manifest always has its tensors. The
// manifest's quantized keys must each have their three tensors.
func WriteCheckpoint(dir string, tensors []safetensors.Tensor, m *Manifest) error {
	if err := m.Validate(filepath.Join(dir, ManifestFile)); err != nil {
		return err
	}
	have := map[string]bool{}
	for _, t := range tensors {
		have[t.Name] = true
	}
	for _, k := range sortedKeys(m.QuantizedKeys) {
		switch {
		case !have[k]:
			return fmt.Errorf("%w: quantized key %q has no tensor", ErrManifest, k)
		case !have[k+ScalesSuffix]:
			return &MissingTensorError{Key: k, Tensor: k + ScalesSuffix, What: ErrMissingScales}
		case !have[k+BiasesSuffix]:
			return &MissingTensorError{Key: k, Tensor: k + BiasesSuffix, What: ErrMissingBiases}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, CheckpointFile), tensors, map[string]string{"format": "mlx"}); err != nil {
		return err
	}
	return WriteManifest(filepath.Join(dir, ManifestFile), m)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
