// Command t2va generates a video with synchronized stereo audio from a text prompt with MiniMax H3 /
// FastH3, or plans a generation without running it.
//
//	go run ./examples/t2va -prompt "a red fox" -out clip.mp4                 # tiny-h3: random weights, seconds on a CPU
//	go run ./examples/t2va -model /models/FastH3 -prompt "a red fox" -out clip.mp4 -backend xla:cuda
//	go run ./examples/t2va -plan -json -model fasth3 -height 480 -width 832 -frames 124 -steps 4
//	go run ./examples/t2va -prompt "a red fox" -out clip.mp4 -height 128 -width 192 -fast-spatial -upsample cubic
//	go run ./examples/t2va -prompt "a red fox" -out clip.mp4 -frames 39 -fast -fast-spatial   # tiny-h3 carries a random RIFE
//
// The default model, tiny-h3, is the H3 architecture at toy width with seeded random weights made in
// memory: it runs anywhere without a download and its output is noise. Pass a MiniMax H3 or FastH3
// snapshot folder with -model for real videos.
//
// Exit codes: 0 success, 1 runtime failure, 2 invalid input (flags or request).
package main

import (
	"context"
	"flag"
	"io"

	"fastvideo/examples/internal/cli"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/h3"
)

var command = cli.Command{
	Name:         "t2va",
	Summary:      "generate a video with stereo audio from a text prompt with MiniMax H3 / FastH3 (or plan it with -plan)",
	DefaultModel: "tiny-h3",
	Help: cli.Help{
		Model:    "model: tiny-h3 (built in, random weights), a MiniMax H3 / FastH3 snapshot folder, or fasth3 / h3 (with -plan)",
		Preset:   "preset name (empty: the model's default)",
		Prompt:   `text prompt; speech as "(S1) A presenter says <d>[English] Hello.</d>"`,
		Negative: "negative prompt (MiniMax H3 accepts none)",
		Height:   "output height in pixels, a multiple of 32 (0: preset)",
		Width:    "output width in pixels, a multiple of 32 (0: preset)",
		Frames:   "frames, aligned up to 17n+5; 5-15 s at 24 fps for the released models (0: preset)",
		FPS:      "frames per second; H3 generates 24 (0: preset)",
		Steps:    "DiT forwards: 4 for FastH3, 49 for the base model (0: preset)",
		Seed:     "random seed (default: the preset's, 0)",
	},
	Extra: func(fs *flag.FlagSet) func(*fastvideo.Request, map[string]bool) error {
		lastImage := fs.String("last-image", "", "last-frame image (PNG or JPEG) for first/last-keyframe generation (FL2VA)")
		vsa := cli.DefineVSA(fs, "FastH3", "the checkpoint's schedule contract, else 0.9")
		return func(req *fastvideo.Request, set map[string]bool) error {
			req.LastImagePath = *lastImage
			return vsa.Apply(set, func(off bool, sparsity *float64) {
				req.Options = &h3.Options{VSA: &h3.VSA{Off: off, Sparsity: sparsity}}
			})
		}
	},
}

func main() { command.Main() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return command.Run(ctx, args, stdout, stderr)
}
