// Package cli is the command-line front end shared by the example binaries
// (t2va for MiniMax H3, t2v for Wan): the common flags, -plan, generation with
// a progress line, and the exit-code contract (0 success, 1 runtime failure,
// 2 invalid input only, reported before anything is loaded).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"fastvideo/fastvideo"
	"fastvideo/internal/safefile"
)

// Command describes one binary: its name, what it does, its default model and the help texts
// that differ between model families.
type Command struct {
	Name string
	// Summary says in one line what the binary does (the first line of -h).
	Summary      string
	DefaultModel string
	Help         Help
	// previewDir is -preview's folder (set by Run).
	previewDir string
	// Extra registers the binary's own flags and returns a function that applies them to the
	// request; set holds the names of the flags given explicitly. A returned error is invalid input.
	Extra func(fs *flag.FlagSet) func(req *fastvideo.Request, set map[string]bool) error
}

// Help holds the family-specific help texts of the common flags.
type Help struct {
	Model, Preset, Prompt, Negative, Height, Width, Frames, FPS, Steps, Seed string
}

// Main runs the command on the process's arguments and exits; Ctrl-C, SIGTERM and SIGHUP cancel
// the context, which stops generation between steps and clips without leaving files behind.
func (c Command) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := c.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// flags are the common flags' values.
type flags struct {
	model, preset, prompt, negative      *string
	height, width, frames, fps, steps    *int
	seed                                 *int64
	out, backend, dtype, cache, memory   *string
	x264                                 *string
	gpus                                 *int
	plan, asJSON, randomWeights, version *bool
	enhance                              *bool
	weightsSeed                          *int64
	fast                                 fastFlags
	image                                *string
	lora                                 *loraFlag
	decoder, tinyDecoder, previewDir     *string
	compileCache                         *string
	applyExtra                           func(*fastvideo.Request, map[string]bool) error
}

// fastFlags are the fast modes' flags, mirroring the MLX runtime's --fast, --fast-factor,
// --fast-spatial, --fast-spatial-scale, --fast-spatial-upsample-mode, --fast-sharpen and
// --rife-weights-dir.
type fastFlags struct {
	fast, spatial     *bool
	factor, scale     *int
	upsample, rifeDir *string
	sharpen           *float64
}

func defineFast(fs *flag.FlagSet) fastFlags {
	return fastFlags{
		fast:     fs.Bool("fast", false, "temporal fast mode: denoise fewer frames, then interpolate them with RIFE 4.25 (needs -rife for released models)"),
		factor:   fs.Int("fast-factor", 0, "with -fast: how many times fewer frames are denoised (0: 2)"),
		rifeDir:  fs.String("rife", "", "RIFE 4.25 weights for -fast: mlx-community/RIFE-4.25 (model.safetensors) or Practical-RIFE's flownet as safetensors (the tiny models carry their own)"),
		spatial:  fs.Bool("fast-spatial", false, "spatial fast mode: denoise a smaller canvas, then resize and sharpen the frames"),
		scale:    fs.Int("spatial-scale", 0, "with -fast-spatial: how many times smaller each side is denoised (0: 2)"),
		upsample: fs.String("upsample", "", "with -fast-spatial: resize kernel lanczos, cubic, bilinear or nearest (empty: lanczos)"),
		sharpen:  fs.Float64("sharpen", 0, "with a fast mode: unsharp strength, 0 for none (default: 0.4 spatial, 0.6 temporal, 0.6 both)"),
	}
}

// apply sets the request's fast-mode fields.
func (f fastFlags) apply(req *fastvideo.Request, set map[string]bool) {
	req.Fast, req.FastFactor, req.FastSpatial = *f.fast, *f.factor, *f.spatial
	req.FastSpatialScale, req.Upsample = *f.scale, *f.upsample
	if set["sharpen"] {
		req.Sharpen = f.sharpen
	}
}

