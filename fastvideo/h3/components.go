package h3

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/gomlx/compute/dtypes"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/lora"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/textenc"
	"fastvideo/internal/textenc/promptcache"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/internal/tokenizer"
	"fastvideo/internal/weights"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
	"fastvideo/vae/taehv"
)

// source is where an H3 model's components come from: a snapshot folder, or tiny-h3's in-memory
// random weights. Each load builds a fresh instance that the caller owns.
type source interface {
	familykit.Source
	loadTokenizer() (*tokenizer.Tokenizer, error)
	textWeights() (familykit.WeightOpener, string, error)
	newTextEncoder(e *family.Engine, cfg qwen3vl.Config, src weights.Source, opts qwen3vl.Options) (*qwen3vl.Encoder, error)
	// loadDiT loads the transformer with the adapters l merged (nil: none).
	loadDiT(e *family.Engine, opts h3dit.Options, l *familykit.LoRA) (*h3dit.Model, error)
	loadVideoVAE(e *family.Engine) (*h3video.Decoder, error)
	loadAudioVAE(e *family.Engine) (*h3audio.Decoder, error)
	// loadVision and loadVideoEncoder serve FL2VA keyframes: the Qwen3-VL vision tower (in the
	// text encoder's checkpoint) and the video VAE's encoder, both in float32.
	loadVision(e *family.Engine, cfg qwen3vl.VisionConfig) (*qwen3vl.Vision, error)
	loadVideoEncoder(e *family.Engine) (*h3video.Encoder, error)
}

// components are an opened H3 model: its source, its text encoder config and the slots of the
// components the memory policy keeps resident.
type components struct {
	familykit.Opened[source]
	spec    *Spec
	textCfg qwen3vl.Config

	cond *textenc.Conditioner
	// tok is the tokenizer PromptTokens counts with, loaded at its first use.
	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tokErr  error
	vision  *qwen3vl.Vision
	encoder *h3video.Encoder
	dit     *h3dit.Model
	video   *h3video.Decoder
	audio   *h3audio.Decoder
	// tinyDec is where the TAEHV tiny decoder comes from (Request.Decoder "tiny", previews); tiny
	// the loaded one while resident.
	tinyDec *familykit.TinyDecoder
	tiny    *taehv.Decoder
}

// Close releases the resident components.
func (c *components) Close() error {
	return errors.Join(family.Release(&c.cond), family.Release(&c.vision), family.Release(&c.encoder), family.Release(&c.dit),
		family.Release(&c.video), family.Release(&c.audio), family.Release(&c.tiny), c.LoRA.Close())
}

// TinyVariant is the TAEHV file that decodes H3 latents.
const TinyVariant = "taeh3"

// tinyConfig is the TAEHV layout of s's latents: taeh3 (24 channels, patch 2, H3's trimming) at the
// model's latent width and spatial ratio (tiny-h3's too).
func (s *Spec) tinyConfig() taehv.Config {
	cfg := taehv.Taeh3()
	cfg.LatentChannels = s.VAE.LatentChannels
	cfg.PatchSize = max(1, s.VAE.SpatialRatio()/8)
	return cfg
}

// CheckDecoder is checkTiny for a plan (family.DecoderChecker).
func (c *components) CheckDecoder(r family.Resolution) error { return c.checkTiny(r.(*resolved)) }

// checkTiny refuses, before anything loads, a run that needs the tiny decoder without its weights.
func (c *components) checkTiny(r *resolved) error { return c.tinyDec.CheckRun(r.Decoder, r.Preview) }

// loadTiny acquires the tiny decoder (resident as the memory policy decides).
func (c *components) loadTiny(s *family.Session) (*taehv.Decoder, error) {
	return c.tinyDec.Acquire(s, &c.tiny)
}

