package quant

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"fastvideo/internal/modelcfg"
	"fastvideo/internal/safetensors"
)

// A converted checkpoint is a folder holding one safetensors file and a JSON
// manifest, the layout of MLX's converted checkpoints (mlx/utils.py
// save_safetensors plus the converter's own JSON). The model package that owns
// a format names the two files and maps its tensor names (a Format); this
// package reads and writes the quantization part of the manifest and leaves
// the model's own entries (Manifest.Metadata) to it.
const (
	// FormatVersion is the manifest version this package reads and writes
	// (2 is NVFP4 with a global scale, not implemented).
	FormatVersion = 1
	// ModeAffine is the only quantization mode implemented.
	ModeAffine = "affine"
)

// Format is one model's converted-checkpoint layout.
type Format struct {
	// TensorsFile and ManifestFile are the file names inside the folder.
	TensorsFile, ManifestFile string
	// SourceName maps a stored tensor name to the name the model binds; nil is
	// the identity.
	SourceName func(stored string) string
}

func (f Format) sourceName(stored string) string {
	if f.SourceName == nil {
		return stored
	}
	return f.SourceName(stored)
}

// Exists reports whether dir holds the format's manifest.
func (f Format) Exists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, f.ManifestFile))
	return err == nil
}

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

// Manifest is the JSON manifest of a converted checkpoint: the quantization
// entries this package owns and the model's own entries (Metadata), written
// side by side in one JSON object.
type Manifest struct {
	FormatVersion int `json:"format_version"`
	// Quantization is nil for an unquantized conversion.
	Quantization *QuantConfig `json:"quantization"`
	// QuantizedKeys are keyed by the stored tensor names.
	QuantizedKeys map[string]QuantizedKey `json:"quantized_keys"`
	// DenseKeys are the matrices a conversion was asked to quantize but kept
	// dense, keyed by stored name, with the reason (as MLX's nn.quantize skips
	// layers whose input width is not a multiple of the group size).
	DenseKeys map[string]string `json:"dense_keys,omitempty"`
	// Metadata is the model's part of the manifest: a JSON object whose
	// fields sit beside the ones above (SetMetadata, DecodeMetadata).
	Metadata json.RawMessage `json:"-"`
}

// manifestFields is Manifest without its methods, for the default encoding.
type manifestFields Manifest

// MarshalJSON writes the quantization fields and the metadata fields as one object.
func (m Manifest) MarshalJSON() ([]byte, error) {
	own, err := json.Marshal(manifestFields(m))
	if err != nil {
		return nil, err
	}
	if len(m.Metadata) == 0 {
		return own, nil
	}
	var fields, meta map[string]json.RawMessage
	if err := json.Unmarshal(own, &fields); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(m.Metadata, &meta); err != nil {
		return nil, fmt.Errorf("%w: the model metadata is not a JSON object: %v", ErrManifest, err)
	}
	for k, v := range meta {
		if _, dup := fields[k]; dup {
			return nil, fmt.Errorf("%w: the model metadata redefines the manifest field %q", ErrManifest, k)
		}
		fields[k] = v
	}
	return json.Marshal(fields)
}

// UnmarshalJSON reads the quantization fields and keeps every other field in Metadata.
func (m *Manifest) UnmarshalJSON(data []byte) error {
	var own manifestFields
	if err := json.Unmarshal(data, &own); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	for _, k := range []string{"format_version", "quantization", "quantized_keys", "dense_keys"} {
		delete(fields, k)
	}
	*m = Manifest(own)
	if len(fields) == 0 {
		return nil
	}
	meta, err := json.Marshal(fields)
	m.Metadata = meta
	return err
}

// SetMetadata stores v (encoded as a JSON object) as the model's entries.
func (m *Manifest) SetMetadata(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: encoding the model metadata: %v", ErrManifest, err)
	}
	m.Metadata = data
	return nil
}

// DecodeMetadata decodes the model's entries into v.
func (m *Manifest) DecodeMetadata(v any) error {
	data := m.Metadata
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: decoding the model metadata: %v", ErrManifest, err)
	}
	return nil
}

// Validate checks the version, the quantization entry and the keys; where
// names the manifest in errors.
func (m *Manifest) Validate(where string) error {
	if m.FormatVersion != FormatVersion {
		return &FormatVersionError{Path: where, Version: m.FormatVersion}
	}
	for k := range m.DenseKeys {
		if _, q := m.QuantizedKeys[k]; q {
			return fmt.Errorf("%w: %s lists %q both in quantized_keys and in dense_keys", ErrManifest, where, k)
		}
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

// ReadManifest reads and validates dir's manifest.
func (f Format) ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, f.ManifestFile)
	data, err := modelcfg.ReadJSON(path)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		if errors.Is(err, ErrManifest) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s is not valid JSON: %v", ErrManifest, path, err)
	}
	if err := m.Validate(path); err != nil {
		return nil, err
	}
	return &m, nil
}

// WriteManifest writes m to dir's manifest atomically (temp file and rename).
func (f Format) WriteManifest(dir string, m *Manifest) error {
	path := filepath.Join(dir, f.ManifestFile)
	if err := m.Validate(path); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("quant: encoding %s: %w", path, err)
	}
	return safetensors.WriteAtomic(path, append(data, '\n'))
}

