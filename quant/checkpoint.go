package quant

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
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
	// (fastvideo/mlx_runtime/checkpoint.py FORMAT_VERSION).
	FormatVersion = 1
	// ModeAffine is MLX's integer quantization (scales and biases per group);
	// the block-scaled float modes are ModeMXFP8, ModeMXFP4 and ModeNVFP4.
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

// QuantConfig is the manifest's "quantization" entry. The float modes leave
// bits and group_size null (0 here), as MLXQuantizationSpec writes them
// (fastvideo/mlx_runtime/fastwan.py): mx.quantize takes the mode's own.
type QuantConfig struct {
	Mode      string `json:"mode"`
	Bits      int    `json:"bits"`
	GroupSize int    `json:"group_size"`
}

// Scheme returns the bits and group size.
func (q QuantConfig) Scheme() Scheme { return Scheme{Bits: q.Bits, GroupSize: q.GroupSize} }

// FloatMode returns the block-scaled float format of a float mode.
func (q QuantConfig) FloatMode() (FloatMode, bool) { return LookupFloatMode(q.Mode) }

// MarshalJSON writes a zero bits or group_size as null.
func (q QuantConfig) MarshalJSON() ([]byte, error) {
	orNull := func(v int) *int {
		if v == 0 {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		Mode      string `json:"mode"`
		Bits      *int   `json:"bits"`
		GroupSize *int   `json:"group_size"`
	}{q.Mode, orNull(q.Bits), orNull(q.GroupSize)})
}

// QuantizedKey is one entry of the manifest's "quantized_keys".
type QuantizedKey struct {
	DequantizedDType string `json:"dequantized_dtype"`
	HasBiases        bool   `json:"has_biases"`
	// GlobalScale is nvfp4's optional tensor scale (mx.quantize global_scale,
	// mlx/ops.cpp fp_quantize): the E4M3 group scales are stored times
	// 448·6/global_scale. Absent or null means none.
	GlobalScale json.RawMessage `json:"global_scale,omitempty"`
}

// Global returns the global scale, 0 when there is none; where names the key in errors.
func (k QuantizedKey) Global(where string) (float32, error) {
	if len(k.GlobalScale) == 0 || string(k.GlobalScale) == "null" {
		return 0, nil
	}
	var g float64
	if err := json.Unmarshal(k.GlobalScale, &g); err != nil || !(g > 0) || g > math.MaxFloat32 {
		return 0, fmt.Errorf("%w: %s.global_scale = %s; it must be a finite positive number (or null)", ErrManifest, where, k.GlobalScale)
	}
	return float32(g), nil
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
	if _, ok := m.Quantization.FloatMode(); ok {
		return m.validateFloat(where)
	}
	return m.validateAffine(where)
}

