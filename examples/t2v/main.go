// Command t2v generates a video from a text prompt with a Wan model (Wan2.1 T2V, Wan2.2 TI2V-5B and
// the FastWan students), or plans a generation without running it.
//
//	go run ./examples/t2v -prompt "a red fox" -out fox.mp4                  # tiny-wan: random weights, seconds on a CPU
//	go run ./examples/t2v -model /models/FastWan2.1-T2V-1.3B-Diffusers -prompt "a red fox" -out fox.mp4 -backend xla:cuda
//	go run ./examples/t2v -plan -json -model wan2.1-t2v-1.3b -height 480 -width 832 -frames 81
//
// The default model, tiny-wan, is the Wan architecture at toy width with seeded random weights and
// a toy tokenizer made in memory: it runs anywhere without a download and its output is noise. Pass
// a Wan or FastWan snapshot folder (diffusers layout) with -model for real videos.
//
// Exit codes: 0 success, 1 runtime failure, 2 invalid input (flags or request), reported before
// anything is loaded.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/term"

	"fastvideo/fastvideo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("t2v", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model    = fs.String("model", "tiny-wan", "model: tiny-wan (built in, random weights), a Wan / FastWan snapshot folder, or wan2.1-t2v-1.3b, fastwan2.1-t2v-1.3b, wan2.2-ti2v-5b, ... (with -plan)")
		preset   = fs.String("preset", "", "preset name (empty: the model's default; tiny-wan: tiny_wan_dmd or tiny_wan_t2v)")
		prompt   = fs.String("prompt", "", "text prompt")
		negative = fs.String("negative-prompt", "", "negative prompt for classifier-free guidance (empty: the preset's; base models only)")
		height   = fs.Int("height", 0, "output height in pixels, a multiple of 16 (Wan2.1) or 32 (Wan2.2) (0: preset)")
		width    = fs.Int("width", 0, "output width in pixels, a multiple of 16 (Wan2.1) or 32 (Wan2.2) (0: preset)")
		frames   = fs.Int("frames", 0, "frames, 4n+1 (0: preset)")
		fps      = fs.Int("fps", 0, "frames per second of the file (0: preset, 16 or 24)")
		steps    = fs.Int("steps", 0, "UniPC steps for base models; FastWan runs its 3 DMD steps (0: preset)")
		guidance = fs.Float64("guidance-scale", 0, "classifier-free guidance scale, > 1 enables it (0: preset; FastWan: none)")
		warp     = fs.Bool("warp-denoising-steps", false, "FastWan: feed the DMD rungs warped onto the flow-shift grid (the MLX Wan2.2-5B recipe)")
		seed     = fs.Int64("seed", 0, "random seed (default: the preset's, 1024)")
		out      = fs.String("out", "", `output .mp4 file, or a folder for a name made from the prompt (default "outputs/"); existing files are never overwritten`)
		backend  = fs.String("backend", "", `compute backend: "go" (pure Go, CPU) or "xla:cuda" (default: $GOMLX_BACKEND, else go)`)
		dtype    = fs.String("dtype", "", `compute precision: "f32" or "bf16" (default: f32 on the go backend, bf16 on accelerators)`)
		cache    = fs.String("prompt-cache", "", "folder caching encoded prompts (a repeated prompt skips the text encoder)")
		memory   = fs.String("memory", "", `"one_resident" (default: one heavyweight component loaded at a time) or "all_resident"`)
		plan     = fs.Bool("plan", false, "print the generation plan and exit without generating")
		asJSON   = fs.Bool("json", false, "print the plan (with -plan) or the result summary as JSON on stdout")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "t2v: unexpected argument %q (the prompt goes in -prompt)\n", fs.Arg(0))
		return 2
	}
	req := fastvideo.Request{
		Prompt: *prompt, NegativePrompt: *negative, Height: *height, Width: *width, NumFrames: *frames,
		FPS: *fps, NumInferenceSteps: *steps, GuidanceScale: *guidance, OutputPath: *out, Preset: *preset,
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "seed":
			req.Seed = fastvideo.Ptr(*seed)
		case "warp-denoising-steps":
			req.WarpDenoisingSteps = fastvideo.Ptr(*warp)
		}
	})
	opts := []fastvideo.Option{fastvideo.WithBackend(*backend), fastvideo.WithDType(fastvideo.DType(*dtype)),
		fastvideo.WithPromptCache(*cache), fastvideo.WithMemoryPolicy(fastvideo.MemoryPolicy(*memory))}

	if *plan {
		p, err := fastvideo.Plan(*model, req, opts...)
		if err != nil {
			return fail(stderr, err)
		}
		if *asJSON {
			return printJSON(stdout, stderr, p)
		}
		if err := p.WriteTable(stdout); err != nil {
			return fail(stderr, err)
		}
		return 0
	}

	// Bad input fails here in microseconds, before the backend starts.
	if err := fastvideo.Validate(*model, req); err != nil {
		return fail(stderr, err)
	}
	start := time.Now()
	g, err := fastvideo.New(ctx, *model, opts...)
	if err != nil {
		return fail(stderr, err)
	}
	defer g.Close()
	opened := time.Since(start)
	var pb *progressBar
	if isTerminal(stderr) {
		pb = &progressBar{w: stderr}
		req.Progress = pb.event
	}
	res, err := g.Generate(ctx, req)
	if err != nil {
		if pb != nil {
			fmt.Fprint(stderr, clearLine)
		}
		return fail(stderr, err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, res)
	}
	if err := res.WriteSummary(stderr); err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintf(stderr, "done in %.2fs (opening the model %.2fs, generating %.2fs)\n",
		time.Since(start).Seconds(), opened.Seconds(), res.Timings.Total.Seconds())
	return 0
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// fail reports err and returns 2 for invalid input, 1 otherwise.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "t2v:", err)
	var re *fastvideo.RequestError
	if errors.As(err, &re) {
		return 2
	}
	return 1
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressBar draws one status line on a terminal, rewritten in place.
type progressBar struct{ w io.Writer }

const clearLine = "\r\033[K"

func (b *progressBar) event(e fastvideo.Event) {
	switch e.Kind {
	case fastvideo.PhaseStart:
		fmt.Fprintf(b.w, "%s%-12s ...", clearLine, e.Phase)
	case fastvideo.PhaseEnd:
		fmt.Fprintf(b.w, "%s%-12s %6.2fs\n", clearLine, e.Phase, e.Elapsed.Seconds())
	case fastvideo.DenoiseStep:
		per := e.Elapsed.Seconds() / float64(e.Step)
		fmt.Fprintf(b.w, "%s%-12s %s %d/%d steps  %.2fs/step  eta %.1fs", clearLine, e.Phase, bar(e.Step, e.Steps), e.Step, e.Steps,
			per, per*float64(e.Steps-e.Step))
	case fastvideo.DecodeProgress:
		fmt.Fprintf(b.w, "%s%-12s %s %d/%d frames", clearLine, e.Phase, bar(e.Done, e.Total), e.Done, e.Total)
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
