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
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"fastvideo/examples/internal/cli"
	"fastvideo/fastvideo"
	"fastvideo/fastvideo/wan"
)

var command = cli.Command{
	Name:         "t2v",
	Summary:      "generate a video from a text prompt with a Wan / FastWan model (or plan it with -plan)",
	DefaultModel: "tiny-wan",
	Help: cli.Help{
		Model:    "model: tiny-wan (built in, random weights), a Wan / FastWan snapshot folder, or wan2.1-t2v-1.3b, fastwan2.1-t2v-1.3b, wan2.2-ti2v-5b, ... (with -plan)",
		Preset:   "preset name (empty: the model's default; tiny-wan: tiny_wan_dmd or tiny_wan_t2v)",
		Prompt:   "text prompt",
		Negative: "negative prompt for classifier-free guidance (empty: the preset's; base models only)",
		Height:   "output height in pixels, a multiple of 16 (Wan2.1) or 32 (Wan2.2) (0: preset)",
		Width:    "output width in pixels, a multiple of 16 (Wan2.1) or 32 (Wan2.2) (0: preset)",
		Frames:   "frames, 4n+1 (0: preset)",
		FPS:      "frames per second of the file (0: preset, 16 or 24)",
		Steps:    "UniPC steps for base models; FastWan runs its 3 DMD steps (0: preset)",
		Seed:     "random seed (default: the preset's, 1024)",
	},
	Extra: func(fs *flag.FlagSet) func(*fastvideo.Request, map[string]bool) error {
		guidance := fs.Float64("guidance-scale", 0, "classifier-free guidance scale, > 1 enables it (0: preset; FastWan: none)")
		warp := fs.Bool("warp-denoising-steps", false, "FastWan: feed the DMD rungs warped onto the flow-shift grid (the MLX Wan2.2-5B recipe)")
		vsa := cli.DefineVSA(fs, "FastWan", "the model's, 0.8 for 1.3B, 0.9 for 14B")
		applyWindow := defineWindow(fs)
		applyRefine := defineRefine(fs)
		return func(req *fastvideo.Request, set map[string]bool) error {
			req.GuidanceScale = *guidance
			if err := applyRefine(req, set); err != nil {
				return err
			}
			var opts wan.Options
			err := vsa.Apply(set, func(off bool, sparsity *float64) { opts.VSA = &wan.VSA{Off: off, Sparsity: sparsity} })
			if err != nil {
				return err
			}
			if err := applyWindow(&opts, set, vsa.Chooses(set)); err != nil {
				return err
			}
			if set["warp-denoising-steps"] {
				opts.WarpDenoisingSteps = fastvideo.Ptr(*warp)
			}
			if opts.VSA != nil || opts.AttentionWindow != nil || opts.WarpDenoisingSteps != nil {
				req.Options = &opts
			}
			return nil
		}
	},
}

func main() { command.Main() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return command.Run(ctx, args, stdout, stderr)
}

// defineWindow registers the attention window flags (the MLX Wan runtime's FASTVIDEO_MLX_WINDOW and
// FASTVIDEO_MLX_WINDOW_SINK) and returns what applies them; otherAttention says -dense-attention, -vsa
// or -vsa-sparsity is set, which a window excludes.
func defineWindow(fs *flag.FlagSet) func(*wan.Options, map[string]bool, bool) error {
	tokens := fs.Int("attention-window", 0, "windowed self-attention: each token sees the tokens within N/2 of it (frame-major: N = 2k × a latent frame's tokens spans about ±k frames; -plan shows both); a research knob: the checkpoints are dense-trained and the video drifts; excludes -vsa and -dense-attention (0: off)")
	sink := fs.Int("attention-window-sink", 0, "with -attention-window: the leading tokens every query also sees (0: none)")
	return func(opts *wan.Options, set map[string]bool, otherAttention bool) error {
		if !set["attention-window"] && !set["attention-window-sink"] {
			return nil
		}
		if otherAttention && *tokens != 0 {
			return &fastvideo.RequestError{Field: "attention_window", Value: *tokens,
				Allowed: "0 with -dense-attention, -vsa or -vsa-sparsity: use one attention choice"}
		}
		opts.AttentionWindow = &wan.AttentionWindow{Tokens: *tokens, Sink: *sink}
		return nil
	}
}

// defineRefine registers the two-stage refine flags (the MLX Wan CLI's --refine, --refine-scale,
// --refine-dmd-denoising-steps, --refine-sigma, --refine-add-noise, --refine-upsample-mode) and
// returns what applies them.
func defineRefine(fs *flag.FlagSet) func(*fastvideo.Request, map[string]bool) error {
	refine := fs.Bool("refine", false, "FastWan (DMD models): two-stage refine: denoise at the size divided by -refine-scale, upsample and re-noise the latents, denoise again at the full size (wins over -fast-spatial)")
	scale := fs.Int("refine-scale", 0, "with -refine: how many times smaller each side of stage 1 is (0: 2)")
	steps := fs.String("refine-steps", "", "with -refine: stage-2 DMD timesteps, a comma list such as 757,522 (empty: the model's rungs without those at sigma 1)")
	sigma := fs.Float64("refine-sigma", 0, "with -refine: hand-off sigma in [0, 1] (default: the sigma of the first stage-2 timestep; another value warns)")
	noise := fs.Bool("refine-add-noise", true, "with -refine: re-noise the upsampled latents to the hand-off sigma (false: hand off the clean upsample)")
	upsample := fs.String("refine-upsample", "", "with -refine: latent upsampling, bilinear or nearest (empty: bilinear)")
	return func(req *fastvideo.Request, set map[string]bool) error {
		req.Refine, req.RefineScale, req.RefineUpsample = *refine, *scale, *upsample
		if set["refine-sigma"] {
			req.RefineSigma = fastvideo.Ptr(*sigma)
		}
		if set["refine-add-noise"] {
			req.RefineAddNoise = fastvideo.Ptr(*noise)
		}
		if !set["refine-steps"] {
			return nil
		}
		req.RefineSteps = []int{}
		for _, f := range strings.Split(*steps, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return &fastvideo.RequestError{Field: "refine_steps", Value: *steps,
					Allowed: fmt.Sprintf("a comma list of integer timesteps such as 757,522 (%q is not one)", f)}
			}
			req.RefineSteps = append(req.RefineSteps, n)
		}
		return nil
	}
}
