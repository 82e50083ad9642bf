package familykit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/internal/modelcfg"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/promptcache"
	"fastvideo/internal/weights"
)

// Source is where a model's components come from: a snapshot folder, or a toy model's in-memory
// weights.
type Source interface {
	// Describe names the source for messages.
	Describe() string
	// Check re-validates, cheaply, that the files a run needs are still there.
	Check() error
}

// Opened is what every family's opened components share: the engine they load on and the source
// they load from, whose description and check are theirs.
type Opened[S Source] struct {
	Engine *family.Engine
	Src    S
	// LoRA are the engine's adapters, opened and validated (nil: none); the family merges them into
	// every DiT it loads (LoRA.MergeOnBind) and closes them with the components.
	LoRA *LoRA
}

func (o *Opened[S]) Describe() string { return o.Src.Describe() }

func (o *Opened[S]) Check() error { return o.Src.Check() }

// LoRAPlan is what each adapter changes (family.LoRAReporter; nil without adapters).
func (o *Opened[S]) LoRAPlan() []api.PlanLoRA {
	if o.LoRA == nil {
		return nil
	}
	return o.LoRA.Plan
}

// WeightOpener opens a component's weights; the returned function closes them.
type WeightOpener func() (weights.Source, func() error, error)

// Component folders every diffusers-style snapshot has (the families add their own).
const (
	DirTransformer = "transformer"
	DirVAE         = "vae"
	DirTextEncoder = "text_encoder"
	DirTokenizer   = "tokenizer"
)

// Snapshot is a diffusers-style model folder, as every family's folder components read it.
type Snapshot struct{ Dir string }

// Describe names the folder by its path (Source).
func (s Snapshot) Describe() string { return s.Dir }

// Path joins parts below the folder.
func (s Snapshot) Path(parts ...string) string {
	return filepath.Join(append([]string{s.Dir}, parts...)...)
}

// CheckWeights opens the checkpoint headers of each component folder.
func (s Snapshot) CheckWeights(dirs ...string) error {
	for _, d := range dirs {
		ck, err := safetensors.OpenCheckpoint(s.Path(d))
		if err != nil {
			return fmt.Errorf("fastvideo: model folder %s: %s/ weights: %w", s.Dir, d, err)
		}
		ck.Close()
	}
	return nil
}

// CheckTransformer is CheckParams on the transformer/ folder, taking the DiT's Params(cfg) result
// as it is.
func (s Snapshot) CheckTransformer(params weights.Shapes, err error) error {
	if err != nil {
		return err
	}
	return s.CheckParams(DirTransformer, params)
}

