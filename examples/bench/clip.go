package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"fastvideo/fastvideo"
	"fastvideo/fastvideo/h3"
	"fastvideo/fastvideo/wan"
)

// The whole-clip benchmark times what a user waits for: Generate from prompt to MP4 through the
// public API, with a model's random weights (release size for a built-in name), in a fresh
// process. The first call pays compilation and the loads; later calls show the warm wait (with a
// prompt cache, the repeated prompt skips the text encoder). Each call reports its stages, its
// component loads and its peak device (Result.PeakDeviceBytes: the GPU's used memory, the XLA pool's
// high-water mark, -1 where the backend has no statistics) and host memory.
var (
	clipModel    = flag.String("clip-model", "fasth3", "clip: model name or folder (random weights are drawn for it)")
	clipPrompt   = flag.String("clip-prompt", "A red fox trots through fresh snow at dawn, its breath steaming, as a distant owl calls.", "clip: prompt")
	clipHeight   = flag.Int("clip-height", 0, "clip: height (0: the preset's)")
	clipWidth    = flag.Int("clip-width", 0, "clip: width (0: the preset's)")
	clipFrames   = flag.Int("clip-frames", 0, "clip: frames (0: the preset's)")
	clipSteps    = flag.Int("clip-steps", 0, "clip: denoising steps (0: the preset's)")
	clipMemory   = flag.String("clip-memory", "auto", `clip: memory policy ("auto", the default's per-component residency; "all_resident" keeps every component between calls, "one_resident")`)
	clipCache    = flag.Bool("clip-prompt-cache", true, "clip: cache encoded prompts, so warm calls skip the text encoder")
	clipOut      = flag.String("clip-out", "", "clip: folder for the MP4s (default: a temporary folder, removed at the end)")
	clipFast     = flag.Bool("clip-fast", false, "clip: the temporal fast mode")
	clipFastSp   = flag.Bool("clip-fast-spatial", false, "clip: the spatial fast mode")
	clipDense    = flag.Bool("clip-dense", false, "clip: dense attention forced (VSA off; also the default in a build without the block-sparse kernel)")
	clipDType    = flag.String("clip-dtype", "", `clip: compute dtype ("": auto; "fp8": FastH3's DiT core linears in float8, the GPU build)`)
	clipGPUs     = flag.Int("clip-gpus", 1, "clip: accelerators to spread the run over (fastvideo.WithDevices): H3: the DiT tensor-parallel (dense or VSA) and the video VAE's clips round-robin; Wan with guidance (1.3B, 5B, 14B): CFG-parallel on 2")
	clipX264     = flag.String("clip-x264-preset", "", "clip: libx264 speed preset (empty: the writer's default, faster with a 10-frame lookahead)")
	clipImage    = flag.String("clip-image", "", "clip: first-frame image (PNG/JPEG) for image-to-video; times the conditioning encoders")
	clipLast     = flag.String("clip-last-image", "", "clip: last-frame image (H3 FL2VA)")
	clipDrift    = flag.Bool("clip-drift", false, "clip: after each variant's timed calls, one more call that returns its frames (not timed); every variant after the first reports its frames' PSNR and mean absolute difference against the first variant's (same seed: what a mode changes, such as VSA or a window against dense)")
	clipWindow   = flag.Int("clip-attention-window", 0, "clip (Wan): windowed self-attention of this many tokens (t2v -attention-window) for the flags' request and the window variant; 0: off")
	clipWinSink  = flag.Int("clip-attention-window-sink", 0, "clip (Wan): the window's sink tokens (t2v -attention-window-sink)")
	clipVariants = flag.String("clip-variants", "", "clip: request variants run in turn on one loaded model, comma-separated, each tokens joined by +: default, dense, vsa, window (Wan: -clip-attention-window), fast, spatial, refine (Wan DMD two-stage refine), image, last, alt (other synthetic images), tiny (the TAEHV tiny decoder), preview (a tiny-decoder preview every step), enhance (the template prompt enhancer) (e.g. default,fast,spatial,fast+spatial,refine,image+last; images are the -clip-image files or a synthetic gradient); empty: the one request the other -clip-* flags describe")
)

func init() {
	registerSpec("clip", benchClip)
}

