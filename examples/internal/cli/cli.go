// Package cli is the command-line front end shared by the example binaries
// (t2va for MiniMax H3, t2v for Wan): the common flags, -plan, generation with
// a progress line, and the exit-code contract (0 success, 1 runtime failure,
// 2 invalid input, reported before anything is loaded).
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
	"strings"
	"time"

	"golang.org/x/term"

	"fastvideo/fastvideo"
)

// Command describes one binary: its name, default model and the help texts
// that differ between model families.
type Command struct {
	Name         string
	DefaultModel string
	Help         Help
	// Extra registers the binary's own flags and returns a function that applies
	// them to the request; set holds the names of the flags given explicitly.
	Extra func(fs *flag.FlagSet) func(req *fastvideo.Request, set map[string]bool)
}

// Help holds the family-specific help texts of the common flags.
type Help struct {
	Model, Preset, Prompt, Negative, Height, Width, Frames, FPS, Steps, Seed string
}

// Main runs the command on the process's arguments and exits; Ctrl-C cancels
// the context, which stops generation between steps and clips without
// leaving files behind.
func (c Command) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := c.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run is Main without the process: it returns the exit code.
func (c Command) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	h := c.Help
	var (
		model    = fs.String("model", c.DefaultModel, h.Model)
		preset   = fs.String("preset", "", h.Preset)
		prompt   = fs.String("prompt", "", h.Prompt)
		negative = fs.String("negative-prompt", "", h.Negative)
		height   = fs.Int("height", 0, h.Height)
		width    = fs.Int("width", 0, h.Width)
		frames   = fs.Int("frames", 0, h.Frames)
		fps      = fs.Int("fps", 0, h.FPS)
		steps    = fs.Int("steps", 0, h.Steps)
		seed     = fs.Int64("seed", 0, h.Seed)
		out      = fs.String("out", "", `output .mp4 file, or a folder for a name made from the prompt (default "outputs/"); existing files are never overwritten`)
		backend  = fs.String("backend", "", `compute backend: "go" (pure Go, CPU) or "xla:cuda" (default: $GOMLX_BACKEND, else go)`)
		dtype    = fs.String("dtype", "", `compute precision: "f32" or "bf16" (default: f32 on the go backend, bf16 on accelerators)`)
		cache    = fs.String("prompt-cache", "", "folder caching encoded prompts (a repeated prompt skips the text encoder)")
		memory   = fs.String("memory", "", `"one_resident" (default: one heavyweight component loaded at a time) or "all_resident"`)
		plan     = fs.Bool("plan", false, "print the generation plan and exit without generating")
		asJSON   = fs.Bool("json", false, "print the plan (with -plan) or the result summary as JSON on stdout")
	)
	var applyExtra func(*fastvideo.Request, map[string]bool)
	if c.Extra != nil {
		applyExtra = c.Extra(fs)
	}
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
	req := fastvideo.Request{
		Prompt: *prompt, NegativePrompt: *negative, Height: *height, Width: *width, NumFrames: *frames,
		FPS: *fps, NumInferenceSteps: *steps, OutputPath: *out, Preset: *preset,
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["seed"] {
		req.Seed = fastvideo.Ptr(*seed)
	}
	if applyExtra != nil {
		applyExtra(&req, set)
	}
	opts := []fastvideo.Option{fastvideo.WithBackend(*backend), fastvideo.WithDType(fastvideo.DType(*dtype)),
		fastvideo.WithPromptCache(*cache), fastvideo.WithMemoryPolicy(fastvideo.MemoryPolicy(*memory))}

	if *plan {
		p, err := fastvideo.Plan(*model, req, opts...)
		if err != nil {
			return c.fail(stderr, err)
		}
		if *asJSON {
			return c.printJSON(stdout, stderr, p)
		}
		if err := p.WriteTable(stdout); err != nil {
			return c.fail(stderr, err)
		}
		return 0
	}

	// Bad input fails here in microseconds, before the backend starts.
	if err := fastvideo.Validate(*model, req); err != nil {
		return c.fail(stderr, err)
	}
	start := time.Now()
	g, err := fastvideo.New(ctx, *model, opts...)
	if err != nil {
		return c.fail(stderr, err)
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
		return c.fail(stderr, err)
	}
	if *asJSON {
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

// fail reports err and returns 2 for invalid input, 1 otherwise.
func (c Command) fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
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
