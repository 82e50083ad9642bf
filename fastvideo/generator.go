package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	wandit "fastvideo/dit/wan"
	"fastvideo/internal/backend"
	"fastvideo/internal/media"
	"fastvideo/internal/textenc"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
	wanvae "fastvideo/vae/wan"
)

// ErrClosed is returned by Generate after Close.
var ErrClosed = errors.New("fastvideo: the VideoGenerator is closed")

// VideoGenerator generates videos from text prompts with one model (FastVideo's VideoGenerator):
// with synchronized stereo audio for MiniMax H3, video only for Wan. Create it with New, call
// Generate any number of times, then Close.
//
// It is safe for concurrent use: Generate calls run one at a time (a generation already uses the
// whole device), in the order they acquire the generator, and Close waits for the running one.
//
// Memory: with the default OneResident policy the text encoder, the DiT and the VAEs are loaded
// one after the other within each Generate and released before the next is loaded, so peak memory
// is the largest component; WithMemoryPolicy(AllResident) keeps them loaded between calls.
type VideoGenerator struct {
	spec  *ModelSpec
	opts  Options
	files modelFiles    // the model's components, either family
	comp  components    // MiniMax H3 (nil for Wan)
	wcomp wanComponents // Wan (nil for MiniMax H3)

	backend compute.Backend
	media   media.Tools // the ffmpeg and ffprobe executables
	// backendKind is "go" or "xla"; backendSpec the resolved spec, e.g. "go:ops_sequential".
	backendKind, backendSpec string
	dtype                    dtypes.DType // compute dtype of the DiT, the video VAE and the text encoder

	mu     sync.Mutex
	closed bool
	// Resident components (AllResident only).
	cond   *textenc.Conditioner // either family's text conditioner
	dit    *h3.Model
	video  *h3video.Decoder
	audio  *h3audio.Decoder
	wanDiT *wandit.Model
	wanVAE *wanvae.Decoder

	// loads counts heavyweight loads (tokenizer, text encoder, DiT, VAEs); loadHook, when set,
	// sees each one. Tests use them to prove that bad requests fail before anything loads.
	loads    atomic.Int64
	loadHook func(component string)
}