// Run is Main without the process: it returns the exit code (0 success, 2 invalid input, 1 any
// other failure, a recovered panic included: a crash must never look like invalid input).
func (c Command) Run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if rec := recover(); rec != nil {
			fmt.Fprintf(stderr, "%s: internal error: %v\n%s", c.Name, rec, debug.Stack())
			code = 1
		}
	}()
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s: %s\n\nUsage of %s:\n", c.Name, c.Summary, c.Name)
		fs.PrintDefaults()
	}
	f := c.define(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (the prompt goes in -prompt)\n", c.Name, fs.Arg(0))
		return 2
	}
	if *f.version {
		if err := fastvideo.WriteVersion(stdout, c.Name); err != nil {
			return c.fail(stderr, err)
		}
		return 0
	}
	req, err := f.request(fs)
	if err != nil {
		return c.fail(stderr, err)
	}
	opts := []fastvideo.Option{fastvideo.WithBackend(*f.backend), fastvideo.WithDType(fastvideo.DType(*f.dtype)),
		fastvideo.WithPromptCache(*f.cache), fastvideo.WithMemoryPolicy(fastvideo.MemoryPolicy(*f.memory)),
		fastvideo.WithX264Preset(*f.x264), fastvideo.WithDevices(*f.gpus), fastvideo.WithCompileCache(*f.compileCache)}
	if *f.randomWeights {
		opts = append(opts, fastvideo.WithRandomWeights(*f.weightsSeed))
	}
	for _, l := range *f.lora {
		opts = append(opts, fastvideo.WithLoRA(l.Path, l.Strength))
	}
	if *f.fast.rifeDir != "" {
		opts = append(opts, fastvideo.WithRIFE(*f.fast.rifeDir))
	}
	if *f.tinyDecoder != "" {
		opts = append(opts, fastvideo.WithTinyDecoder(*f.tinyDecoder))
	}
	if *f.plan {
		return c.plan(stdout, stderr, *f.model, req, opts, *f.asJSON)
	}
	if dir := *f.previewDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return c.fail(stderr, &fastvideo.RequestError{Field: "preview", Value: dir, Allowed: "a folder that can be created: " + err.Error()})
		}
		c.previewDir = dir
	}
	return c.generate(ctx, stdout, stderr, *f.model, req, opts, *f.asJSON)
}

// define registers the common flags and the binary's own.
func (c Command) define(fs *flag.FlagSet) *flags {
	h := c.Help
	f := &flags{
		model:    fs.String("model", c.DefaultModel, h.Model),
		preset:   fs.String("preset", "", h.Preset),
		prompt:   fs.String("prompt", "", h.Prompt),
		negative: fs.String("negative-prompt", "", h.Negative),
		height:   fs.Int("height", 0, h.Height),
		width:    fs.Int("width", 0, h.Width),
		frames:   fs.Int("frames", 0, h.Frames),
		fps:      fs.Int("fps", 0, h.FPS),
		steps:    fs.Int("steps", 0, h.Steps),
		seed:     fs.Int64("seed", 0, h.Seed),
		image:    fs.String("image", "", "first-frame image (PNG or JPEG) for image-to-video; the models that take one size the video from it"),
		out:      fs.String("out", "", `output .mp4 file, or a folder for a name made from the prompt (default "outputs/"); existing files are never overwritten`),
		backend:  fs.String("backend", "", `compute backend: "go" (pure Go, CPU) or "xla:cuda" (default: $GOMLX_BACKEND, else go)`),
		dtype:    fs.String("dtype", "", `compute precision: "f32", "bf16" or "fp8" (MiniMax H3: bf16 with the DiT's core linears in float8; default: f32 on the go backend, bf16 on accelerators)`),
		cache:    fs.String("prompt-cache", "", "folder caching encoded prompts (a repeated prompt skips the text encoder)"),
		memory:   fs.String("memory", "", `"auto" (default: each component stays on the device where every other one still runs beside it; -plan lists the choice), "one_resident" or "all_resident"`),
		enhance:  fs.Bool("enhance-prompt", false, "expand the prompt into cinematic shot language first (FastVideo's template enhancer: camera, light and motion clauses for what the prompt lacks); the result shows the prompt used"),
		version:  fs.Bool("version", false, "print the version and which fast features this binary has (and the command that builds the others), then exit"),
		plan:     fs.Bool("plan", false, "print the generation plan and exit without generating"),
		asJSON:   fs.Bool("json", false, "print the plan (with -plan) or the result summary as JSON on stdout"),
		randomWeights: fs.Bool("random-weights", false, "draw the model's weights from -weights-seed instead of reading checkpoints: "+
			"a built-in model (e.g. fasth3) runs at release size without its download, a folder at the geometry of its configs; "+
			"the video is noise, the timings are real"),
		weightsSeed: fs.Int64("weights-seed", 1, "seed of -random-weights"),
		x264:        fs.String("x264-preset", "", `libx264 speed preset (default: faster with a 10-frame lookahead, the slowest that keeps pace with the decoders; a named preset is libx264's own; medium: upstream's, a few % smaller files, a longer wait after the last frame)`),
		gpus: fs.Int("gpus", 1, "accelerators of this host to spread the run over: H3: the DiT tensor-parallel by heads and FFN width and the video VAE's clips round-robin; "+
			"Wan with guidance (1.3B, 5B): CFG-parallel on 2 (the unconditional forward on the second device); "+
			"needs an accelerator backend with that many devices"),
		lora:    &loraFlag{},
		decoder: fs.String("decoder", "", `video decoder: "full" (default: the model's VAE) or "tiny" (the TAEHV tiny decoder: taew2_1, taew2_2 or taeh3; much faster, softer)`),
		tinyDecoder: fs.String("tiny-decoder", "", "TAEHV weights for -decoder tiny and -preview (huggingface.co/madebyollin/taehv: taew2_1/taew2_2/taeh3.safetensors; "+
			"default: <model>/taehv/<variant>.safetensors; the tiny models carry their own)"),
		compileCache: fs.String("compile-cache", "", CompileCacheHelp),
		previewDir:   fs.String("preview", "", "folder to write a preview of every denoising step to (step_NNN.jpg and latest.jpg: the x0 estimate's first, middle and last frame by the tiny decoder)"),
		fast:         defineFast(fs),
	}
	fs.Var(f.lora, "lora", "LoRA adapter `PATH[:STRENGTH]` (a .safetensors file; strength default 1), merged into the DiT's weights at load; repeatable, applied in order; -plan lists what each changes")
	if c.Extra != nil {
		f.applyExtra = c.Extra(fs)
	}
	return f
}

