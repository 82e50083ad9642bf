package wan

import (
	"context"

	"errors"
	"fmt"
	"path/filepath"

	"github.com/gomlx/compute/dtypes"

	wandit "fastvideo/dit/wan"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/lora"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/promptcache"
	"fastvideo/internal/textenc/umt5"
	"fastvideo/internal/tokenizer/unigram"
	"fastvideo/internal/weights"
	"fastvideo/vae/taehv"
	wanvae "fastvideo/vae/wan"
)

// source is where a Wan model's components come from: a snapshot folder, or tiny-wan's in-memory
// random weights. Each load builds a fresh instance that the caller owns.
type source interface {
	familykit.Source
	loadTokenizer() (*unigram.Tokenizer, error)
	textWeights() (familykit.WeightOpener, string, error)
	newTextEncoder(e *family.Engine, cfg umt5.Config, src weights.Source, opts umt5.Options) (*umt5.Encoder, error)
	// loadDiT loads the transformer with the adapters l merged (nil: none).
	loadDiT(e *family.Engine, l *familykit.LoRA) (*wandit.Model, error)
	loadVAE(e *family.Engine) (*wanvae.Decoder, error)
	// loadEncoder loads the VAE with its encoder, in float32 (FastVideo encodes in fp32).
	loadEncoder(e *family.Engine) (*wanvae.Decoder, error)
}

// components are an opened Wan model: its source and the resident slots of the AllResident memory
// policy.
type components struct {
	familykit.Opened[source]
	spec *Spec

	cond *textenc.Conditioner
	dit  *wandit.Model
	// replica is the DiT on the unconditional forwards' device (CFG-parallel runs).
	replica *wandit.Model
	vae     *wanvae.Decoder
	enc     *wanvae.Decoder // the VAE with its encoder (image-to-video)
	// tinyDec is where the TAEHV tiny decoder comes from (Request.Decoder "tiny", previews); tiny
	// the loaded one while resident.
	tinyDec *familykit.TinyDecoder
	tiny    *taehv.Decoder
}

// tinyDecoder is the TAEHV file and layout that decode s's latents: taew2_2 (48 channels, patch 2)
// for Wan2.2-TI2V-5B's VAE, else taew2_1 (16 channels), at the model's latent width and spatial ratio.
func (s *Spec) tinyDecoder() (string, taehv.Config) {
	variant, cfg := "taew2_1", taehv.Taew21()
	if s.VAE.ZDim == taehv.Taew22().LatentChannels {
		variant, cfg = "taew2_2", taehv.Taew22()
	}
	cfg.LatentChannels = s.VAE.ZDim
	cfg.PatchSize = max(1, s.VAE.SpatialRatio()/8)
	return variant, cfg
}

// CheckDecoder is checkTiny for a plan (family.DecoderChecker).
func (c *components) CheckDecoder(r family.Resolution) error { return c.checkTiny(r.(*resolved)) }

// checkTiny refuses, before anything loads, a run that needs the tiny decoder without its weights.
func (c *components) checkTiny(r *resolved) error { return c.tinyDec.CheckRun(r.Decoder, r.Preview) }

// loadTiny acquires the tiny decoder (resident as the memory policy decides).
func (c *components) loadTiny(s *family.Session) (*taehv.Decoder, error) {
	return c.tinyDec.Acquire(s, &c.tiny)
}

// Close releases the resident components.
func (c *components) Close() error {
	return errors.Join(family.Release(&c.cond), family.Release(&c.replica), family.Release(&c.dit), family.Release(&c.vae), family.Release(&c.enc),
		family.Release(&c.tiny), c.LoRA.Close())
}

// errNoFP8 refuses DType FP8, which has no Wan path.
var errNoFP8 = &api.RequestError{Field: "dtype", Value: string(api.FP8),
	Allowed: `"f32", "bf16" or auto: the FP8 path covers the MiniMax H3 DiT only`}