// CheckParams checks, from the headers alone, that the checkpoint in the component folder dir holds
// every parameter of the model's table (from its config) at the table's shape: a config that claims
// more layers or other widths than the weights present fails here, in New, instead of exhausting
// memory or failing halfway through a load. Tensors the table does not name are allowed.
func (s Snapshot) CheckParams(dir string, params weights.Shapes) error {
	ck, err := safetensors.OpenCheckpoint(s.Path(dir))
	if err != nil {
		return fmt.Errorf("fastvideo: model folder %s: %s/ weights: %w", s.Dir, dir, err)
	}
	defer ck.Close()
	var problems []string
	for _, p := range params {
		info, ok := ck.Tensor(p.Name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s missing", p.Name))
		case !slices.Equal(info.Shape, p.Shape):
			problems = append(problems, fmt.Sprintf("%s is %v, the config says %v", p.Name, info.Shape, p.Shape))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	const shown = 5
	more := ""
	if len(problems) > shown {
		more = fmt.Sprintf(" (and %d more)", len(problems)-shown)
		problems = problems[:shown]
	}
	return &api.RequestError{Field: "model", Value: s.Dir, Allowed: fmt.Sprintf(
		"a snapshot whose %s/config.json matches its weights: %s%s", dir, strings.Join(problems, "; "), more)}
}

// HasFile reports whether the component folder dir holds one of the regular files names.
func (s Snapshot) HasFile(dir string, names ...string) bool {
	for _, name := range names {
		if st, err := os.Stat(s.Path(dir, name)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// Weights returns an opener of the checkpoint in the component folder dir and its prompt-cache
// identity, kind:hash-of-the-folder.
func (s Snapshot) Weights(dir, kind string) (WeightOpener, string, error) {
	id, err := promptcache.FolderIdentity(s.Path(dir))
	if err != nil {
		return nil, "", err
	}
	open := func() (weights.Source, func() error, error) {
		ck, err := safetensors.OpenCheckpoint(s.Path(dir))
		if err != nil {
			return nil, nil, err
		}
		return ck, ck.Close, nil
	}
	return open, kind + ":" + id, nil
}

// InMemory is the weight opener of an in-memory source, which needs no closing.
func InMemory(src weights.Source) WeightOpener {
	return func() (weights.Source, func() error, error) { return src, func() error { return nil }, nil }
}

// TextParts are what a conditioner is built from: the tokenizer, and the text encoder's weights
// with their prompt-cache identity.
type TextParts[T any] struct {
	Tokenizer T
	Open      WeightOpener
	Identity  string
}

// LoadTextParts loads the tokenizer and locates the text encoder's weights (opened later, on the
// first prompt-cache miss).
func LoadTextParts[T any](tokenizer func() (T, error), textWeights func() (WeightOpener, string, error)) (TextParts[T], error) {
	var p TextParts[T]
	var err error
	if p.Tokenizer, err = tokenizer(); err != nil {
		return p, err
	}
	p.Open, p.Identity, err = textWeights()
	return p, err
}

// TextEncoder is what a conditioner needs of a text encoder: a way to build it on opened weights.
type TextEncoder struct {
	Open WeightOpener
	// New builds the encoder on the opened weights (streamed encoders read them per layer).
	New func(src weights.Source) (textenc.Encoder, func() error, error)
	// CacheKey holds the model-side prompt-cache key fields (Model, Layer, DType, Variant).
	CacheKey promptcache.Key
}

// NewConditioner builds the tokenizer -> text encoder -> prompt cache chain every family uses. The
// encoder is opened lazily, on the first cache miss (reported to s as the "text_encoder" load), so
// a cached prompt never reads its weights.
func NewConditioner(s *family.Session, tok textenc.Tokenizer, enc TextEncoder) *textenc.Conditioner {
	cond := &textenc.Conditioner{
		Tokenizer: tok,
		OpenEncoder: func() (textenc.Encoder, error) {
			s.NoteLoad("text_encoder")
			src, closeSrc, err := enc.Open()
			if err != nil {
				return nil, err
			}
			e, closeEnc, err := enc.New(src)
			if err != nil {
				return nil, errors.Join(err, closeSrc())
			}
			return &ownedEncoder{e, func() error { return errors.Join(closeEnc(), closeSrc()) }}, nil
		},
	}
	if dir := s.Engine.PromptCacheDir; dir != "" {
		cond.Cache = &promptcache.Cache{Dir: dir}
		cond.Key = enc.CacheKey
	}
	return cond
}

// ownedEncoder closes the weight source with the encoder.
type ownedEncoder struct {
	textenc.Encoder
	close func() error
}

func (e *ownedEncoder) Close() error { return e.close() }

// Unwrap gives callers the encoder's own type (textenc.Unwrap).
func (e *ownedEncoder) Unwrap() textenc.Encoder { return e.Encoder }

// Synthetic is a seeded random weight source over a model's own parameter table (Params): the
// weights of the built-in toy models, each tensor a function of the seed and its name only.
func Synthetic[C any](seed int64, params func(C) (weights.Shapes, error), cfg C, init weights.InitFunc) (*weights.Synthetic, error) {
	shapes, err := params(cfg)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: toy model: %w", err)
	}
	return weights.NewSynthetic(seed, shapes.Map(), init), nil
}

// ReadConfigJSON reads a small JSON file of a snapshot (a config, an index, a contract); a missing
// file wraps os.ErrNotExist.
func ReadConfigJSON(path string, v any) error {
	data, err := modelcfg.ReadJSON(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return err
		}
		return fmt.Errorf("fastvideo: reading %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("fastvideo: parsing %s: %w", path, err)
	}
	return nil
}

// MissingOr turns a missing file of a snapshot (err wraps os.ErrNotExist) into invalid input for
// the model field naming the file; other errors pass through.
func MissingOr(dir, snapshot, file string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return &api.RequestError{Field: "model", Value: dir, Allowed: fmt.Sprintf(
			"a complete %s snapshot: %s is missing", snapshot, filepath.Join(dir, file))}
	}
	if _, ok := err.(*api.RequestError); ok {
		return err
	}
	return fmt.Errorf("fastvideo: %w", err)
}

// ParamBytes sizes a parameter table (a model's Params) at a given bytes per value; an error
// sizes it 0. Used as ParamBytes(h3dit.Params(cfg))(2).
func ParamBytes(s weights.Shapes, err error) func(bytesPerValue int64) int64 {
	return func(b int64) int64 {
		if err != nil {
			return 0
		}
		return s.Count() * b
	}
}

// HasVSAGates reports whether a transformer folder's weights carry to_gate_compress, the gate of
// Video Sparse Attention that VSA-trained students (FastH3, FastWan) have: it reads the weight index
// JSON, or the header of a single safetensors file; a folder with configs only has none.
func HasVSAGates(dir string) (bool, error) {
	const gate = "to_gate_compress"
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	err := ReadConfigJSON(filepath.Join(dir, "diffusion_pytorch_model.safetensors.index.json"), &index)
	switch {
	case err == nil:
		for k := range index.WeightMap {
			if strings.Contains(k, gate) {
				return true, nil
			}
		}
		return false, nil
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	single := filepath.Join(dir, "diffusion_pytorch_model.safetensors")
	if _, err := os.Stat(single); err != nil {
		return false, nil
	}
	f, err := safetensors.Open(single)
	if err != nil {
		return false, fmt.Errorf("fastvideo: reading the header of %s: %w", single, err)
	}
	defer f.Close()
	return slices.ContainsFunc(f.Names(), func(k string) bool { return strings.Contains(k, gate) }), nil
}

// DescribeRandom names a random-weight source for messages: the model, the seed and where its
// geometry comes from (the release's for a built-in name, else the folder's configs).
func DescribeRandom(name, dir string, seed int64) string {
	where := "release geometry"
	if dir != "" {
		where = "the configs of " + dir
	}
	return fmt.Sprintf("%s with random weights (seed %d, %s)", name, seed, where)
}