// request builds the request from the parsed flags.
func (f *flags) request(fs *flag.FlagSet) (fastvideo.Request, error) {
	req := fastvideo.Request{
		Prompt: *f.prompt, NegativePrompt: *f.negative, Height: *f.height, Width: *f.width, NumFrames: *f.frames,
		FPS: *f.fps, NumInferenceSteps: *f.steps, OutputPath: *f.out, Preset: *f.preset, ImagePath: *f.image,
		EnhancePrompt: *f.enhance, Decoder: *f.decoder, Preview: *f.previewDir != "",
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["seed"] {
		req.Seed = fastvideo.Ptr(*f.seed)
	}
	f.fast.apply(&req, set)
	if f.applyExtra != nil {
		if err := f.applyExtra(&req, set); err != nil {
			return req, err
		}
	}
	return req, nil
}

// plan prints the plan of req without loading anything.
func (c Command) plan(stdout, stderr io.Writer, model string, req fastvideo.Request, opts []fastvideo.Option, asJSON bool) int {
	p, err := fastvideo.Plan(model, req, opts...)
	if err != nil {
		return c.fail(stderr, err)
	}
	if asJSON {
		return c.printJSON(stdout, stderr, p)
	}
	if err := p.WriteTable(stdout); err != nil {
		return c.fail(stderr, err)
	}
	return 0
}

// generate validates req (bad input fails here in microseconds, before the backend starts), opens
// the model and runs the generation with a progress line on a terminal.
func (c Command) generate(ctx context.Context, stdout, stderr io.Writer, model string, req fastvideo.Request, opts []fastvideo.Option, asJSON bool) int {
	if err := fastvideo.Validate(model, req, opts...); err != nil {
		return c.fail(stderr, err)
	}
	start := time.Now()
	g, err := fastvideo.New(ctx, model, opts...)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer g.Close()
	opened := time.Since(start)
	pb := &progressBar{w: stderr, terminal: isTerminal(stderr), previewDir: c.previewDir}
	req.Progress = pb.event
	res, err := g.Generate(ctx, req)
	if err != nil {
		pb.clear()
		return c.fail(stderr, err)
	}
	if asJSON {
		return c.printJSON(stdout, stderr, res)
	}
	if err := res.WriteSummary(stderr); err != nil {
		return c.fail(stderr, err)
	}
	fmt.Fprintf(stderr, "done in %.2fs (opening the model %.2fs, generating %.2fs)\n",
		time.Since(start).Seconds(), opened.Seconds(), res.Timings.Total.Seconds())
	return 0
}

func (c Command) printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(stderr, err)
	}
	return 0
}

// flagNames maps the library's request fields to the binaries' flags, so that a message names
// what the user typed.
var flagNames = map[string]string{
	"model": "-model", "preset": "-preset", "prompt": "-prompt", "negative_prompt": "-negative-prompt",
	"height": "-height", "width": "-width", "num_frames": "-frames", "fps": "-fps", "num_inference_steps": "-steps",
	"seed": "-seed", "output_path": "-out", "backend": "-backend", "dtype": "-dtype", "prompt_cache": "-prompt-cache",
	"memory": "-memory", "x264_preset": "-x264-preset", "devices": "-gpus", "guidance_scale": "-guidance-scale", "fast": "-fast", "fast_factor": "-fast-factor",
	"fast_spatial": "-fast-spatial", "fast_spatial_scale": "-spatial-scale", "warp_denoising_steps": "-warp-denoising-steps",
	"upsample": "-upsample", "sharpen": "-sharpen", "rife": "-rife", "image_path": "-image", "last_image_path": "-last-image",
	"vsa_sparsity": "-vsa-sparsity", "vsa": "-vsa-sparsity/-vsa", "lora": "-lora",
	"attention_window": "-attention-window", "attention_window_sink": "-attention-window-sink",
	"refine": "-refine", "refine_scale": "-refine-scale", "refine_steps": "-refine-steps", "refine_sigma": "-refine-sigma",
	"refine_add_noise": "-refine-add-noise", "refine_upsample": "-refine-upsample",
	"decoder": "-decoder", "tiny_decoder": "-tiny-decoder", "preview": "-preview", "compile_cache": "-compile-cache",
}