// clipRecord is one Generate call, printed as a JSON line for BENCHMARKS.md.
type clipRecord struct {
	Model      string             `json:"model"`
	Variant    string             `json:"variant"`
	Call       int                `json:"call"`
	Cold       bool               `json:"cold"`
	Size       string             `json:"size"`
	Total      float64            `json:"total_s"`
	Stages     map[string]float64 `json:"stages_s"`
	Loads      map[string]float64 `json:"loads_s,omitempty"`
	Phases     map[string]float64 `json:"phases_s,omitempty"` // refine's stages inside denoise
	Cached     bool               `json:"prompt_cached"`
	PeakGPUMiB int                `json:"peak_gpu_mib"`
	Compiled   int64              `json:"compiled_programs"`
	CompileS   float64            `json:"compile_s"`
	PeakHost   float64            `json:"peak_host_gib"`
	Output     string             `json:"output"`
}

func benchClip(spec string, c common) error {
	out, cleanup, err := clipFolders()
	if err != nil {
		return err
	}
	defer cleanup()
	variants, err := parseClipVariants(*clipVariants)
	if err != nil {
		return err
	}
	opts := []fastvideo.Option{fastvideo.WithBackend(spec), fastvideo.WithRandomWeights(int64(c.Seed)),
		fastvideo.WithMemoryPolicy(fastvideo.MemoryPolicy(*clipMemory)), fastvideo.WithAttention(c.Attention.Path),
		fastvideo.WithQuantDispatch(c.Dispatch), fastvideo.WithX264Preset(*clipX264), fastvideo.WithDevices(*clipGPUs),
		fastvideo.WithDType(fastvideo.DType(*clipDType))}
	if *clipCache {
		opts = append(opts, fastvideo.WithPromptCache(filepath.Join(out, "prompt-cache")))
	}
	if *clipLoRARank > 0 {
		t0 := time.Now()
		path, n, err := randomAdapter(*clipModel, *clipLoRARank, out, c.Seed)
		if err != nil {
			return err
		}
		fmt.Printf("clip: a random rank-%d adapter on %d modules written in %.2f s\n", *clipLoRARank, n, time.Since(t0).Seconds())
		opts = append(opts, fastvideo.WithLoRA(path, 1))
	}
	t0 := time.Now()
	g, err := fastvideo.New(context.Background(), *clipModel, opts...)
	if err != nil {
		return err
	}
	defer g.Close()
	be, dt := g.Backend()
	fmt.Printf("clip: %s opened in %.2f s on %s (%s)\n", *clipModel, time.Since(t0).Seconds(), be, dt)
	var ref [][]byte // the first variant's frames, with -clip-drift
	for i, v := range variants {
		req, err := v.request(g, out)
		if err != nil {
			return err
		}
		last, err := runClipCalls(g, req, v.name, 1+c.Warmup+c.Iters)
		if err != nil {
			return err
		}
		if err := c.Window.bracket("clip["+v.name+"]", last, func() error {
			_, err := g.Generate(context.Background(), req)
			return err
		}); err != nil {
			return err
		}
		if !*clipDrift {
			continue
		}
		req.SkipSave, req.ReturnFrames = true, true
		res, err := g.Generate(context.Background(), req)
		if err != nil {
			return fmt.Errorf("clip %s frames for -clip-drift: %w", v.name, err)
		}
		if i == 0 {
			ref = res.Frames
			continue
		}
		psnr, mad, err := frameDrift(res.Frames, ref)
		if err != nil {
			return fmt.Errorf("clip %s against %s: %w", v.name, variants[0].name, err)
		}
		fmt.Printf("clip drift: %s against %s (seed %d): PSNR %.2f dB, mean absolute difference %.2f of 255\n",
			v.name, variants[0].name, c.Seed, psnr, mad)
	}
	return nil
}

// frameDrift is the PSNR (8-bit peak) and the mean absolute difference of frames against ref.
func frameDrift(frames, ref [][]byte) (psnr, mad float64, err error) {
	if len(frames) != len(ref) {
		return 0, 0, fmt.Errorf("%d frames against %d", len(frames), len(ref))
	}
	var sq, abs, n float64
	for i, f := range frames {
		if len(f) != len(ref[i]) {
			return 0, 0, fmt.Errorf("frame %d has %d bytes against %d", i, len(f), len(ref[i]))
		}
		for j, b := range f {
			d := float64(b) - float64(ref[i][j])
			sq += d * d
			abs += math.Abs(d)
		}
		n += float64(len(f))
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("no frames")
	}
	if sq == 0 {
		return math.Inf(1), 0, nil
	}
	return 10 * math.Log10(255*255/(sq/n)), abs / n, nil
}