// Open prepares generation: the configs were read and checked by ReadFolder; here every weight
// checkpoint's headers open and the tokenizer file exists.
func (s *Spec) Open(e *family.Engine) (family.Components, error) {
	c := &components{Opened: familykit.Opened[source]{Engine: e}, spec: s}
	if e.FP8 {
		return nil, errNoFP8
	}
	variant, cfg := s.tinyDecoder()
	var err error
	if c.tinyDec, err = familykit.FindTinyDecoder(e, s.Dir, variant, cfg, s.Dir == "" || e.RandomWeights != nil); err != nil {
		return nil, err
	}
	if e.RandomWeights != nil {
		c.Src = &randomSource{spec: s, seed: *e.RandomWeights}
		// Adapters merge into the weights as they are drawn (randomSource.loadDiT).
		c.LoRA, err = familykit.OpenAdapters(e.LoRA, wandit.LoRANames(), s.tableShapes)
		return c, err
	}
	if s.Dir == "" {
		if s.Name != TinyName && s.Name != Tiny22Name {
			return nil, &api.RequestError{Field: "model", Value: s.Name, Allowed: fmt.Sprintf(
				"%s or a Wan snapshot folder: %q is a built-in specification without weights, usable with Plan; "+
					"download the checkpoint (%s) and pass its folder (%s)", TinyName, s.Name,
				joinIDs(s.presets[s.DefaultPreset].ModelIDs), Family{}.FolderLayout())}
		}
		c.Src = newTinySource(s)
		return c, c.openLoRA()
	}
	f := &folder{Snapshot: familykit.Snapshot{Dir: s.Dir}, spec: s}
	if err := f.Check(); err != nil {
		return nil, err
	}
	if err := f.CheckTransformer(wandit.Params(s.DiT)); err != nil {
		return nil, err
	}
	c.Src = f
	return c, c.openLoRA()
}

// loraShapes are the DiT checkpoint's tensor shapes adapters are planned against: a folder's headers,
// else the parameter table (the built-in models' synthetic weights follow it).
func (s *Spec) loraShapes() (lora.Shapes, error) {
	if s.Dir != "" {
		return familykit.CheckpointShapes(filepath.Join(s.Dir, familykit.DirTransformer))
	}
	return s.tableShapes()
}

// tableShapes are the DiT's parameter table: what the built-in models and random weights are drawn to.
func (s *Spec) tableShapes() (lora.Shapes, error) {
	table, err := wandit.Params(s.DiT)
	return familykit.ShapesOf(table), err
}

// PlanLoRA validates adapters against the DiT's weights and reports what each changes
// (family.LoRAPlanner).
func (s *Spec) PlanLoRA(adapters []api.LoRA) ([]api.PlanLoRA, error) {
	return familykit.PlanAdapters(adapters, wandit.LoRANames(), s.loraShapes)
}

// openLoRA opens and validates the engine's adapters against the DiT's weights (nothing loads).
func (c *components) openLoRA() (err error) {
	c.LoRA, err = familykit.OpenAdapters(c.Engine.LoRA, wandit.LoRANames(), c.spec.loraShapes)
	return err
}

func joinIDs(ids []string) string {
	if len(ids) == 0 {
		return "its snapshot"
	}
	out := ids[0]
	for _, id := range ids[1:] {
		out += " or " + id
	}
	return out
}

// conditioner builds the UMT5 tokenizer -> encoder -> prompt cache chain. Its hidden state is the
// encoder's last hidden state over the prompt's own tokens ([n, d_model], </s> included); the
// denoise stage zero-pads it to TextLen rows.
func (c *components) conditioner(s *family.Session) (*textenc.Conditioner, error) {
	parts, err := familykit.LoadTextParts(c.Src.loadTokenizer, c.Src.textWeights)
	if err != nil {
		return nil, err
	}
	cfg, textLen, dt := c.spec.TextEncoder, c.spec.TextLen, c.Engine.DType
	return familykit.NewConditioner(s, tokenizerAdapter{parts.Tokenizer, textLen}, familykit.TextEncoder{
		Open: parts.Open,
		New: func(src weights.Source) (textenc.Encoder, func() error, error) {
			enc, err := c.Src.newTextEncoder(c.Engine, cfg, src, umt5.Options{DType: dt, Resident: c.Engine.Keeps(family.CompTextEncoder), TextLen: textLen})
			if err != nil {
				return nil, nil, err
			}
			return umt5Encoder{enc}, enc.Close, nil
		},
		CacheKey: promptcache.Key{Model: parts.Identity, Layer: cfg.NumLayers, DType: dt.String(), Variant: "umt5 last_hidden_state"},
	}), nil
}

// tokenizerAdapter tokenizes like FastVideo's Wan text stage: special tokens added (T5: a final
// </s>), truncated to text_len ids, no padding.
type tokenizerAdapter struct {
	t       *unigram.Tokenizer
	textLen int
}

func (w tokenizerAdapter) Encode(text string) ([]int, error) {
	return w.t.EncodeWithSpecial(text, w.textLen)
}
func (w tokenizerAdapter) Fingerprint() string {
	return fmt.Sprintf("%s;special;max_length=%d", w.t.Fingerprint(), w.textLen)
}

// umt5Encoder runs the UMT5 encoder over the prompt's own tokens (no padding, so no mask).
type umt5Encoder struct{ *umt5.Encoder }

func (e umt5Encoder) Encode(ctx context.Context, ids []int) ([]float32, []int, error) {
	return e.Encoder.Encode(ctx, ids, nil)
}

