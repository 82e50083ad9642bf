// Command t2va generates a video with synchronized stereo audio from a text
// prompt with MiniMax H3 / FastH3, and plans a generation without running it.
//
//	go run ./examples/t2va -plan -json -model fasth3 -height 480 -width 832 -frames 124 -steps 4
//
// Exit codes: 0 success, 1 runtime failure, 2 invalid input (flags or request).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"fastvideo/fastvideo"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("t2va", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model    = fs.String("model", "fasth3", "model: fasth3, h3, tiny-h3 or a MiniMax H3 model folder")
		preset   = fs.String("preset", "", "preset name (empty: the model's default)")
		prompt   = fs.String("prompt", "", `text prompt; speech as "(S1) A presenter says <d>[English] Hello.</d>"`)
		negative = fs.String("negative-prompt", "", "negative prompt (MiniMax H3 accepts none)")
		height   = fs.Int("height", 0, "output height in pixels, a multiple of 32 (0: preset)")
		width    = fs.Int("width", 0, "output width in pixels, a multiple of 32 (0: preset)")
		frames   = fs.Int("frames", 0, "frames, aligned up to 17n+5; 5-15 s at 24 fps (0: preset)")
		fps      = fs.Int("fps", 0, "frames per second; H3 generates 24 (0: preset)")
		steps    = fs.Int("steps", 0, "DiT forwards: 4 for FastH3, 49 for the base model (0: preset)")
		seed     = fs.Int64("seed", 0, "random seed (default: the preset's, 0)")
		out      = fs.String("out", "", "output .mp4 path")
		backend  = fs.String("backend", "", `compute backend, e.g. "go" or "xla:cuda" (default: GOMLX_BACKEND)`)
		fast     = fs.Bool("fast", false, "temporal fast mode: generate about half the frames and interpolate")
		spatial  = fs.Bool("fast-spatial", false, "spatial fast mode: generate at half size and resample")
		plan     = fs.Bool("plan", false, "print the generation plan and exit without generating")
		asJSON   = fs.Bool("json", false, "with -plan: print the plan as JSON")
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

	if *plan {
		p, err := fastvideo.Plan(*model, req, fastvideo.WithBackend(*backend))
		if err != nil {
			return fail(stderr, err)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(p); err != nil {
				return fail(stderr, err)
			}
			return 0
		}
		if err := p.WriteTable(stdout); err != nil {
			return fail(stderr, err)
		}
		return 0
	}
	if *asJSON {
		fmt.Fprintln(stderr, "t2va: -json only applies to -plan")
		return 2
	}
	if err := fastvideo.Validate(*model, req); err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintln(stderr, "generation is not implemented yet; use -plan")
	return 1
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