// clipVariant is one request shape of -clip-variants; the model and its loads are shared, so each
// variant's first call pays only its own compilation.
type clipVariant struct {
	name                      string
	dense, vsa, fast, spatial bool
	// window is Wan's windowed self-attention of -clip-attention-window tokens.
	window bool
	// refine is Wan's two-stage refine (DMD models; it wins over spatial).
	refine                bool
	firstImage, lastImage bool
	// alt draws other synthetic images, so a repeated keyframe request misses the prompt cache.
	alt bool
	// tiny decodes with the TAEHV tiny decoder (Request.Decoder "tiny"); preview adds a preview to
	// every denoising step (Request.Preview).
	tiny, preview bool
	// enhance expands the prompt with the template prompt enhancer (Request.EnhancePrompt).
	enhance bool
}

// parseClipVariants reads "default,dense,fast,spatial,fast+spatial,image,image+last"; the empty list
// is the single request the other -clip-* flags describe.
func parseClipVariants(list string) ([]clipVariant, error) {
	if list == "" {
		return []clipVariant{{name: "flags", dense: *clipDense, fast: *clipFast, spatial: *clipFastSp, window: *clipWindow != 0,
			firstImage: *clipImage != "", lastImage: *clipLast != ""}}, nil
	}
	if *clipDense || *clipFast || *clipFastSp {
		// Each variant names its own modes; a mode flag beside the list would otherwise be silently ignored.
		return nil, badFlag("invalid -clip-dense/-clip-fast/-clip-fast-spatial with -clip-variants %q: use the dense, fast and spatial tokens of -clip-variants", list)
	}
	var vs []clipVariant
	for _, name := range strings.Split(list, ",") {
		v := clipVariant{name: name}
		for _, tok := range strings.Split(name, "+") {
			if tok == "default" {
				continue
			}
			on := v.switchOf(tok)
			if on == nil {
				return nil, badFlag("invalid -clip-variants %q: unknown %q; use default, dense, vsa, window, fast, spatial, refine, image, last, alt, tiny, preview, enhance joined by + (e.g. fast+spatial+tiny)", list, tok)
			}
			*on = true
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// switchOf is the switch of v that the -clip-variants token tok turns on; nil for an unknown token.
func (v *clipVariant) switchOf(tok string) *bool {
	return map[string]*bool{"dense": &v.dense, "vsa": &v.vsa, "window": &v.window, "fast": &v.fast, "spatial": &v.spatial, "refine": &v.refine,
		"image": &v.firstImage, "last": &v.lastImage, "alt": &v.alt, "tiny": &v.tiny, "preview": &v.preview, "enhance": &v.enhance}[tok]
}

// attention sets the variant's attention knobs on req: VSA off (dense) or on, or Wan's window.
func (v clipVariant) attention(fam string, req *fastvideo.Request) error {
	if v.window {
		switch {
		case v.dense || v.vsa:
			return badFlag("invalid -clip-variants/-clip-dense %q: the window excludes dense and vsa", v.name)
		case fam != wan.FamilyName:
			return badFlag("invalid -clip-attention-window/window variant: windowed attention is for the Wan family, not %s", fam)
		case *clipWindow < 1:
			return badFlag("invalid -clip-attention-window %d: the window variant needs 1 token or more", *clipWindow)
		}
		req.Options = &wan.Options{AttentionWindow: &wan.AttentionWindow{Tokens: *clipWindow, Sink: *clipWinSink}}
		return nil
	}
	if !v.dense && !v.vsa {
		return nil
	}
	switch fam {
	case h3.FamilyName:
		req.Options = &h3.Options{VSA: &h3.VSA{Off: v.dense}}
	case wan.FamilyName:
		req.Options = &wan.Options{VSA: &wan.VSA{Off: v.dense}}
	default:
		return badFlag("-clip-variants dense/vsa: the %s family has no VSA switch", fam)
	}
	return nil
}

// request builds the variant's request; images come from -clip-image / -clip-last-image, else a
// synthetic gradient at the canvas size is written next to the outputs.
func (v clipVariant) request(g *fastvideo.VideoGenerator, out string) (fastvideo.Request, error) {
	req := fastvideo.Request{Prompt: *clipPrompt, Height: *clipHeight, Width: *clipWidth, NumFrames: *clipFrames,
		NumInferenceSteps: *clipSteps, Fast: v.fast, FastSpatial: v.spatial, Refine: v.refine, OutputPath: out + string(filepath.Separator),
		Preview: v.preview, EnhancePrompt: v.enhance}
	if v.tiny {
		req.Decoder = fastvideo.DecoderTiny
	}
	if err := v.attention(g.Model().Family, &req); err != nil {
		return req, err
	}
	var err error
	if v.firstImage {
		if req.ImagePath, err = clipImagePath(*clipImage, g, req, out, "first", v.phase(0)); err != nil {
			return req, err
		}
	}
	if v.lastImage {
		if req.LastImagePath, err = clipImagePath(*clipLast, g, req, out, "last", v.phase(1)); err != nil {
			return req, err
		}
	}
	return req, nil
}

// phase picks the synthetic image: alt variants get different pixels.
func (v clipVariant) phase(p int) int {
	if v.alt {
		return p + 2
	}
	return p
}

// clipImagePath is the flag's image, or a gradient PNG of the planned canvas (phase varies it).
func clipImagePath(flagPath string, g *fastvideo.VideoGenerator, req fastvideo.Request, out, name string, phase int) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	plan, err := g.Plan(req)
	if err != nil {
		return "", err
	}
	img := image.NewRGBA(image.Rect(0, 0, plan.Width, plan.Height))
	for y := 0; y < plan.Height; y++ {
		for x := 0; x < plan.Width; x++ {
			img.Set(x, y, color.RGBA{uint8(x * 255 / plan.Width), uint8(y * 255 / plan.Height), uint8(64 * phase), 255})
		}
	}
	path := filepath.Join(out, fmt.Sprintf("%s%d.png", name, phase))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// runClipCalls makes calls Generate calls of one request, prints each as a clip record line and
// returns the last one's total seconds.
func runClipCalls(g *fastvideo.VideoGenerator, req fastvideo.Request, variant string, calls int) (last float64, err error) {
	for call := 1; call <= calls; call++ {
		res, err := g.Generate(context.Background(), req)
		if err != nil {
			return 0, fmt.Errorf("clip %s call %d: %w", variant, call, err)
		}
		peak := -1
		if res.PeakDeviceBytes >= 0 {
			peak = int(res.PeakDeviceBytes >> 20)
		}
		rec := clipRecord{Model: *clipModel, Variant: variant, Call: call, Cold: call == 1, Size: fmt.Sprintf("%dx%dx%d", res.Width, res.Height, res.NumFrames),
			Total: res.Timings.Total.Seconds(), Stages: map[string]float64{}, Loads: map[string]float64{}, Cached: res.PromptCached,
			PeakGPUMiB: peak, Compiled: res.CompiledPrograms, CompileS: res.Timings.Compile.Seconds(), PeakHost: float64(res.PeakHostBytes) / (1 << 30), Output: filepath.Base(res.OutputPath)}
		for _, st := range res.Timings.Stages {
			rec.Stages[string(st.Stage)] = st.Elapsed.Seconds()
		}
		for _, st := range res.Timings.Loads {
			rec.Loads[string(st.Stage)] = st.Elapsed.Seconds()
		}
		if len(res.Timings.Phases) > 0 {
			rec.Phases = map[string]float64{}
			for _, st := range res.Timings.Phases {
				rec.Phases[string(st.Stage)] = st.Elapsed.Seconds()
			}
		}
		line, err := json.Marshal(rec)
		if err != nil {
			return 0, err
		}
		fmt.Printf("clip record: %s\n", line)
		last = rec.Total
	}
	return last, nil
}

// clipFolders is the output folder (the flag's, or a temporary one removed by cleanup).
func clipFolders() (out string, cleanup func(), err error) {
	if *clipOut != "" {
		return *clipOut, func() {}, os.MkdirAll(*clipOut, 0o755)
	}
	dir, err := os.MkdirTemp("", "fastvideo-clip-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}