// folder is a Wan snapshot folder as a component source.
type folder struct {
	familykit.Snapshot
	checkpointText
	spec *Spec
}

// checkpointText builds the UMT5 encoder from the weights textWeights opened (a folder's
// checkpoint, tiny-wan's in-memory tensors); the random source draws its own instead.
type checkpointText struct{}

func (checkpointText) newTextEncoder(e *family.Engine, cfg umt5.Config, src weights.Source, opts umt5.Options) (*umt5.Encoder, error) {
	return umt5.FromSource(e.Backend, cfg, src, opts)
}

func (f *folder) Check() error {
	if err := f.CheckWeights(familykit.DirTransformer, familykit.DirVAE, familykit.DirTextEncoder); err != nil {
		return err
	}
	if f.HasFile(familykit.DirTokenizer, "tokenizer.json", "spiece.model") {
		return nil
	}
	return &api.RequestError{Field: "model", Value: f.Dir, Allowed: fmt.Sprintf(
		"a complete Wan snapshot: neither %s nor %s (the UMT5 tokenizer) exists",
		filepath.Join(f.Dir, familykit.DirTokenizer, "tokenizer.json"), filepath.Join(f.Dir, familykit.DirTokenizer, "spiece.model"))}
}

func (f *folder) loadTokenizer() (*unigram.Tokenizer, error) {
	return unigram.Load(f.Path(familykit.DirTokenizer), unigram.Options{})
}

func (f *folder) textWeights() (familykit.WeightOpener, string, error) {
	return f.Weights(familykit.DirTextEncoder, "umt5")
}

func (f *folder) loadDiT(e *family.Engine, l *familykit.LoRA) (*wandit.Model, error) {
	return familykit.BuildMerged(l, f.spec.loraShapes, func(onBind func(*weights.Param) error) (*wandit.Model, error) {
		return wandit.Load(e.Backend, f.Path(familykit.DirTransformer), wandit.Options{DType: e.DType, Attention: e.Attention, OnBind: onBind})
	})
}

func (f *folder) loadVAE(e *family.Engine) (*wanvae.Decoder, error) {
	return modelkit.LoadCheckpoint(f.Path(familykit.DirVAE), "wan", func(src weights.Source) (*wanvae.Decoder, error) {
		return wanvae.FromSource(e.Backend, f.spec.VAE, src, wanvae.Options{DType: e.DType})
	})
}

func (f *folder) loadEncoder(e *family.Engine) (*wanvae.Decoder, error) {
	return modelkit.LoadCheckpoint(f.Path(familykit.DirVAE), "wan", func(src weights.Source) (*wanvae.Decoder, error) {
		return wanvae.FromSource(e.Backend, f.spec.VAE, src, encoderOptions)
	})
}

// encoderOptions build the VAE for encoding: float32, FastVideo's VAE encode precision.
var encoderOptions = wanvae.Options{DType: dtypes.Float32, Encoder: true}

// ComponentSizes are the device bytes of each heavyweight component at the engine's dtype
// (family.ComponentSizer), most costly to bring back first: the DiT, the VAE (and, for a model that
// takes a first image, the VAE with its encoder in float32), then the UMT5 encoder, which streams
// one layer at a time when not kept.
func (c *components) ComponentSizes() []api.ComponentSize {
	return componentSizes(c.spec, c.Engine.DType)
}

// componentSizes sizes a Wan model's components for a compute dtype.
func componentSizes(spec *Spec, dt dtypes.DType) []api.ComponentSize {
	size := int64(dt.Size())
	text := familykit.ParamBytes(umt5.Params(spec.TextEncoder))(size)
	layer := text
	if n := int64(spec.TextEncoder.NumLayers); n > 0 {
		layer = text / n
	}
	sizes := []api.ComponentSize{
		{Name: family.CompDiT, Bytes: familykit.ParamBytes(wandit.Params(spec.DiT))(size)},
		{Name: family.CompVideoVAE, Bytes: familykit.ParamBytes(wanvae.Params(spec.VAE))(size)},
	}
	if spec.FirstImage {
		enc := familykit.ParamBytes(wanvae.Params(spec.VAE))(4) + familykit.ParamBytes(wanvae.EncoderParams(spec.VAE))(4)
		sizes = append(sizes, api.ComponentSize{Name: family.CompVideoVAEEncoder, Bytes: enc})
	}
	sizes = append(sizes, api.ComponentSize{Name: family.CompTextEncoder, Bytes: text, StreamBytes: layer})
	_, cfg := spec.tinyDecoder()
	tiny := familykit.TinyDecoder{Config: cfg}
	return append(sizes, tiny.Size(size))
}