// Write writes tensors (stored names) to dir's tensors file and then the
// manifest, each atomically; the manifest goes last so that a folder with a
// manifest always has its tensors. The manifest's quantized keys must each
// have their three tensors, and its dense keys their tensor.
func (f Format) Write(dir string, tensors []safetensors.Tensor, m *Manifest) error {
	if err := m.Validate(filepath.Join(dir, f.ManifestFile)); err != nil {
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
	for _, k := range sortedKeys(m.DenseKeys) {
		if !have[k] {
			return fmt.Errorf("%w: dense key %q has no tensor", ErrManifest, k)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, f.TensorsFile), tensors, map[string]string{"format": "mlx"}); err != nil {
		return err
	}
	return f.WriteManifest(dir, m)
}

// Checkpoint is an opened converted checkpoint. It is a weights.Source under
// the model's names (Format.SourceName of the stored names), so a model's
// parameter table binds it unchanged; a quantized key's scales and biases
// appear as "<key>.scales" and "<key>.biases".
type Checkpoint struct {
	Dir      string
	Manifest *Manifest
	file     *safetensors.File
	stored   map[string]string // source -> stored
	names    []string          // source names, sorted
	schemes  map[string]Scheme // source key -> scheme
}

// Open opens dir's manifest and tensors file and checks that every quantized
// key has its packed words, scales and biases with consistent dtypes and
// shapes, and every dense key its tensor. Errors wrap ErrFormatVersion,
// ErrBits, ErrGroupSize, ErrMissingScales, ErrMissingBiases, ErrShape or
// ErrManifest.
func (f Format) Open(dir string) (*Checkpoint, error) {
	m, err := f.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	file, err := safetensors.Open(filepath.Join(dir, f.TensorsFile))
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	c, err := f.newCheckpoint(dir, m, file)
	if err != nil {
		file.Close()
		return nil, err
	}
	return c, nil
}

func (f Format) newCheckpoint(dir string, m *Manifest, file *safetensors.File) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, Manifest: m, file: file, stored: map[string]string{}, schemes: map[string]Scheme{}}
	aux := map[string]bool{}
	for _, k := range sortedKeys(m.QuantizedKeys) {
		if err := checkQuantizedKey(file, k, m.Quantization.Scheme(), f.TensorsFile); err != nil {
			return nil, err
		}
		aux[k+ScalesSuffix], aux[k+BiasesSuffix] = true, true
		c.schemes[f.sourceName(k)] = m.Quantization.Scheme()
	}
	for _, k := range sortedKeys(m.DenseKeys) {
		if _, ok := file.Tensor(k); !ok {
			return nil, fmt.Errorf("%w: dense key %q of the manifest is not in %s", ErrManifest, k, f.TensorsFile)
		}
	}
	for _, n := range file.Names() {
		if (strings.HasSuffix(n, ScalesSuffix) || strings.HasSuffix(n, BiasesSuffix)) && !aux[n] {
			return nil, fmt.Errorf("%w: %s holds %q but the manifest lists no quantized key for it", ErrManifest, f.TensorsFile, n)
		}
		r := f.sourceName(n)
		if prev, dup := c.stored[r]; dup {
			return nil, fmt.Errorf("%w: %q and %q both map to the name %q", ErrManifest, prev, n, r)
		}
		c.stored[r] = n
		c.names = append(c.names, r)
	}
	sort.Strings(c.names)
	return c, nil
}

// checkQuantizedKey checks that file holds key's words, scales and biases with
// the shapes scheme s implies.
func checkQuantizedKey(file *safetensors.File, key string, s Scheme, fileName string) error {
	w, ok := file.Tensor(key)
	if !ok {
		return fmt.Errorf("%w: quantized key %q of the manifest is not in %s", ErrManifest, key, fileName)
	}
	sc, ok := file.Tensor(key + ScalesSuffix)
	if !ok {
		return &MissingTensorError{Key: key, Tensor: key + ScalesSuffix, What: ErrMissingScales}
	}
	bi, ok := file.Tensor(key + BiasesSuffix)
	if !ok {
		return &MissingTensorError{Key: key, Tensor: key + BiasesSuffix, What: ErrMissingBiases}
	}
	return checkQuantShapes(key, w, sc, bi, s)
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

// Names lists every tensor under its source name, sorted.
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Tensor returns a tensor by source name (Info.Name is the source name).
func (c *Checkpoint) Tensor(name string) (safetensors.Info, bool) {
	s, ok := c.stored[name]
	if !ok {
		return safetensors.Info{}, false
	}
	info, ok := c.file.Tensor(s)
	info.Name = name
	return info, ok
}

// Scheme reports whether the weight under source name key is quantized, and how.
func (c *Checkpoint) Scheme(key string) (Scheme, bool) {
	s, ok := c.schemes[key]
	return s, ok
}

// QuantizedKeys lists the quantized weights under their source names, sorted.
func (c *Checkpoint) QuantizedKeys() []string { return sortedKeys(c.schemes) }

// Affine reads the quantized weight under source name key into host memory.
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
