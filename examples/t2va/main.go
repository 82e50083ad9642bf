// Command t2va generates a video with synchronized stereo audio from a text prompt with MiniMax H3 /
// FastH3, or plans a generation without running it.
//
//	go run ./examples/t2va -prompt "a red fox" -out clip.mp4                 # tiny-h3: random weights, seconds on a CPU
//	go run ./examples/t2va -model /models/FastH3 -prompt "a red fox" -out clip.mp4 -backend xla:cuda
//	go run ./examples/t2va -plan -json -model fasth3 -height 480 -width 832 -frames 124 -steps 4
//
// The default model, tiny-h3, is the H3 architecture at toy width with seeded random weights made in
// memory: it runs anywhere without a download and its output is noise. Pass a MiniMax H3 or FastH3
// snapshot folder with -model for real videos.
//
// Exit codes: 0 success, 1 runtime failure, 2 invalid input (flags or request).
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
	fs := flag.NewFlagSet("t2va", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model    = fs.String("model", "tiny-h3", "model: tiny-h3 (built in, random weights), a MiniMax H3 / FastH3 snapshot folder, or fasth3 / h3 (with -plan)")
		preset   = fs.String("preset", "", "preset name (empty: the model's default)")
		prompt   = fs.String("prompt", "", `text prompt; speech as "(S1) A presenter says <d>[English] Hello.</d>"`)
		negative = fs.String("negative-prompt", "", "negative prompt (MiniMax H3 accepts none)")
		height   = fs.Int("height", 0, "output height in pixels, a multiple of 32 (0: preset)")
		width    = fs.Int("width", 0, "output width in pixels, a multiple of 32 (0: preset)")
		frames   = fs.Int("frames", 0, "frames, aligned up to 17n+5; 5-15 s at 24 fps for the released models (0: preset)")
		fps      = fs.Int("fps", 0, "frames per second; H3 generates 24 (0: preset)")
		steps    = fs.Int("steps", 0, "DiT forwards: 4 for FastH3, 49 for the base model (0: preset)")
		seed     = fs.Int64("seed", 0, "random seed (default: the preset's, 0)")
		out      = fs.String("out", "", `output .mp4 file, or a folder for a name made from the prompt (default "outputs/"); existing files are never overwritten`)
		backend  = fs.String("backend", "", `compute backend: "go" (pure Go, CPU) or "xla:cuda" (default: $GOMLX_BACKEND, else go)`)
		dtype    = fs.String("dtype", "", `compute precision: "f32" or "bf16" (default: f32 on the go backend, bf16 on accelerators)`)
		cache    = fs.String("prompt-cache", "", "folder caching encoded prompts (a repeated prompt skips the text encoder)")
		memory   = fs.String("memory", "", `"one_resident" (default: one heavyweight component loaded at a time) or "all_resident"`)
		fast     = fs.Bool("fast", false, "temporal fast mode (with -plan only: needs a frame interpolator)")
		spatial  = fs.Bool("fast-spatial", false, "spatial fast mode (with -plan only: needs a pixel upsampler)")
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
		fmt.Fprintf(stderr, "t2va: unexpected argument %q (the prompt goes in -prompt)\n", fs.Arg(0))
		return 2
	}
	req := fastvideo.Request{
		Prompt: *prompt, NegativePrompt: *negative, Height: *height, Width: *width, NumFrames: *frames,
		FPS: *fps, NumInferenceSteps: *steps, OutputPath: *out, Preset: *preset, Fast: *fast, FastSpatial: *spatial,
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "seed" {
			req.Seed = fastvideo.Ptr(*seed)
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
		pb = newProgressBar(stderr)
		req.Progress = pb.event
	}
	res, err := g.Generate(ctx, req)
	if err != nil {
		if pb != nil {
			pb.clear()
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
	fmt.Fprintln(stderr, "t2va:", err)
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
type progressBar struct {
	w     io.Writer
	start time.Time
}

func newProgressBar(w io.Writer) *progressBar { return &progressBar{w: w, start: time.Now()} }

const clearLine = "\r\033[K"

// clear erases an unfinished status line.
func (b *progressBar) clear() { fmt.Fprint(b.w, clearLine) }

func (b *progressBar) event(e fastvideo.Event) {
	const clear = clearLine
	switch e.Kind {
	case fastvideo.PhaseStart:
		fmt.Fprintf(b.w, "%s%-12s ...", clear, e.Phase)
	case fastvideo.PhaseEnd:
		fmt.Fprintf(b.w, "%s%-12s %6.2fs\n", clear, e.Phase, e.Elapsed.Seconds())
	case fastvideo.DenoiseStep:
		per := e.Elapsed.Seconds() / float64(e.Step)
		eta := per * float64(e.Steps-e.Step)
		fmt.Fprintf(b.w, "%s%-12s %s %d/%d steps  %.2fs/step  eta %.1fs", clear, e.Phase, bar(e.Step, e.Steps), e.Step, e.Steps, per, eta)
	case fastvideo.DecodeProgress:
		fmt.Fprintf(b.w, "%s%-12s %s %d/%d frames", clear, e.Phase, bar(e.Done, e.Total), e.Done, e.Total)
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