// CompileCacheHelp is -compile-cache's help, shared with serve.
const CompileCacheHelp = "`DIR` keeping compiled XLA programs between runs, so a later run loads them instead of compiling (needs the GPU build: -version says; " +
	"on CUDA also XLA's autotune results); \"off\" compiles every program every run (default: <user cache folder>/fastvideo/xla)"

// loraFlag collects -lora PATH[:STRENGTH] values in order.
type loraFlag []fastvideo.LoRA

func (l *loraFlag) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, a := range *l {
		parts[i] = fmt.Sprintf("%s:%g", a.Path, a.Strength)
	}
	return strings.Join(parts, ",")
}

// Set parses PATH[:STRENGTH]: the text after the last colon is the strength when it parses as a
// number, else part of the path (a path may hold colons); the strength defaults to 1.
func (l *loraFlag) Set(v string) error {
	*l = append(*l, ParseLoRA(v))
	return nil
}

// ParseLoRA splits a -lora value into the adapter's path and strength.
func ParseLoRA(v string) fastvideo.LoRA {
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		if s, err := strconv.ParseFloat(v[i+1:], 64); err == nil {
			return fastvideo.LoRA{Path: v[:i], Strength: s}
		}
	}
	return fastvideo.LoRA{Path: v, Strength: 1}
}

// fail reports err (invalid input under the flag's name) and returns 2 for invalid input, 1
// otherwise.
func (c Command) fail(stderr io.Writer, err error) int {
	var re *fastvideo.RequestError
	if errors.As(err, &re) {
		named := *re
		if flag, ok := flagNames[re.Field]; ok {
			named.Field = flag
		}
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, &named)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
	return 1
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressBar draws one status line on a terminal, rewritten in place; warnings are printed
// wherever stderr goes.
type progressBar struct {
	w        io.Writer
	terminal bool
	// previewDir receives the step previews (-preview); a failed write is reported once.
	previewDir    string
	previewFailed bool
}

// writePreview writes p as step_NNN.jpg and latest.jpg in the preview folder, each atomically
// (a temporary file renamed into place), so a viewer never reads half a picture.
func (b *progressBar) writePreview(p *fastvideo.Preview) {
	ext := ".jpg"
	if p.MIME == "image/png" {
		ext = ".png"
	}
	for _, name := range []string{fmt.Sprintf("step_%03d%s", p.Step, ext), "latest" + ext} {
		if err := safefile.WriteAtomic(filepath.Join(b.previewDir, name), p.Data); err != nil && !b.previewFailed {
			b.previewFailed = true
			b.clear()
			fmt.Fprintf(b.w, "warning: writing the preview: %v\n", err)
		}
	}
}

const clearLine = "\r\033[K"

func (b *progressBar) clear() {
	if b.terminal {
		fmt.Fprint(b.w, clearLine)
	}
}

func (b *progressBar) event(e fastvideo.Event) {
	if e.Preview != nil && b.previewDir != "" {
		b.writePreview(e.Preview)
	}
	if e.Kind == fastvideo.Warning {
		b.clear()
		fmt.Fprintf(b.w, "warning: %s\n", e.Message)
		return
	}
	if !b.terminal {
		return
	}
	switch e.Kind {
	case fastvideo.StageStart:
		fmt.Fprintf(b.w, "%s%-12s ...", clearLine, e.Stage)
	case fastvideo.StageEnd:
		fmt.Fprintf(b.w, "%s%-12s %6.2fs\n", clearLine, e.Stage, e.Elapsed.Seconds())
	case fastvideo.DenoiseStep:
		per := e.Elapsed.Seconds() / float64(e.Step)
		fmt.Fprintf(b.w, "%s%-12s %s %d/%d steps  %.2fs/step  eta %.1fs", clearLine, e.Stage, bar(e.Step, e.Steps), e.Step, e.Steps,
			per, per*float64(e.Steps-e.Step))
	case fastvideo.DecodeProgress:
		fmt.Fprintf(b.w, "%s%-12s %s %d/%d frames", clearLine, e.Stage, bar(e.Done, e.Total), e.Done, e.Total)
	}
}

func bar(done, total int) string {
	const width = 24
	n := 0
	if total > 0 {
		n = min(width, done*width/total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