// New opens a model for generation: "tiny-h3" or "tiny-wan" (built in, random weights, no files), a
// MiniMax H3 / FastH3 snapshot folder holding transformer/, vae/, audio_vae/, text_encoder/,
// tokenizer/ and scheduler/ (the diffusers layout of MiniMaxAI/MiniMax-H3 and the FastH3 students),
// or a Wan snapshot folder holding model_index.json, transformer/, vae/, text_encoder/ and tokenizer/
// (the diffusers layout of Wan-AI/Wan2.1-T2V-1.3B-Diffusers, FastVideo/FastWan2.1-T2V-1.3B-Diffusers,
// Wan-AI/Wan2.2-TI2V-5B-Diffusers, ...).
//
// New checks everything that can fail before any weight is read: the folder's configs parse and
// agree with each other, every component's weight files exist and their headers are valid, the
// compute backend starts, and an ffmpeg with libx264 (and AAC, which H3 needs) is available. It
// loads no weights. "fasth3", "h3", "wan2.1-t2v-1.3b", ... name specifications without weights: they
// work with Plan, and New asks for the snapshot folder instead. Invalid input is a *RequestError.
func New(ctx context.Context, model string, opts ...Option) (*VideoGenerator, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.Memory == "" {
		o.Memory = OneResident
	}
	spec, err := LookupModel(model)
	if err != nil {
		return nil, err
	}
	g := &VideoGenerator{spec: spec, opts: o}
	switch {
	case spec.Variant == "tiny-h3" && spec.Dir == "":
		g.comp = newTinyComponents(spec)
	case spec.Variant == tinyWanName && spec.Dir == "":
		g.wcomp = newTinyWanComponents(spec)
	case spec.Dir != "" && spec.Family == FamilyWan:
		c, err := openWanFolder(spec)
		if err != nil {
			return nil, err
		}
		g.wcomp = c
	case spec.Dir != "":
		c, err := openFolder(spec)
		if err != nil {
			return nil, err
		}
		g.comp = c
	case spec.Family == FamilyWan:
		return nil, &RequestError{Field: "model", Value: model, Allowed: fmt.Sprintf(
			"tiny-wan or a Wan snapshot folder (with %s, %s/, %s/, %s/, %s/): %q is a built-in specification "+
				"without weights, usable with Plan; download the checkpoint (%s) and pass its folder",
			wanModelIndex, dirTransformer, dirVAE, dirTextEncoder, dirTokenizer, model,
			strings.Join(spec.Presets[spec.DefaultPreset].ModelIDs, " or "))}
	default:
		return nil, &RequestError{Field: "model", Value: model, Allowed: fmt.Sprintf(
			"tiny-h3 or a MiniMax H3 snapshot folder (with %s/, %s/, %s/, %s/, %s/): %q is a built-in specification "+
				"without weights, usable with Plan; download the checkpoint and pass its folder",
			dirTransformer, dirVAE, dirAudioVAE, dirTextEncoder, dirTokenizer, model)}
	}
	if g.comp != nil {
		g.files = g.comp
	} else {
		g.files = g.wcomp
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if g.media, err = findMediaTools(); err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	bp, err := backend.Resolve(o.Backend)
	if err != nil {
		return nil, &RequestError{Field: "backend", Value: o.Backend, Allowed: err.Error()}
	}
	b, err := bp.Open()
	if err != nil {
		return nil, fmt.Errorf("fastvideo: starting the compute backend: %w", err)
	}
	g.backend, g.backendKind, g.backendSpec = b, string(bp.Backend), bp.Spec
	switch o.DType {
	case F32:
		g.dtype = dtypes.Float32
	case BF16:
		g.dtype = dtypes.BFloat16
	default:
		// The pure-Go backend is exact and fastest in f32 (its half-precision kernels are slow);
		// accelerators get bf16, the release precision.
		g.dtype = dtypes.BFloat16
		if bp.Backend == "go" {
			g.dtype = dtypes.Float32
		}
	}
	return g, nil
}

// Model returns the model's specification (configs, presets).
func (g *VideoGenerator) Model() *ModelSpec { return g.spec }

// Backend returns the compute backend's resolved spec and the compute dtype, e.g.
// "go:ops_sequential", "f32".
func (g *VideoGenerator) Backend() (spec string, dtype DType) {
	return g.backendSpec, dtypeName(g.dtype)
}

// Plan resolves a request against the generator's model without running it (see the package-level
// Plan).
func (g *VideoGenerator) Plan(req Request) (*GenerationPlan, error) {
	r, err := g.spec.Resolve(req, false)
	if err != nil {
		return nil, err
	}
	return r.Plan(dtypeName(g.dtype))
}

// Generate runs one generation: validate, condition, denoise, decode, mux. It writes the MP4 (unless
// req.SkipSave) and returns the result. Invalid requests fail with a *RequestError before anything
// is loaded. A cancelled ctx stops the run between denoising steps and decoded clips; Generate then
// returns an error wrapping ctx's (errors.Is(err, context.Canceled)) and leaves no output or
// temporary file behind.
func (g *VideoGenerator) Generate(ctx context.Context, req Request) (*Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	return g.run(ctx, req)
}

// Close releases the resident components and the backend, after waiting for a running Generate.
// The generator cannot be used afterwards; Close is idempotent.
func (g *VideoGenerator) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	err := g.releaseResident()
	g.backend.Finalize()
	return err
}

// releaseResident closes every resident component.
func (g *VideoGenerator) releaseResident() error {
	return errors.Join(release(&g.cond), release(&g.dit), release(&g.video), release(&g.audio),
		release(&g.wanDiT), release(&g.wanVAE))
}

// release closes the component in *slot, if any, and empties the slot.
func release[T component](slot *T) error {
	var zero T
	if *slot == zero {
		return nil
	}
	err := (*slot).Close()
	*slot = zero
	return err
}

func (g *VideoGenerator) noteLoad(name string) {
	g.loads.Add(1)
	if g.loadHook != nil {
		g.loadHook(name)
	}
}

func (g *VideoGenerator) resident() bool { return g.opts.Memory == AllResident }

func dtypeName(dt dtypes.DType) DType {
	if dt == dtypes.BFloat16 {
		return BF16
	}
	return F32
}

// String describes the generator.
func (g *VideoGenerator) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VideoGenerator(%s on %s, %s, %s)", g.files.describe(), g.backendSpec, dtypeName(g.dtype), g.opts.Memory)
	return b.String()
}