func (m *Manifest) validateAffine(where string) error {
	q := m.Quantization
	if q.Mode != ModeAffine {
		return fmt.Errorf("%w: %s: quantization.mode = %q; this runtime implements %q, %q, %q and %q",
			ErrManifest, where, q.Mode, ModeAffine, ModeMXFP8, ModeMXFP4, ModeNVFP4)
	}
	if q.Bits != 4 && q.Bits != 6 && q.Bits != 8 {
		return &BitsError{Bits: q.Bits, Where: where + ": quantization"}
	}
	if !validGroup(q.GroupSize) {
		return fmt.Errorf("%s: quantization: %w", where, &GroupSizeError{Group: q.GroupSize})
	}
	for _, k := range slices.Sorted(maps.Keys(m.QuantizedKeys)) {
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

// validateFloat checks a float mode's manifest as mx.quantize checks its arguments (mlx/ops.cpp
// fp_quantize, validate_global_scale): bits and group_size null or the mode's own, no biases, a
// global scale only for nvfp4.
func (m *Manifest) validateFloat(where string) error {
	q := m.Quantization
	mode, _ := q.FloatMode()
	if (q.Bits != 0 && q.Bits != mode.Bits) || (q.GroupSize != 0 && q.GroupSize != mode.Group) {
		return fmt.Errorf("%w: %s: quantization %q has bits = %d, group_size = %d; %s requires bits %d and group_size %d (or null)",
			ErrManifest, where, q.Mode, q.Bits, q.GroupSize, q.Mode, mode.Bits, mode.Group)
	}
	for _, k := range slices.Sorted(maps.Keys(m.QuantizedKeys)) {
		e := m.QuantizedKeys[k]
		if e.HasBiases {
			return fmt.Errorf("%w: %s: quantized_keys[%q].has_biases is true, but %s stores no biases; re-convert the checkpoint",
				ErrManifest, where, k, q.Mode)
		}
		g, err := e.Global(fmt.Sprintf("%s: quantized_keys[%q]", where, k))
		if err != nil {
			return err
		}
		if g != 0 && q.Mode != ModeNVFP4 {
			return fmt.Errorf("%w: %s: quantized_keys[%q] has a global_scale, which only %s uses, not %s",
				ErrManifest, where, k, ModeNVFP4, q.Mode)
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
	_, float := m.Quantization.FloatMode()
	for _, k := range slices.Sorted(maps.Keys(m.QuantizedKeys)) {
		switch {
		case !have[k]:
			return fmt.Errorf("%w: quantized key %q has no tensor", ErrManifest, k)
		case !have[k+ScalesSuffix]:
			return &MissingTensorError{Key: k, Tensor: k + ScalesSuffix, What: ErrMissingScales}
		case !float && !have[k+BiasesSuffix]:
			return &MissingTensorError{Key: k, Tensor: k + BiasesSuffix, What: ErrMissingBiases}
		case float && have[k+BiasesSuffix]:
			return fmt.Errorf("%w: %s quantized key %q has biases", ErrManifest, m.Quantization.Mode, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.DenseKeys)) {
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
// parameter table binds it unchanged. An affine key's scales and biases appear
// as "<key>.scales" and "<key>.biases" and the key reports its Scheme; a float
// mode's key (mxfp8, mxfp4, nvfp4) reads as its dequantized float32 matrix,
// its scales hidden and no Scheme reported, so models bind it as a dense
// weight (the weights.HeaderSource methods describe it without dequantizing).
type Checkpoint struct {
	Dir      string
	Manifest *Manifest
	file     *safetensors.File
	stored   map[string]string   // source -> stored
	names    []string            // source names, sorted
	schemes  map[string]Scheme   // source key -> scheme
	floats   map[string]floatKey // source key -> float mode and global scale
	hidden   map[string]bool     // source names of the float keys' scales
}

// floatKey is one float-mode weight: its format and nvfp4 global scale (0: none).
type floatKey struct {
	mode   FloatMode
	global float32
}

// Open opens dir's manifest and tensors file and checks that every quantized
// key has its packed words, scales and (affine) biases with consistent dtypes
// and shapes, that every float-mode scale is a number, and every dense key its
// tensor. Errors wrap ErrFormatVersion, ErrBits, ErrGroupSize,
// ErrMissingScales, ErrMissingBiases, ErrShape or ErrManifest.
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
	c := &Checkpoint{Dir: dir, Manifest: m, file: file, stored: map[string]string{}, schemes: map[string]Scheme{},
		floats: map[string]floatKey{}, hidden: map[string]bool{}}
	aux, err := f.checkQuantized(c, m, file)
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(m.DenseKeys)) {
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
		if base, ok := strings.CutSuffix(r, ScalesSuffix); ok {
			if _, float := c.floats[base]; float {
				c.hidden[r] = true
				continue
			}
		}
		c.names = append(c.names, r)
	}
	sort.Strings(c.names)
	return c, nil
}

// checkQuantized checks every quantized key's tensors, registers it with c and returns the stored
// names of the scales and biases that belong to a key.
func (f Format) checkQuantized(c *Checkpoint, m *Manifest, file *safetensors.File) (map[string]bool, error) {
	aux := map[string]bool{}
	if m.Quantization == nil {
		return aux, nil
	}
	mode, float := m.Quantization.FloatMode()
	for _, k := range slices.Sorted(maps.Keys(m.QuantizedKeys)) {
		aux[k+ScalesSuffix] = true
		if !float {
			if err := checkQuantizedKey(file, k, m.Quantization.Scheme(), f.TensorsFile); err != nil {
				return nil, err
			}
			aux[k+BiasesSuffix] = true
			c.schemes[f.sourceName(k)] = m.Quantization.Scheme()
			continue
		}
		global, _ := m.QuantizedKeys[k].Global(k) // Validate checked it
		if err := checkFloatKey(file, k, mode, global, f.TensorsFile); err != nil {
			return nil, err
		}
		c.floats[f.sourceName(k)] = floatKey{mode, global}
	}
	return aux, nil
}

// checkFloatKey checks that file holds key's words and scales with the dtypes and shapes of mode,
// no biases, and scales that decode to numbers (as DequantizeFloat will need them).
func checkFloatKey(file *safetensors.File, key string, mode FloatMode, global float32, fileName string) error {
	w, sc, err := wordsAndScales(file, key, fileName)
	if err != nil {
		return err
	}
	if _, ok := file.Tensor(key + BiasesSuffix); ok {
		return fmt.Errorf("%w: %s holds %s, but %s stores no biases; re-convert the checkpoint", ErrManifest, fileName, key+BiasesSuffix, mode.Name)
	}
	if _, _, err := mode.check(w, sc); err != nil {
		return err
	}
	_, err = mode.groupScales(sc, global)
	return err
}

// wordsAndScales returns a quantized key's packed words and scales from file.
func wordsAndScales(file *safetensors.File, key, fileName string) (w, scales safetensors.Info, err error) {
	w, ok := file.Tensor(key)
	if !ok {
		return w, scales, fmt.Errorf("%w: quantized key %q of the manifest is not in %s", ErrManifest, key, fileName)
	}
	if scales, ok = file.Tensor(key + ScalesSuffix); !ok {
		return w, scales, &MissingTensorError{Key: key, Tensor: key + ScalesSuffix, What: ErrMissingScales}
	}
	return w, scales, nil
}

// checkQuantizedKey checks that file holds key's words, scales and biases with
// the shapes scheme s implies.
func checkQuantizedKey(file *safetensors.File, key string, s Scheme, fileName string) error {
	w, sc, err := wordsAndScales(file, key, fileName)
	if err != nil {
		return err
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

// Names lists every tensor under its source name, sorted (a float mode's
// scales left out).
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Tensor returns a tensor by source name (Info.Name is the source name); a
// float mode's weight comes back dequantized (MLX's fp_dequantize, float32).
func (c *Checkpoint) Tensor(name string) (safetensors.Info, bool) {
	fk, float := c.floats[name]
	if !float {
		if c.hidden[name] {
			return safetensors.Info{}, false
		}
		return c.raw(name)
	}
	w, _ := c.raw(name)
	sc, _ := c.raw(name + ScalesSuffix)
	vals, err := DequantizeFloat(fk.mode, w, sc, fk.global)
	if err != nil {
		return safetensors.Info{}, false // unreachable: Open checked both tensors
	}
	return safetensors.Info{Name: name, DType: safetensors.F32, Shape: []int{w.Shape[0], len(vals) / w.Shape[0]}, Data: safetensors.F32Bytes(vals)}, true
}

// Header describes a tensor as Tensor returns it, without dequantizing (weights.HeaderSource).
func (c *Checkpoint) Header(name string) (safetensors.Info, bool) {
	fk, float := c.floats[name]
	if !float {
		return c.Tensor(name)
	}
	w, _ := c.raw(name)
	return safetensors.Info{Name: name, DType: safetensors.F32, Shape: []int{w.Shape[0], w.Shape[1] * 32 / fk.mode.Bits}}, true
}

// FloatMode reports whether the weight under source name key is stored in a
// block-scaled float mode, which one, and its nvfp4 global scale (0: none).
func (c *Checkpoint) FloatMode(key string) (FloatMode, float32, bool) {
	fk, ok := c.floats[key]
	return fk.mode, fk.global, ok
}

// raw returns a stored tensor under its source name.
func (c *Checkpoint) raw(name string) (safetensors.Info, bool) {
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

// QuantizedKeys lists the affine-quantized weights (those bound packed) under
// their source names, sorted; float-mode weights read dense (FloatMode).
func (c *Checkpoint) QuantizedKeys() []string { return slices.Sorted(maps.Keys(c.schemes)) }

// Affine reads the quantized weight under source name key into host memory.
func (c *Checkpoint) Affine(key string) (*Affine, error) {
	s, ok := c.schemes[key]
	if !ok {
		return nil, fmt.Errorf("quant: %q is not a quantized key of %s", key, c.Dir)
	}
	w, _ := c.raw(key)
	sc, _ := c.raw(key + ScalesSuffix)
	bi, _ := c.raw(key + BiasesSuffix)
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