// Open prepares generation: a folder's text encoder config is read and checked against the DiT,
// and every weight checkpoint's headers and the tokenizer are checked; nothing heavy is loaded.
func (s *Spec) Open(e *family.Engine) (family.Components, error) {
	c := &components{Opened: familykit.Opened[source]{Engine: e}, spec: s}
	var err error
	if c.tinyDec, err = familykit.FindTinyDecoder(e, s.Dir, TinyVariant, s.tinyConfig(), s.Dir == "" || e.RandomWeights != nil); err != nil {
		return nil, err
	}
	if e.RandomWeights != nil {
		if err := c.openRandom(*e.RandomWeights); err != nil {
			return nil, err
		}
		// Adapters merge into the weights as they are drawn (randomSource.loadDiT).
		c.LoRA, err = familykit.OpenAdapters(e.LoRA, h3dit.LoRANames(), s.tableShapes)
		return c, err
	}
	if s.Dir == "" {
		if s.Name != TinyName {
			return nil, &api.RequestError{Field: "model", Value: s.Name, Allowed: fmt.Sprintf(
				"%s or a MiniMax H3 snapshot folder: %q is a built-in specification without weights, usable with Plan; "+
					"download the checkpoint and pass its folder (%s)", TinyName, s.Name, Family{}.FolderLayout())}
		}
		c.Src, c.textCfg = newTinySource(s), tinyTextEncoder()
		return c, c.openLoRA()
	}
	f := &folder{Snapshot: familykit.Snapshot{Dir: s.Dir}, spec: s}
	if err := c.readTextConfig(f); err != nil {
		return nil, err
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	// A converted checkpoint's names and packing differ from the released table.
	if !h3dit.IsConverted(f.Path(familykit.DirTransformer)) {
		if err := f.CheckTransformer(h3dit.Params(s.DiT)); err != nil {
			return nil, err
		}
	}
	c.Src = f
	return c, c.openLoRA()
}

// loraShapes are the DiT checkpoint's tensor shapes adapters are planned against: a released folder's
// headers, else the parameter table (tiny-h3's synthetic weights follow it). A converted checkpoint
// (MLX affine INT8/INT6/INT4 or block-scaled float linears, or a fixed AdaLN cache in place of the AdaLN
// projections) takes no adapter: merging into quantized words would mean dequantizing, merging and
// requantizing, which this SDK does not do.
func (s *Spec) loraShapes() (lora.Shapes, error) {
	if s.Dir == "" {
		return s.tableShapes()
	}
	dir := filepath.Join(s.Dir, familykit.DirTransformer)
	switch {
	case h3dit.IsConverted(dir):
		return nil, &api.RequestError{Field: "lora", Value: dir, Allowed: "adapters on a dense checkpoint only: this transformer/ is a converted MLX checkpoint " +
			"(quantized or block-scaled linears), whose weights an adapter cannot be merged into without requantizing; load the released (dense) transformer with the adapter, and convert afterwards if needed"}
	case s.AdaLN != nil:
		return nil, &api.RequestError{Field: "lora", Value: dir, Allowed: "adapters on a checkpoint without a fixed AdaLN cache: this transformer/ carries precomputed AdaLN tables " +
			"in place of the AdaLN projections, which an adapter changes; load the released (dense) transformer with the adapter"}
	}
	return familykit.CheckpointShapes(dir)
}

// tableShapes are the DiT's parameter table: what tiny-h3 and random weights are drawn to.
func (s *Spec) tableShapes() (lora.Shapes, error) {
	table, err := h3dit.Params(s.DiT)
	return familykit.ShapesOf(table), err
}

// PlanLoRA validates adapters against the DiT's weights and reports what each changes
// (family.LoRAPlanner).
func (s *Spec) PlanLoRA(adapters []api.LoRA) ([]api.PlanLoRA, error) {
	return familykit.PlanAdapters(adapters, h3dit.LoRANames(), s.loraShapes)
}

// openLoRA opens and validates the engine's adapters against the DiT's weights (nothing loads).
func (c *components) openLoRA() (err error) {
	c.LoRA, err = familykit.OpenAdapters(c.Engine.LoRA, h3dit.LoRANames(), c.spec.loraShapes)
	return err
}

// readTextConfig reads the folder's text encoder config and checks it against the DiT.
func (c *components) readTextConfig(f *folder) error {
	var err error
	if c.textCfg, err = qwen3vl.LoadConfig(f.Path(familykit.DirTextEncoder)); err != nil {
		return fmt.Errorf("fastvideo: %w (the snapshot's text_encoder/ holds the Qwen3-VL config.json and weights)", err)
	}
	if _, err := textOptions(c.textCfg, dtypes.Float32).ResolveHiddenState(c.textCfg); err != nil {
		return fmt.Errorf("fastvideo: %s: %w (MiniMax H3 reads the output of text layer %d)", f.Path(familykit.DirTextEncoder), err, qwen3vl.H3HiddenStateIndex)
	}
	if c.textCfg.HiddenSize != c.spec.DiT.TextDim {
		return fmt.Errorf("fastvideo: the text encoder's hidden_size %d (%s) differs from the transformer's text_dim %d",
			c.textCfg.HiddenSize, f.Path(familykit.DirTextEncoder, "config.json"), c.spec.DiT.TextDim)
	}
	return nil
}

// openRandom sources every component from random weights (Engine.RandomWeights): a built-in
// model at its geometry (the release's, or tiny-h3's: then drawn from the seed rather than its
// fixed weights) with its text stack, a folder at its configs' geometry without reading its
// weight files.
func (c *components) openRandom(seed int64) error {
	c.textCfg = c.spec.builtinTextConfig()
	if c.spec.Dir != "" {
		if err := c.readTextConfig(&folder{Snapshot: familykit.Snapshot{Dir: c.spec.Dir}, spec: c.spec}); err != nil {
			return err
		}
	}
	c.Src = newRandomSource(c.spec, c.textCfg, seed)
	return nil
}

// builtinTextConfig is the text encoder config of a built-in model (tiny-h3's toy stack, else the
// released Qwen3-VL-32B); a folder's own config.json overrides it when read.
func (s *Spec) builtinTextConfig() qwen3vl.Config {
	if s.Name == TinyName {
		return tinyTextEncoder()
	}
	return qwen3vl.Q32B()
}

// conditioner builds the tokenizer -> Qwen3-VL -> prompt cache chain.
func (c *components) conditioner(s *family.Session) (*textenc.Conditioner, error) {
	parts, err := familykit.LoadTextParts(c.Src.loadTokenizer, c.Src.textWeights)
	if err != nil {
		return nil, err
	}
	cfg, dt := c.textCfg, c.Engine.DType
	opts := textOptions(cfg, dt)
	opts.Resident = c.Engine.Keeps(family.CompTextEncoder)
	index, err := opts.ResolveHiddenState(cfg)
	if err != nil {
		return nil, err
	}
	return familykit.NewConditioner(s, tokenizerAdapter{parts.Tokenizer}, familykit.TextEncoder{
		Open: parts.Open,
		New: func(src weights.Source) (textenc.Encoder, func() error, error) {
			enc, err := c.Src.newTextEncoder(c.Engine, cfg, src, opts)
			if err != nil {
				return nil, nil, err
			}
			return enc, enc.Close, nil
		},
		CacheKey: promptcache.Key{Model: parts.Identity, Layer: index, DType: dt.String(), Variant: "prefix=" + qwen3vl.DefaultPrefix},
	}), nil
}

// textOptions are H3's encoder options: the output of text layer 50 (hidden_states[50]), unless
// the config names its own output index (tiny-h3 reads its last layer).
func textOptions(cfg qwen3vl.Config, dt dtypes.DType) qwen3vl.Options {
	opts := textenc.H3Options(dt)
	if cfg.OutputHiddenStateIndex > 0 {
		opts.HiddenStateIndex = 0
	}
	return opts
}

// PromptTokens counts the prompt's tokens as the condition stage will (family.PromptCounter).
func (c *components) PromptTokens(prompt string) (int, error) {
	c.tokOnce.Do(func() { c.tok, c.tokErr = c.Src.loadTokenizer() })
	if c.tokErr != nil {
		return 0, c.tokErr
	}
	return len(c.tok.Encode(prompt)), nil
}

// tokenizerAdapter gives the tokenizer the conditioner's interface (its Encode cannot fail).
type tokenizerAdapter struct{ t *tokenizer.Tokenizer }

func (a tokenizerAdapter) Encode(text string) ([]int, error) { return a.t.Encode(text), nil }
func (a tokenizerAdapter) Fingerprint() string               { return a.t.Fingerprint() }

// folder is an H3 snapshot folder as a component source.
type folder struct {
	familykit.Snapshot
	checkpointText
	spec *Spec
}

// checkpointText builds the text encoder from the weights textWeights opened (a folder's
// checkpoint, tiny-h3's in-memory tensors); the random source draws its own instead.
type checkpointText struct{}

func (checkpointText) newTextEncoder(e *family.Engine, cfg qwen3vl.Config, src weights.Source, opts qwen3vl.Options) (*qwen3vl.Encoder, error) {
	return qwen3vl.New(e.Backend, cfg, src, opts)
}

func (f *folder) Check() error {
	if err := f.CheckWeights(familykit.DirTransformer, familykit.DirVAE, dirAudioVAE, familykit.DirTextEncoder); err != nil {
		return err
	}
	if f.HasFile(familykit.DirTokenizer, "tokenizer.json", "tokenizer.json.gz") {
		return nil
	}
	return &api.RequestError{Field: "model", Value: f.Dir, Allowed: fmt.Sprintf(
		"a complete MiniMax H3 snapshot: %s (the Qwen3 tokenizer) is missing", filepath.Join(f.Dir, familykit.DirTokenizer, "tokenizer.json"))}
}

func (f *folder) loadTokenizer() (*tokenizer.Tokenizer, error) {
	return tokenizer.Load(f.Path(familykit.DirTokenizer))
}

func (f *folder) textWeights() (familykit.WeightOpener, string, error) {
	return f.Weights(familykit.DirTextEncoder, "qwen3vl")
}

func (f *folder) loadDiT(e *family.Engine, opts h3dit.Options, l *familykit.LoRA) (*h3dit.Model, error) {
	dir := f.Path(familykit.DirTransformer)
	if l != nil && opts.Shards > 1 {
		// Tensor-parallel shards are cut from the checkpoint as they load and never bound whole, so the
		// adapters merge into the bytes as they are read (on the host); the merged model owns its weights
		// (LoadMerged copies), so the checkpoint closes after the load. Open admitted adapters only for a
		// released (dense, cache-free) transformer/.
		return modelkit.LoadCheckpoint(dir, "h3", func(src weights.Source) (*h3dit.Model, error) {
			return familykit.LoadMerged(l, src, func(src weights.Source) (*h3dit.Model, error) {
				return h3dit.FromSource(e.Backend, f.spec.DiT, src, opts)
			})
		})
	}
	return familykit.BuildMerged(l, f.spec.loraShapes, func(onBind func(*weights.Param) error) (*h3dit.Model, error) {
		opts.OnBind = onBind
		return h3dit.Load(e.Backend, dir, opts)
	})
}

func (f *folder) loadVideoVAE(e *family.Engine) (*h3video.Decoder, error) {
	return modelkit.LoadCheckpoint(f.Path(familykit.DirVAE), "h3video", func(src weights.Source) (*h3video.Decoder, error) {
		return h3video.FromSource(e.Backend, f.spec.VAE, src, videoVAEOptions(e))
	})
}

func (f *folder) loadAudioVAE(e *family.Engine) (*h3audio.Decoder, error) {
	return modelkit.LoadCheckpoint(f.Path(dirAudioVAE), "h3audio", func(src weights.Source) (*h3audio.Decoder, error) {
		return h3audio.FromSource(e.Backend, f.spec.AudioVAE, src, h3audio.Options{})
	})
}

// ComponentSizes are the device bytes of each heavyweight component (family.ComponentSizer), most
// costly to bring back first: the DiT as the plan sizes it (its VSA gates included, FP8 linears as
// codes and scales), the video VAE at the engine's dtype, the audio VAE in float32 (its ~18 s compile
// on the H200 makes it dearer to bring back than its size says), for a model that takes keyframes the
// vision tower and the video VAE's encoder in float32 (the precision they load in), and the text
// layers up to the hidden state H3 reads, which stream one layer at a time when not kept.
func (c *components) ComponentSizes() []api.ComponentSize {
	return componentSizes(c.spec, c.textCfg, c.Engine.DType, c.Engine.RunDType())
}

// componentSizes sizes an H3 model's components for a compute dtype dt (runDType: FP8 when the DiT's
// linears are FP8).
func componentSizes(spec *Spec, textCfg qwen3vl.Config, dt dtypes.DType, runDType api.DType) []api.ComponentSize {
	size := int64(dt.Size())
	text := familykit.ParamBytes(qwen3vl.Params(textCfg))(size)
	layer := text
	if n := int64(textCfg.NumHiddenLayers); n > 0 {
		layer = text / n
		if index, err := textOptions(textCfg, dt).ResolveHiddenState(textCfg); err == nil {
			text = text * int64(index) / n
		}
	}
	dit, err := ditWeightBytes(spec.DiT, spec.VSAGates, runDType)
	if err != nil {
		dit = 0
	}
	if spec.DiTStoredBytes > 0 {
		dit = spec.DiTStoredBytes
	}
	sizes := []api.ComponentSize{
		{Name: family.CompDiT, Bytes: dit},
		{Name: family.CompVideoVAE, Bytes: familykit.ParamBytes(h3video.Params(spec.VAE))(size)},
		{Name: family.CompAudioVAE, Bytes: familykit.ParamBytes(h3audio.Params(spec.AudioVAE))(4)},
	}
	if v := spec.Vision; v != nil && (spec.FirstImage || spec.LastImage) {
		sizes = append(sizes,
			api.ComponentSize{Name: family.CompVisionEncoder, Bytes: familykit.ParamBytes(qwen3vl.VisionParams(*v))(4)},
			api.ComponentSize{Name: family.CompVideoVAEEncoder, Bytes: familykit.ParamBytes(h3video.EncoderParams(spec.VAE))(4)})
	}
	sizes = append(sizes, api.ComponentSize{Name: family.CompTextEncoder, Bytes: text, StreamBytes: layer})
	tiny := familykit.TinyDecoder{Config: spec.tinyConfig()}
	return append(sizes, tiny.Size(size))
}

func (f *folder) loadVision(e *family.Engine, cfg qwen3vl.VisionConfig) (*qwen3vl.Vision, error) {
	return modelkit.LoadCheckpoint(f.Path(familykit.DirTextEncoder), "qwen3vl", func(src weights.Source) (*qwen3vl.Vision, error) {
		return qwen3vl.NewVision(e.Backend, cfg, src)
	})
}

func (f *folder) loadVideoEncoder(e *family.Engine) (*h3video.Encoder, error) {
	return modelkit.LoadCheckpoint(f.Path(familykit.DirVAE), "h3video", func(src weights.Source) (*h3video.Encoder, error) {
		return h3video.EncoderFromSource(e.Backend, f.spec.VAE, src, encoderOptions)
	})
}

// encoderOptions: FL2VA encodes keyframes in float32, the released precision.
var encoderOptions = h3video.Options{DType: dtypes.Float32}
